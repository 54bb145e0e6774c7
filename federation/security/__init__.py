"""Who may run what where: per-caller policy, the gate that enforces it, held tasks, audit.

- :mod:`.caller`: :class:`CallerPolicy` (allowed sites/partitions, GPU and node-hour
  limits, allowed commands and catalog functions), :class:`PolicySet` (loaded from
  ``$FEDERATION_HOME/policy.yaml``); :mod:`.policy`: :class:`PolicyGate`, which the coordinator asks
  before anything is shipped: allowed, denied (:class:`PolicyViolationError`), or
  unresolved (held for an operator).
- :mod:`.held`: tasks held for an operator's decision, durable in the coordinator's store.
- :mod:`.audit`: the append-only record of who ran what where.
"""

from federation.security.audit import AuditLog, AuditRecord
from federation.security.caller import LOCAL_CALLER, CallerPolicy, PolicySet, load_policies
from federation.security.held import HeldTask, HeldTasks
from federation.security.policy import Finding, PolicyGate, PolicyOutcome, PolicyViolationError

__all__ = [
    "LOCAL_CALLER",
    "AuditLog",
    "AuditRecord",
    "CallerPolicy",
    "Finding",
    "HeldTask",
    "HeldTasks",
    "PolicyGate",
    "PolicyOutcome",
    "PolicySet",
    "PolicyViolationError",
    "load_policies",
]
