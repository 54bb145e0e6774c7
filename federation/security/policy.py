"""Per-caller policy and the gate the coordinator asks before it ships anything.

A :class:`CallerPolicy` bounds what one caller may do: which sites and partitions, how many
GPUs and node-hours per task, how many node-hours per day (a rolling 24 hours, counted from
the audit log), which shell commands and catalog functions. :class:`PolicySet` maps caller
names to policies (from ``$FEDERATION_HOME/policy.yaml``, JSON works too); a token's caller
may also carry its policy in the token store (``federation token issue NAME --policy F``).

The :class:`PolicyGate` runs twice per submission:

1. :meth:`PolicyGate.narrow` before placement: the envelope is narrowed to the allowed sites
   and partitions (and GPU cap), so placement only considers what the caller may use.
2. :meth:`PolicyGate.enforce` after placement, on the granted shape: the outcome is
   ``allowed`` (ship it), ``denied`` (:class:`PolicyViolationError` naming the rule and its
   limit; nothing is submitted) or ``unresolved``: the task is held, a ``policy.unresolved``
   event is emitted, and an operator approves or rejects it. A task is unresolved when a
   limit marked ``on_exceed: hold`` is exceeded, when the caller's policy says
   ``require_approval``, or when its charge exceeds what remains of the allocation of the
   account its partition is charged to (the budget rule, for every caller), both in the
   site's own unit (:mod:`federation.core.charge`: core-hours, GPU-hours, node-hours).

Every outcome is written to the audit log.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from federation.core.charge import shape_charge, unit_label, units_agree
from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.errors import FederationError, UnknownSiteError
from federation.core.model import Frozen
from federation.core.paths import federation_home
from federation.core.snapshot import AllocationScope, FederationSnapshot, SiteSnapshot
from federation.core.spec import PartitionSpec, SiteSpec, load_site
from federation.core.tasks import ShellTask, TaskSpec
from federation.security.audit import (
    MAX_WHAT_CHARS,
    AuditDecision,
    AuditLog,
    AuditRecord,
    default_audit_db,
)
from federation.security.caller import (  # "X as X": re-exported for importers
    LOCAL_CALLER as LOCAL_CALLER,
)
from federation.security.caller import (
    POLICY_FILE,
    SHELL_SYNTAX,
    PolicySource,
    load_policies,
)
from federation.security.caller import (
    CallerPolicy as CallerPolicy,
)
from federation.security.caller import (
    PolicySet as PolicySet,
)

logger = logging.getLogger(__name__)

Verdict = Literal["allowed", "denied", "unresolved"]


class Finding(Frozen):
    """One rule that objected: its name, its limit, the value asked, and the verdict."""

    rule: str
    limit: str
    value: str
    message: str
    hold: bool = False
    """True: the task may still run if an operator approves; False: refused."""


class PolicyOutcome(Frozen):
    """The gate's answer for one task on one granted shape."""

    verdict: Verdict
    caller: str
    findings: tuple[Finding, ...] = ()
    node_hours: float = 0.0
    core_hours: float = 0.0
    gpus: int = 0
    charge: float | None = None
    """What the site bills for the shape's walltime, in ``charge_unit`` (its own)."""
    charge_unit: str | None = None

    @property
    def held(self) -> bool:
        return self.verdict == "unresolved"

    def summary(self) -> str:
        if not self.findings:
            return "allowed"
        return "; ".join(f.message for f in self.findings)


class PolicyViolationError(FederationError, PermissionError):
    """A caller asked for something its policy does not allow; nothing was submitted."""

    def __init__(self, caller: str, findings: tuple[Finding, ...]) -> None:
        self.caller = caller
        self.findings = findings
        rules = ", ".join(f.rule for f in findings)
        detail = "; ".join(f.message for f in findings)
        super().__init__(
            f"policy refuses this task for caller {caller!r} ({rules}): {detail}. "
            "Nothing was submitted: shrink the request to fit, or ask an operator to "
            "change the caller's policy."
        )


def shape_node_hours(shape: Shape) -> float:
    return shape.nodes * shape.walltime_s / 3600.0


def shape_core_hours(shape: Shape) -> float:
    return shape.nodes * shape.cpus * shape.walltime_s / 3600.0


def task_kind(task: TaskSpec) -> Literal["shell", "python"]:
    return "shell" if isinstance(task, ShellTask) else "python"


