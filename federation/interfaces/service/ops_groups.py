"""Group operations of :class:`~federation.interfaces.service.ops.LocalOps`: submit a group
of tasks (all or nothing) and read one back, for its caller only."""

from __future__ import annotations

import logging
import threading
import uuid

from federation.core.errors import NoFeasibleSiteError
from federation.core.snapshot import FederationSnapshot
from federation.core.tasks import TaskSpec
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import (
    GroupRequest,
    GroupResponse,
    GroupView,
    TaskRequest,
    child_names,
    group_view,
)
from federation.interfaces.service.ownership import Ownership, not_found
from federation.interfaces.service.snapshot_cache import SnapshotCache
from federation.interfaces.service.translate import translate
from federation.placement.candidates import PlacementDecision
from federation.runtime.coordinator import Coordinator
from federation.runtime.groups import GroupHandle
from federation.security.policy import LOCAL_CALLER

__all__ = ["GroupOps"]

logger = logging.getLogger("federation.interfaces.service.ops")


class GroupOps:
    """Groups, mixed into :class:`~federation.interfaces.service.ops.LocalOps`."""

    coord: Coordinator
    owners: Ownership
    cache: SnapshotCache
    _lock: threading.Lock

    def task_spec(self, req: TaskRequest) -> TaskSpec:
        raise NotImplementedError

    # --- groups -------------------------------------------------------------------------------
    def submit_group(self, req: GroupRequest, caller: str = "") -> GroupResponse:
        """Check every child (arguments, sites, feasibility), then submit them all.

        A child that fits nowhere refuses the whole group before anything is submitted.
        """
        names = child_names(req.children)
        tasks = [self.task_spec(c) for c in req.children]
        snap = self.cache.get()
        refused: dict[str, dict[str, str]] = {}
        for name, task, child in zip(names, tasks, req.children, strict=True):
            unknown = [s for s in child.envelope.sites if s not in self.coord.backends]
            if unknown:
                raise OpsError(
                    422,
                    "unknown_site",
                    f"child {name!r}: unknown site(s) {unknown}",
                    "use some of the known sites",
                    {"child": name, "known": sorted(self.coord.backends)},
                )
            try:
                decision = self.coord.plan(child.envelope, snap)
            except NoFeasibleSiteError as e:
                refused[name] = e.reasons
            except Exception as e:
                raise translate(e) from e
            else:
                self._check_policy(caller or LOCAL_CALLER, name, task, child, decision, snap)
        if refused:
            raise OpsError(
                409,
                "no_feasible_site",
                f"no site can host child(ren) {sorted(refused)}; nothing was submitted",
                "relax those children's envelopes; draft_envelope shows the nearest feasible one",
                {"reasons": refused},
            )
        cursor = self.owners.cursor(self.owners.who(caller))
        children = [(n, t, c.envelope) for n, t, c in zip(names, tasks, req.children, strict=True)]
        try:
            g = self.coord.submit_group(
                children,
                objective=req.objective,
                distinct_sites=req.distinct_sites,
                snapshot=snap,
                caller=caller or LOCAL_CALLER,
                needs={n: c.needs for n, c in zip(names, req.children, strict=True) if c.needs},
                workflow=req.workflow,
            )
        except NoFeasibleSiteError as e:
            raise OpsError(
                409,
                "no_feasible_site",
                str(e).splitlines()[0],
                "the sites changed while the group was placed; check get_group and retry "
                "the children that are missing",
                {"reasons": e.reasons},
            ) from e
        except Exception as e:
            raise translate(e) from e
        logger.info(
            "group %s (%d children) from %s placed on %s",
            g.id,
            len(g.children),
            caller or "(local)",
            ", ".join(c.handle.site if c.attempts else "(waiting)" for c in g.children),
        )
        return GroupResponse.model_validate(group_view(g).model_dump() | {"cursor": cursor})

    def _check_policy(
        self,
        caller: str,
        name: str,
        task: TaskSpec,
        child: TaskRequest,
        decision: PlacementDecision,
        snap: FederationSnapshot,
    ) -> None:
        """Refuse the whole group (403, audited) when the caller's policy denies a child on
        the shape it would get: before anything is shipped, not half-way through."""
        gate = self.coord.gate
        try:
            envelope = gate.narrow(caller, child.envelope, task)  # audits a denial itself
            shape = decision.chosen.shape
            if envelope != child.envelope:
                shape = self.coord.plan(envelope, snap).chosen.shape
            if gate.evaluate(caller, task, shape, snap).verdict == "denied":
                gate.enforce(caller, task, shape, snap, task_id=str(uuid.uuid4()), label=name)
        except NoFeasibleSiteError:
            return  # the group's own placement says so, per child, below
        except Exception as e:
            raise translate(e) from e

    def group_handle(self, group_id: str, caller: str = "", action: str = "read") -> GroupHandle:
        try:  # in memory while open; a finished one (or an earlier coordinator's) from the store
            g: GroupHandle | None = self.coord.groups.get(group_id)
        except KeyError:
            g = None
        if g is None or not self.owners.visible(
            self.owners.who(caller), "group", g.id, g.caller, action
        ):
            raise not_found("group", group_id)
        return g

    def group(self, group_id: str, caller: str = "") -> GroupView:
        return group_view(self.group_handle(group_id, caller))
