"""Recovery after a restart: every task the store knows is re-attached (finished ones come
back finished; open ones, and the copies of hedged ones, through their Globus Compute task
ids), ends the event log missed are reported, milestones watched and groups re-attached."""

from __future__ import annotations

import functools
import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from federation.core.errors import FederationError
from federation.runtime.handles import TaskCopy, TaskHandle
from federation.runtime.intents import Key, Settlement, Verdict, claimed_ids, settle
from federation.runtime.rows import copy_from_row, handle_from_row
from federation.sites.backend import ClaimingSite
from federation.sites.jobtags import SHIPMENT_GENERATIONS, shipment_tag

if TYPE_CHECKING:
    from federation.runtime.context import Runtime
    from federation.runtime.hedging import Hedging
    from federation.runtime.holds import Holds
    from federation.runtime.lifecycle import Lifecycle
    from federation.runtime.registry import TaskRegistry
    from federation.runtime.staging import Staging


logger = logging.getLogger(__name__)


class Recovery:
    """Re-attaches a restarted coordinator to the tasks, copies and groups of its store."""

    def __init__(
        self,
        rt: Runtime,
        reg: TaskRegistry,
        life: Lifecycle,
        hedging: Hedging,
        holds: Holds,
        staging: Staging,
    ) -> None:
        self.rt = rt
        self.reg = reg
        self.life = life
        self.hedging = hedging
        self.holds = holds
        self.staging = staging
        self.finished_ids: list[str] = []
        """Tasks the store has as finished at the latest restart (read back on demand)."""
        self.settlement = Settlement()

    def recover(self) -> list[TaskHandle]:
        """Re-attach to every task the store knows (after a restart); returns open ones.

        Finished tasks come back as finished handles (their results from the store); open
        ones are re-attached through their Globus Compute task ids, and complete (once) when
        their results arrive. A task whose submission the site never acknowledged is failed
        with that reason: its function was never shipped, so resubmit it.

        Hedged tasks (``task_copies`` in the store) are re-attached too. If no copy had
        started, every acknowledged copy is re-attached and the race goes on: the first
        copy reported started, or failing that the first to return a result (a start
        reported while no coordinator listened is not reported again), wins and the others
        are cancelled; a copy never acknowledged leaves the race. If a copy had won, only it
        is re-attached, and copies the earlier coordinator did not get to cancel are
        cancelled now (``task.hedge_cancelled``).
        """
        store = self.rt.store
        if store is None:
            raise FederationError("recover() needs a store: Coordinator(..., store=Store(path))")
        for held in self.rt.held.all():  # held or rejected by policy: never in the task table
            if held.state != "approved":
                self.holds.held_handle(held)
        reopened: list[TaskHandle] = []
        by_site: dict[tuple[str, str], list[TaskHandle]] = {}  # (site, owner)
        copy_rows: dict[str, list[dict[str, Any]]] = {}
        for r in store.task_copies():
            copy_rows.setdefault(r["task_id"], []).append(r)
        racing: list[TaskHandle] = []
        rows = store.tasks()
        self.settlement = self.settle(rows, copy_rows)
        resend: list[TaskHandle] = []
        self.finished_ids = []
        for row in rows:
            if row["id"] in self.reg.handles:
                continue
            if row["state"] in ("completed", "failed") and not any(
                c["state"] in ("queued", "cancelling") for c in copy_rows.get(row["id"], [])
            ):
                self.finished_ids.append(row["id"])  # stays in the store, not in memory
                continue
            claim = self.settlement.claimed_ids.get((row["id"], None))
            if claim is not None:  # the site accepted it before its id was recorded
                store.update_task(row["id"], compute_task_id=claim, ship_state="acked")
                row = {**row, "compute_task_id": claim}
            h = handle_from_row(row, self.rt.events)
            h.copies = [copy_from_row(r) for r in copy_rows.get(h.id, [])]
            for c in h.copies:
                cid = self.settlement.claimed_ids.get((h.id, c.index))
                if cid is not None:
                    c._recovered_compute_id = cid
                    store.update_task_copy(h.id, c.index, compute_task_id=cid, ship_state="acked")
            with self.reg.lock:
                self.reg.handles[h.id] = h
                self.reg.unindexed[h.id] = h
            if h.state in ("completed", "failed"):
                h._done.set()
                continue
            if h.copies and not h.attempts:  # a retry after the race runs as one task
                w = h.winner
                if w is None:  # no copy started yet: the race goes on
                    with self.reg.lock:
                        self.reg.unindexed.pop(h.id, None)
                    racing.append(h)
                    reopened.append(h)
                    continue
                # the copy is recorded before the row: the winner is the copy's
                h.decision = h.decision.model_copy(update={"chosen": w.candidate})
                row = {**row, "compute_task_id": w.compute_task_id}
            if row["compute_task_id"] is None:
                verdict = self.settlement.verdict((h.id, None))
                if verdict == "resend" and h.task is not None:
                    h._generation = self.settlement.generations.get((h.id, None), 0)
                    resend.append(h)  # it never reached the site: shipped again below
                    reopened.append(h)
                    continue
                self.life.fail(h, self._unsent_reason(verdict), "")
                continue
            h._recovered_compute_id = row["compute_task_id"]
            by_site.setdefault((h.site, self._owner(h.caller, h.site)), []).append(h)
            reopened.append(h)
        on_done = self.hedging.shipping.on_done
        for (site, owner), handles in by_site.items():
            ids = [h._recovered_compute_id for h in handles if h._recovered_compute_id]
            futs, why = self._reattach(site, owner, ids)
            lost = [h for h in handles if futs.get(h._recovered_compute_id or "") is None]
            asked = self.settle_by_claims(
                {(h.id, None): (site, h.caller, len(h.attempts)) for h in lost}
            )
            for h in handles:
                fut = futs.get(h._recovered_compute_id or "")
                if fut is None:
                    self._lost(h, site, why, asked.get((h.id, None)), resend)
                    continue
                h.future = fut
                fut.add_done_callback(functools.partial(on_done, h))
        for h in resend:
            self.ship_again(h)
        self.recover_copies(racing)
        self.recover_continuations(reopened)
        self.rt.transfers.recover()  # open transfers: Globus tasks re-monitored, copies re-run
        return reopened

    def recover_copies(self, racing: list[TaskHandle]) -> None:
        """Re-attach the copies of hedged tasks; cancel the losers a won race left queued."""
        now = datetime.now(UTC)
        by_site: dict[tuple[str, str], list[tuple[TaskHandle, TaskCopy]]] = {}
        won = [
            h
            for h in self.reg.all()
            if h.copies and not h.attempts and not h.done and h.winner is not None
        ]
        persist_copy = self.hedging.persist_copy
        resend: list[tuple[TaskHandle, TaskCopy]] = []
        for h in [*racing, *won]:
            for c in h.copies:
                if c.state != "queued":
                    continue
                if c.compute_task_id is None:
                    verdict = self.settlement.verdict((h.id, c.index))
                    if verdict == "resend" and h.task is not None and h.winner is None:
                        c._generation = self.settlement.generations.get((h.id, c.index), 0)
                        resend.append((h, c))  # never reached its site: sent again below
                        continue
                    c.state, c.ended_at = "failed", now
                    c.error = self._unsent_reason(verdict, "copy")
                    persist_copy(h, c)
                    continue
                by_site.setdefault((c.site, self._owner(h.caller, c.site)), []).append((h, c))
        for (site, owner), pairs in by_site.items():
            ids = [str(c.compute_task_id) for _, c in pairs]
            futs, why = self._reattach(site, owner, ids)
            for h, c in pairs:
                fut = futs.get(str(c.compute_task_id))
                if fut is None and h.winner is None:
                    c.state, c.ended_at = "failed", now
                    c.error = why or f"site {site} no longer knows copy {c.compute_task_id}"
                    persist_copy(h, c)
                c.future = fut
        for h in won:
            w = h.winner
            for c in h.copies:
                if c.state == "queued":
                    with self.reg.lock:
                        c.state = "cancelling"
                    self.hedging.cancel_copy(h, c, winner=w)
        again = {(h.id, c.index) for h, c in resend}
        for h in racing:
            live = [c for c in h.copies if c.state == "queued"]
            if not live:
                text = "; ".join(f"{c.site}/{c.partition}: {c.error}" for c in h.copies)
                one = h.copies[0].error if h.single else None
                self.life.fail(h, one or f"every copy failed: {text}", "")
                continue
            with self.reg.lock:
                self.reg.hedged[h.id] = h
            for c in live:
                if (h.id, c.index) in again:
                    continue  # followed once it is sent again
                assert c.future is not None
                c.future.add_done_callback(functools.partial(self.hedging.on_copy_done, h, c))
        watching = self.rt._placer()
        if watching.watch is not None:  # judged again once overdue, as before the restart
            for h in racing:
                if not h.done and h.winner is None:
                    self.hedging.arm_rejudge(h, watching)
        for h, c in resend:
            h.notes.append(
                f"never reached {c.site} before the coordinator stopped: shipped again"
                if h.single
                else f"copy {c.index} on {c.site} never reached its site before the "
                "coordinator stopped: sent again"
            )
            self.hedging.send_copy(h, h.task, c)

    # --- submissions the site never acknowledged --------------------------------------------
    def settle(
        self, rows: list[dict[str, Any]], copy_rows: dict[str, list[dict[str, Any]]]
    ) -> Settlement:
        """Which open records without a Globus Compute id reached their site: by their
        claims where the site's tasks claim tags (:meth:`settle_by_claims`), else by the
        site's task group (asked only when some record was mid-submission)."""
        pending: dict[Key, str | None] = {}
        where: dict[Key, tuple[str, str, int]] = {}  # (site, caller, attempt)
        for row in rows:
            if row["state"] in ("completed", "failed") or row["id"] in self.reg.handles:
                continue
            caller = row.get("owner") or ""
            attempt = len(json.loads(row.get("attempts") or "[]"))
            copies = copy_rows.get(row["id"], [])
            if attempt:  # a retry after the race runs as one task (as recover() reads it)
                copies = []
            for c in copies:
                if c["state"] == "queued" and not c["compute_task_id"]:
                    pending[(row["id"], c["idx"])] = c.get("ship_state")
                    where[(row["id"], c["idx"])] = (c["site"], caller, attempt)
            if not copies and not row["compute_task_id"]:
                pending[(row["id"], None)] = row.get("ship_state")
                where[(row["id"], None)] = (row["site"], caller, attempt)
        every_copy = [c for cs in copy_rows.values() for c in cs]
        claimed = claimed_ids(rows, every_copy)
        inflight = {k: where[k] for k, state in pending.items() if state == "submitting"}
        by_claims = self.settle_by_claims(inflight)
        claimed |= {cid for _, cid, _ in by_claims.values() if cid}
        rest = {k: v for k, v in pending.items() if k not in by_claims}
        asking = any(state == "submitting" for state in rest.values())
        group = self.group_ids() if asking else []
        out = settle(rest, claimed, group)
        for key, (verdict, cid, generation) in by_claims.items():
            out.verdicts[key] = verdict
            out.generations[key] = generation
            if cid is not None:
                out.claimed_ids[key] = cid
        return out

    def _lost(
        self,
        h: TaskHandle,
        site: str,
        why: str,
        asked: tuple[Verdict, str | None, int] | None,
        resend: list[TaskHandle],
    ) -> None:
        """A task the site's service could not re-attach: its claim says whether it ran.
        None claimed it: its tag is claimed now, so it never runs, and it is shipped again
        (it never ran). A task claimed it: it ran (or runs) as that Slurm job, so it is not
        run again and the failure says what to check. The site could not be asked: said."""
        gone = why or f"site {site} no longer knows task {h._recovered_compute_id}"
        if asked is not None and asked[0] == "resend" and h.task is not None:
            h._generation = asked[2]
            h.notes.append(f"{gone}; its claim shows it never started")
            resend.append(h)
            return
        if asked is not None and asked[0] == "claim":
            self.life.fail(
                h,
                f"{gone}. It started on {site} (its claim names Globus Compute task "
                f"{asked[1]}) and may have finished: its result is not kept. Check its "
                "Slurm job (`sacct`) and the files it writes before submitting it again",
                "",
            )
            return
        self.life.fail(
            h,
            f"{gone}. Whether it ran is unknown (its start could not be read on {site}): "
            "check the site (`federation tasks`, sacct) before submitting it again",
            "",
        )

    def settle_by_claims(
        self, inflight: dict[Key, tuple[str, str, int]]
    ) -> dict[Key, tuple[Verdict, str | None, int]]:
        """The in-flight shipments (key -> site, caller, attempt) of sites whose tasks
        claim tags, settled by one look per site at their claims
        (:func:`~federation.sites.jobtags.settle_command`): a task that claimed the
        shipment's tag is it (re-attached under the id it wrote); a tag nobody claimed is
        claimed now, so that whatever of it reached the site never runs, and the record is
        shipped again under the next generation. Sites that cannot be asked are left out
        (the task group decides, or says it cannot)."""
        by_site: dict[tuple[str, str], list[Key]] = {}
        for key, (site, caller, _) in inflight.items():
            if site in self.rt.backends:
                by_site.setdefault((site, self._owner(caller, site)), []).append(key)
        out: dict[Key, tuple[Verdict, str | None, int]] = {}
        for (site, owner), keys in by_site.items():
            backend = self.rt.site_for(owner, site) if owner else self.rt.backends[site]
            if not isinstance(backend, ClaimingSite):
                continue
            chains = {
                f"r{i}": [
                    shipment_tag(key[0], inflight[key][2], key[1], gen)
                    for gen in range(SHIPMENT_GENERATIONS)
                ]
                for i, key in enumerate(keys)
            }
            try:
                found = backend.settle_claims(chains)
            except Exception as e:  # the site cannot be asked: the task group decides
                logger.warning("settling %d shipment(s) at %s by claims: %s", len(keys), site, e)
                continue
            for i, key in enumerate(keys):
                got = found.get(f"r{i}")
                if got is None or got.kind == "full":
                    continue
                if got.kind == "freed":
                    out[key] = ("resend", None, got.generation + 1)
                elif got.claim is not None and got.claim.compute_task_id is not None:
                    out[key] = ("claim", got.claim.compute_task_id, got.generation)
        return out

    def group_ids(self) -> list[str] | None:
        """Every task of the coordinator's work group(s), as the web service lists them;
        None when a group cannot be listed."""
        ids: list[str] = []
        asked: set[str] = set()
        owners = self.rt.caller_sites.every_caller() if self.rt.caller_sites else []
        every = [*self.rt.backends.items(), *(kv for own in owners for kv in own.items())]
        for name, backend in every:
            lister = getattr(backend, "task_group_ids", None)
            group = str(getattr(backend, "task_group_id", name))
            if lister is None or group in asked:
                continue
            asked.add(group)
            try:
                ids += lister()
            except Exception as e:  # the service is unreachable: nothing can be paired
                logger.warning("listing task group %s through %s failed: %s", group, name, e)
                return None
        return ids

    def _owner(self, caller: str, site: str) -> str:
        """``caller`` when they reach ``site`` through a backend of their own (see
        :mod:`federation.runtime.callers`), else "" (the shared backend)."""
        per_caller = self.rt.caller_sites
        own = per_caller.sites_for(caller) if per_caller is not None else None
        return caller if own is not None and site in own else ""

    def _reattach(self, site: str, owner: str, ids: list[str]) -> tuple[dict[str, Any], str]:
        """Futures for ``ids`` from ``owner``'s backend at ``site`` (``""``: the shared
        one), and why there are none when it cannot be asked (the owner's tokens are gone)."""
        if site not in self.rt.backends:
            return {}, ""
        backend = self.rt.site_for(owner, site) if owner else self.rt.backends[site]
        try:
            return dict(backend.reattach(ids)), ""
        except FederationError as e:
            logger.warning("re-attaching %d task(s) of %s at %s: %s", len(ids), owner, site, e)
            return {}, f"could not be followed after the restart ({e}); it may still run on {site}"

    def _unsent_reason(self, verdict: str | None, what: str = "task") -> str:
        if verdict == "unknown":
            return (
                f"the coordinator stopped while this {what} was being submitted and "
                f"{self.settlement.reason}: it may have run; check the site "
                "(`federation tasks`, sacct) before submitting it again"
            )
        return (
            f"the coordinator stopped before the site acknowledged this {what}; it never "
            "ran, and was recorded before its spec was kept: submit it again"
        )

    def ship_again(self, h: TaskHandle) -> None:
        """Ship a recovered task that never reached its site, as it was placed."""
        shipping = self.hedging.shipping
        shape = h.decision.chosen.shape
        known = shape.site in self.rt.backends
        backend = self.rt.site_for(h.caller, shape.site) if known else None
        if backend is None:
            self.life.fail(h, f"site {shape.site} is no longer configured; submit it again", "")
            return
        h.notes.append(
            f"never reached {shape.site} before the coordinator stopped: shipped again"
            if not h._generation
            else f"in flight to {shape.site} when the coordinator stopped; withdrawn there by "
            "its claim before it could run: shipped again"
        )
        task = h.task
        assert task is not None  # only a task with its spec is shipped again
        if self.staging.stage_if_needed(h, task):  # inputs staged again (arrived: skipped)
            return
        try:
            fut = shipping.send(
                h, lambda: shipping.submit_to(h, task, shape, generation=h._generation)
            )
        except Exception as e:
            self.life.fail(h, f"submission to {shape.site} failed: {e}", "")
            return
        h.future = fut
        shipping.follow(h, fut)

    def recover_continuations(self, reopened: list[TaskHandle]) -> None:
        """After a restart: report ends the log missed, watch milestones, re-attach groups."""
        ended = {
            e.task_id
            for e in self.rt.events.history()
            if e.kind in ("task.completed", "task.failed")
        }
        finished = (self.reg.find(i) for i in self.finished_ids if i not in ended)
        for h in [*self.reg.all(), *finished]:
            if h is not None and h.done and h.id not in ended and h.completed_at is not None:
                # the coordinator stopped between recording the end and announcing it
                self.life.announce_missed_end(h)
        for h in reopened:
            if not h.done:
                self.life.watch(h)
        self.rt.groups.recover()