def task_what(task: TaskSpec) -> str:
    """The command (truncated) or the function's qualified name, for the audit log."""
    if isinstance(task, ShellTask):
        cmd = task.command
        return cmd if len(cmd) <= MAX_WHAT_CHARS else cmd[:MAX_WHAT_CHARS] + "...(truncated)"
    fn = task.fn
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"[:200]


def _partition_allowed(site: str, partition: str, allowed: tuple[str, ...]) -> bool:
    return partition in allowed or f"{site}:{partition}" in allowed


def _narrow_partitions(requested: tuple[str, ...], allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The entries of ``requested`` (``site:part`` or ``part``) that ``allowed`` permits."""
    if not requested:
        return allowed
    out: list[str] = []
    for r in requested:
        r_site, _, r_part = r.rpartition(":")
        for a in allowed:
            a_site, _, a_part = a.rpartition(":")
            if r_part != a_part or (r_site and a_site and r_site != a_site):
                continue
            narrow = r if r_site or not a_site else a
            if narrow not in out:
                out.append(narrow)
    return tuple(out)


class PolicyGate:
    """Decides, before anything is shipped, whether a caller's task may run (and audits it).

    Args:
        policies: policies by caller (default: no limits for anyone).
        audit: where decisions are recorded (default: in memory).
        tokens: a second source of per-caller policies (the token store).
        budget: apply the allocation budget rule (held when a task's charge, in the site's
            unit, exceeds what remains of its account's allocation).
        sites: the sites' facts, for charges (others are read from ``endpoint_configs``).
    """

    def __init__(
        self,
        policies: PolicySet | None = None,
        audit: AuditLog | None = None,
        *,
        tokens: PolicySource | None = None,
        budget: bool = True,
        sites: Iterable[SiteSpec] = (),
    ) -> None:
        self.policies = policies or PolicySet()
        self.audit = audit or AuditLog()
        self.tokens = tokens
        self.budget = budget
        self._sites: dict[str, SiteSpec | None] = {}
        self.know_sites(sites)

    def know_sites(self, sites: Iterable[SiteSpec]) -> None:
        """Charge shapes on these sites by these facts (the coordinator's own)."""
        self._sites.update({s.name: s for s in sites})

    def _partition(self, shape: Shape) -> tuple[SiteSpec | None, PartitionSpec | None]:
        if shape.site not in self._sites:  # a site never named: its endpoint_configs facts
            try:
                self._sites[shape.site] = load_site(shape.site)
            except (UnknownSiteError, OSError, ValueError):
                self._sites[shape.site] = None
        site = self._sites[shape.site]
        if site is None:
            return None, None
        return site, next((p for p in site.partitions if p.name == shape.partition), None)

    def charge(self, shape: Shape) -> tuple[float, str]:
        """What ``shape`` costs for its walltime, and the unit: the partition's own
        (:meth:`PartitionSpec.charge`), or core-hours where the partition is not known."""
        _, part = self._partition(shape)
        if part is None:
            return shape_core_hours(shape), "core-hours"
        return shape_charge(part, shape), part.charge_unit

    @classmethod
    def from_home(cls, home: Path | None = None, tokens_db: Path | None = None) -> PolicyGate:
        """Policies from ``home/policy.yaml`` (if present) and the token store (``tokens_db``,
        default the home's); audit in ``home/audit.db``."""
        from federation.security.tokens import TokenStore, default_token_db

        h = home or federation_home()
        path = h / POLICY_FILE
        policies = load_policies(path) if path.exists() else PolicySet()
        tokens = TokenStore(tokens_db or default_token_db(h))
        return cls(policies, AuditLog(default_audit_db(h)), tokens=tokens)

    # --- lookup ------------------------------------------------------------------------------
    def policy_for(self, caller: str) -> CallerPolicy | None:
        """The caller's policy: its own entry, then its token's, then the default."""
        own = self.policies.callers.get(caller)
        if own is not None:
            return own
        if self.tokens is not None:
            from_token = self.tokens.policy_for(caller)
            if from_token is not None:
                return from_token
        if caller == LOCAL_CALLER:
            return CallerPolicy()
        return self.policies.default

    def is_operator(self, caller: str) -> bool:
        pol = self.policy_for(caller)
        return caller == LOCAL_CALLER or (pol is not None and pol.operator)

    def _require(self, caller: str, task: TaskSpec | None) -> CallerPolicy:
        pol = self.policy_for(caller)
        if pol is None:
            f = Finding(
                rule="unknown_caller",
                limit="callers listed in the policy file",
                value=caller,
                message=f"no policy for caller {caller!r} and no default policy",
            )
            self._deny(caller, task, None, (f,))
        assert pol is not None
        return pol

    # --- before placement --------------------------------------------------------------------
    def narrow(
        self, caller: str, envelope: ResourceEnvelope, task: TaskSpec | None = None
    ) -> ResourceEnvelope:
        """``envelope`` narrowed to what ``caller`` may use; raises if nothing is left.

        Raises :class:`PolicyViolationError` (audited) when the envelope asks only for
        sites or partitions the caller may not use, or more GPUs than a hard limit allows.
        """
        pol = self._require(caller, task)
        update: dict[str, Any] = {}
        findings: list[Finding] = []
        if pol.allowed_sites is not None:
            sites = (
                tuple(s for s in envelope.sites if s in pol.allowed_sites)
                if envelope.sites
                else pol.allowed_sites
            )
            if not sites:
                findings.append(
                    Finding(
                        rule="allowed_sites",
                        limit=", ".join(pol.allowed_sites) or "(none)",
                        value=", ".join(envelope.sites),
                        message=f"sites {list(envelope.sites)} are not among the allowed "
                        f"sites {list(pol.allowed_sites)}",
                    )
                )
            update["sites"] = sites
        if pol.allowed_partitions is not None:
            parts = _narrow_partitions(envelope.partitions, pol.allowed_partitions)
            if not parts:
                findings.append(
                    Finding(
                        rule="allowed_partitions",
                        limit=", ".join(pol.allowed_partitions) or "(none)",
                        value=", ".join(envelope.partitions),
                        message=f"partitions {list(envelope.partitions)} are not among the "
                        f"allowed partitions {list(pol.allowed_partitions)}",
                    )
                )
            update["partitions"] = parts
        if pol.max_gpus_per_task is not None and pol.on_exceed == "deny":
            cap = pol.max_gpus_per_task // envelope.nodes
            if envelope.gpus_min * envelope.nodes > pol.max_gpus_per_task:
                findings.append(self._gpu_finding(pol, envelope.gpus_min * envelope.nodes))
            elif envelope.gpus_max is None or envelope.gpus_max > cap:
                update["gpus_max"] = cap
        if findings:
            self._deny(caller, task, None, tuple(findings))
        return envelope.model_copy(update=update) if update else envelope

    @staticmethod
    def _gpu_finding(pol: CallerPolicy, gpus: int) -> Finding:
        return Finding(
            rule="max_gpus_per_task",
            limit=f"{pol.max_gpus_per_task} GPUs",
            value=f"{gpus} GPUs",
            message=f"{gpus} GPUs asked, the limit is {pol.max_gpus_per_task} per task",
            hold=pol.on_exceed == "hold",
        )

    # --- after placement ---------------------------------------------------------------------
    def evaluate(
        self,
        caller: str,
        task: TaskSpec,
        shape: Shape,
        snapshot: FederationSnapshot | None = None,
        now: datetime | None = None,
    ) -> PolicyOutcome:
        """The verdict for ``task`` on the granted ``shape`` (pure apart from reading the
        audit log for the daily total; nothing is recorded)."""
        pol = self.policy_for(caller)
        node_h = shape_node_hours(shape)
        core_h = shape_core_hours(shape)
        charge, unit = self.charge(shape)
        gpus = shape.gpus * shape.nodes
        findings: list[Finding] = []
        if pol is None:
            findings.append(
                Finding(
                    rule="unknown_caller",
                    limit="callers listed in the policy file",
                    value=caller,
                    message=f"no policy for caller {caller!r} and no default policy",
                )
            )
        else:
            findings.extend(self._task_findings(pol, task))
            findings.extend(self._shape_findings(pol, shape))
            findings.extend(self._limit_findings(pol, caller, node_h, gpus, now))
            if pol.require_approval:
                findings.append(
                    Finding(
                        rule="require_approval",
                        limit="every task approved by an operator",
                        value="-",
                        message=f"caller {caller!r} needs an operator's approval for every task",
                        hold=True,
                    )
                )
        if self.budget and snapshot is not None:
            findings.extend(self._budget_findings(shape, charge, unit, snapshot))
        if any(not f.hold for f in findings):
            verdict: Verdict = "denied"
        elif findings:
            verdict = "unresolved"
        else:
            verdict = "allowed"
        return PolicyOutcome(
            verdict=verdict,
            caller=caller,
            findings=tuple(findings),
            node_hours=round(node_h, 6),
            core_hours=round(core_h, 6),
            gpus=gpus,
            charge=round(charge, 6),
            charge_unit=unit,
        )

    def enforce(
        self,
        caller: str,
        task: TaskSpec,
        shape: Shape,
        snapshot: FederationSnapshot | None,
        *,
        task_id: str,
        label: str = "",
    ) -> PolicyOutcome:
        """Evaluate and audit; raises :class:`PolicyViolationError` when denied."""
        outcome = self.evaluate(caller, task, shape, snapshot)
        self.record(outcome.verdict, caller, task, shape, outcome, task_id=task_id, label=label)
        if outcome.verdict == "denied":
            raise PolicyViolationError(caller, tuple(f for f in outcome.findings if not f.hold))
        return outcome

    def _task_findings(self, pol: CallerPolicy, task: TaskSpec) -> list[Finding]:
        out: list[Finding] = []
        if isinstance(task, ShellTask):
            if pol.allowed_commands is None:
                return out
            cmd = task.command.strip()
            shown = cmd if len(cmd) <= 80 else cmd[:77] + "..."
            if SHELL_SYNTAX.search(cmd):
                out.append(
                    Finding(
                        rule="allowed_commands",
                        limit="one command matching " + ", ".join(pol.allowed_commands),
                        value=shown,
                        message=f"command {shown!r} chains or redirects commands "
                        "(; & | < > ` $( or a newline), which this caller may not do",
                    )
                )
            elif not any(fnmatch.fnmatchcase(cmd, p) for p in pol.allowed_commands):
                out.append(
                    Finding(
                        rule="allowed_commands",
                        limit=", ".join(pol.allowed_commands) or "(none)",
                        value=shown,
                        message=f"command {shown!r} matches none of the allowed commands "
                        f"{list(pol.allowed_commands)}",
                    )
                )
            return out
        if pol.allowed_functions is not None:
            name = getattr(task.fn, "__name__", "")
            if name not in pol.allowed_functions:
                out.append(
                    Finding(
                        rule="allowed_functions",
                        limit=", ".join(pol.allowed_functions) or "(none)",
                        value=name,
                        message=f"function {name!r} is not among the allowed functions "
                        f"{list(pol.allowed_functions)}",
                    )
                )
        return out

    def _shape_findings(self, pol: CallerPolicy, shape: Shape) -> list[Finding]:
        out: list[Finding] = []
        if pol.allowed_sites is not None and shape.site not in pol.allowed_sites:
            out.append(
                Finding(
                    rule="allowed_sites",
                    limit=", ".join(pol.allowed_sites) or "(none)",
                    value=shape.site,
                    message=f"site {shape.site!r} is not among the allowed sites "
                    f"{list(pol.allowed_sites)}",
                )
            )
        if pol.allowed_partitions is not None and not _partition_allowed(
            shape.site, shape.partition, pol.allowed_partitions
        ):
            out.append(
                Finding(
                    rule="allowed_partitions",
                    limit=", ".join(pol.allowed_partitions) or "(none)",
                    value=f"{shape.site}:{shape.partition}",
                    message=f"partition {shape.site}:{shape.partition} is not among the "
                    f"allowed partitions {list(pol.allowed_partitions)}",
                )
            )
        return out

    def _limit_findings(
        self, pol: CallerPolicy, caller: str, node_h: float, gpus: int, now: datetime | None
    ) -> list[Finding]:
        out: list[Finding] = []
        hold = pol.on_exceed == "hold"
        if pol.max_gpus_per_task is not None and gpus > pol.max_gpus_per_task:
            out.append(self._gpu_finding(pol, gpus))
        if pol.max_node_hours_per_task is not None and node_h > pol.max_node_hours_per_task:
            out.append(
                Finding(
                    rule="max_node_hours_per_task",
                    limit=f"{pol.max_node_hours_per_task:g} node-hours",
                    value=f"{node_h:.2f} node-hours",
                    message=f"{node_h:.2f} node-hours (nodes x walltime) asked, the limit is "
                    f"{pol.max_node_hours_per_task:g} per task",
                    hold=hold,
                )
            )
        if pol.max_node_hours_per_day is not None:
            used = self.audit.node_hours_last_day(caller, now)
            if used + node_h > pol.max_node_hours_per_day:
                out.append(
                    Finding(
                        rule="max_node_hours_per_day",
                        limit=f"{pol.max_node_hours_per_day:g} node-hours per 24 h",
                        value=f"{used:.2f} used + {node_h:.2f} asked",
                        message=f"{used:.2f} node-hours used in the last 24 h plus "
                        f"{node_h:.2f} for this task exceeds the daily limit of "
                        f"{pol.max_node_hours_per_day:g}",
                        hold=hold,
                    )
                )
        return out

    def _allocation(self, site: SiteSnapshot, shape: Shape) -> AllocationScope | None:
        """The allocation ``shape`` is charged to: its account's, else (no account named,
        or the partition's own) the one its partition is charged to."""
        if shape.account:
            found = site.allocation_of(shape.account)
            spec, part = self._partition(shape)
            own = spec.account_for(shape.partition) if spec and part else None
            if found is not None or own not in (None, shape.account):
                return found
        return site.allocation_for(shape.partition)

    def _budget_findings(
        self, shape: Shape, charge: float, unit: str, snapshot: FederationSnapshot
    ) -> list[Finding]:
        site = snapshot.site(shape.site)
        alloc = self._allocation(site, shape) if site is not None else None
        if alloc is None or not units_agree(unit, alloc.unit):
            return []
        remaining = alloc.remaining_units
        if remaining is None or charge <= remaining:
            return []
        label = unit_label(unit)
        left = unit_label(alloc.unit or unit)
        return [
            Finding(
                rule="allocation_budget",
                limit=f"{remaining:.2f} {left} left of {alloc.limit_units:g} "
                f"(account {alloc.account})",
                value=f"{charge:.2f} {label}",
                message=f"{charge:.2f} {label} would exceed the {remaining:.2f} {left} left "
                f"in allocation {alloc.account} on {shape.site}",
                hold=True,
            )
        ]

    # --- the record --------------------------------------------------------------------------
    def record(
        self,
        decision: AuditDecision,
        caller: str,
        task: TaskSpec | None,
        shape: Shape | None,
        outcome: PolicyOutcome | None = None,
        *,
        task_id: str | None = None,
        label: str = "",
        message: str | None = None,
        actor: str | None = None,
    ) -> AuditRecord:
        findings = outcome.findings if outcome is not None else ()
        charge: tuple[float, str] | None = None
        if outcome is not None and outcome.charge is not None and outcome.charge_unit:
            charge = (outcome.charge, outcome.charge_unit)
        elif shape is not None:
            charge = self.charge(shape)
        rec = AuditRecord(
            at=datetime.now(UTC),
            caller=caller,
            task_id=task_id,
            label=label or (task.label if task is not None else ""),
            task_kind=task_kind(task) if task is not None else "shell",
            what=task_what(task) if task is not None else "",
            site=shape.site if shape else None,
            partition=shape.partition if shape else None,
            shape=shape.describe() if shape else None,
            nodes=shape.nodes if shape else None,
            cpus=shape.cpus if shape else None,
            gpus=shape.gpus * shape.nodes if shape else None,
            walltime_s=shape.walltime_s if shape else None,
            node_hours=round(shape_node_hours(shape), 6) if shape else None,
            core_hours=round(shape_core_hours(shape), 6) if shape else None,
            charge=round(charge[0], 6) if charge else None,
            charge_unit=charge[1] if charge else None,
            decision=decision,
            rules=tuple(f.rule for f in findings),
            message=message if message is not None else "; ".join(f.message for f in findings),
            actor=actor,
        )
        return self.audit.append(rec)

    def _deny(
        self, caller: str, task: TaskSpec | None, shape: Shape | None, findings: tuple[Finding, ...]
    ) -> None:
        outcome = PolicyOutcome(verdict="denied", caller=caller, findings=findings)
        self.record("denied", caller, task, shape, outcome)
        logger.info("policy denied a task of %s: %s", caller, outcome.summary())
        raise PolicyViolationError(caller, findings)
