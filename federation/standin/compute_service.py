"""The Globus Compute web service, answered in-process: the SDK's transport seam.

The real ``globus_compute_sdk.Client`` and ``Executor`` run unchanged; only two seams are
swapped, as the field notes describe:

* the HTTP transport: a ``requests`` adapter mounted on the client's sessions answers the
  few routes the SDK uses (register function, submit batch, task status, batch status,
  task group, version, endpoint status and metadata) and forwards each task, as the
  cloud would, to the site's endpoint daemon (:mod:`federation.endpoint.daemon`);
* the AMQP result stream: :class:`InProcessResultWatcher` is the SDK's own
  ``_ResultWatcher`` with its pika loop replaced by an event the service sets when a
  result arrives, so futures complete (and ``add_done_callback`` fires) within
  milliseconds, without anyone polling.

Pointing a site at a real endpoint id and a default ``Client()`` removes both seams.

The seams themselves are in :mod:`federation.standin.transport`; the task and endpoint
records in :mod:`federation.standin.records`. This module is the service's bookkeeping and
its route table.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import globus_sdk
from globus_compute_common import messagepack
from globus_compute_common.messagepack.message_types import Result, Task
from globus_compute_sdk import Client, Executor

from federation.core.errors import SiteUnavailableError
from federation.endpoint import protocol
from federation.sites.cloud import PAYLOAD_LIMIT_BYTES
from federation.standin.endpoint_link import EndpointLink
from federation.standin.rate_limit import ANONYMOUS, RateLimit, RateLimiter
from federation.standin.records import _Endpoint, _TaskRecord
from federation.standin.result_watcher import InProcessResultWatcher
from federation.standin.retention import RESULT_RETENTION_S, ResultRetention
from federation.standin.task_memory import (
    TaskMemory,
    cancelled_result,
    lost_result,
    too_large_result,
)
from federation.standin.transport import _HTTPError, _OfflineExecutor, _ServiceAdapter

__all__ = ["InProcessResultWatcher", "LocalComputeService", "StartedListener"]

logger = logging.getLogger(__name__)

SUBMIT_DELIVERY_WAIT_S = 30.0
"""How long the embedded service's acknowledgement waits for an online endpoint to take
its tasks (past it the tasks stay queued and the submission is acknowledged anyway)."""

StartedListener = Callable[[str, str | None], None]
"""Called with (task_id, slurm_job_id) when the endpoint reports a task started running."""


class LocalComputeService:
    """In-process stand-in for the Globus Compute web service and its result queues.

    As the real service, in both modes: a task for an offline endpoint is accepted
    (``waiting-for-ep``) and delivered when the endpoint is back; an endpoint is online
    while it heartbeats; a submission over :data:`PAYLOAD_LIMIT_BYTES` is refused (413
    ``TASK_PAYLOAD_TOO_LARGE``), and so is a result over it; a task reports
    ``waiting-for-ep`` until its result (no ``running``); a client over ``rate_limit`` is
    answered 429 (:mod:`.rate_limit`); a result is released ``result_retention_s`` after
    its completion (:mod:`.retention`).

    ``strict``: exactly what the real service offers a client: no task cancel, no word of a
    task's start or Slurm job (only its results), and a memory of task groups that outlives
    this object (``memory``: a SQLite file, as the cloud never forgets a client's tasks
    across the client's restarts). Not strict (the embedded federation's privileges):
    :meth:`cancel` withdraws a queued task or asks the endpoint, started listeners hear of
    each start, :meth:`adopt_task` re-teaches a forgotten task.
    """

    def __init__(
        self,
        *,
        strict: bool = False,
        memory: Path | None = None,
        rate_limit: RateLimit = RateLimit(),  # noqa: B008 (frozen)
        result_retention_s: float = RESULT_RETENTION_S,
    ) -> None:
        self.strict = strict
        self._memory = TaskMemory(memory) if memory is not None else None
        self._limiter = RateLimiter(rate_limit)
        self._retention = ResultRetention(result_retention_s)
        self._lock = threading.RLock()
        self._functions: dict[str, dict[str, Any]] = {}
        self._tasks: dict[str, _TaskRecord] = {}
        self._groups: dict[str, dict[str, None]] = {}  # task group -> its task ids, in order
        self._endpoints: dict[str, _Endpoint] = {}
        self._watchers: dict[str, InProcessResultWatcher] = {}
        self._retired: list[InProcessResultWatcher] = []
        """Watchers replaced while still running (their executor was shut down)."""
        self._clients: dict[str, Client] = {}
        self._started_listeners: list[StartedListener] = []
        self.requests_served = 0

    # --- wiring ---------------------------------------------------------------------------
    def add_endpoint(self, endpoint_id: uuid.UUID, site: str, run_dir: Path) -> None:
        eid = str(endpoint_id)
        with self._lock:
            if eid in self._endpoints:
                return
            link = EndpointLink(
                site,
                run_dir,
                self._on_endpoint_event,
                on_back=lambda: self._settle_delivered(eid),
                on_delivered=self._delivered,
            )
            self._endpoints[eid] = _Endpoint(site=site, link=link)
        link.start()  # connected (and its first heartbeat heard) if the daemon is up

    def on_started(self, listener: StartedListener) -> None:
        if self.strict:
            raise RuntimeError(
                "the Globus Compute service tells a client nothing about a task's start; "
                "learn it from the site (federation.sites.jobwatch)"
            )
        self._started_listeners.append(listener)

    def client(self, authorizer: globus_sdk.authorizers.GlobusAuthorizer | None = None) -> Client:
        """A real SDK ``Client`` whose HTTP transport is answered by this service.

        Its identity (for the rate limit) is its ``authorizer``'s bearer token; without one,
        ``"anonymous"``. The SDK's own retries stay as shipped: a 429 is retried after its
        ``Retry-After``, as against the real service."""
        client = Client(
            authorizer=authorizer or globus_sdk.NullAuthorizer(), do_version_check=False
        )
        adapter = _ServiceAdapter(self)
        for web in (client._compute_web_client.v2, client._compute_web_client.v3):
            web.transport.session.mount("https://", adapter)
            web.transport.session.mount("http://", adapter)
        client.version_check()  # goes through the adapter: proves the seam is in place
        return client

    def executor(self, endpoint_id: uuid.UUID, client: Client, **kwargs: Any) -> Executor:
        """A real ``Executor`` whose result watcher this service feeds (with the SDK's own
        client-side throttle: ``api_burst_limit`` 4 per ``api_burst_window_s`` 16)."""
        return _OfflineExecutor(self, endpoint_id=endpoint_id, client=client, **kwargs)

    def watcher_for(self, task_group_id: uuid.UUID, client: Client) -> InProcessResultWatcher:
        tg = str(task_group_id)
        with self._lock:
            rw = self._watchers.get(tg)
            if rw is None or not rw.is_alive() or rw._closed:
                if rw is not None and rw.is_alive():  # closed, still draining its futures:
                    self._retired.append(rw)  # stopped by close() too, or exit would wait
                rw = InProcessResultWatcher(task_group_id, client, poll_period_s=1.0)
                rw.start()
                self._watchers[tg] = rw
                self._clients[tg] = client
                held = [t for t in self._tasks.values() if t.task_group_id == tg and t.packed]
                for rec in held:
                    rec.fetched = True  # delivered to a live watcher
                pending = [t.result for t in held]
            else:
                pending = []
        for res in pending:
            if res is not None:
                rw.deliver(res)
        return rw

    def close(self) -> None:
        with self._lock:
            watchers = [*self._watchers.values(), *self._retired]
            self._watchers.clear()
            self._retired.clear()
            endpoints = list(self._endpoints.values())
        for rw in watchers:
            rw._time_to_stop = True
            rw._time_to_check_results.set()
            rw.unregister()
        for ep in endpoints:
            ep.link.close()

    # --- endpoint side ---------------------------------------------------------------------
    def _on_endpoint_event(self, msg: protocol.Message) -> None:
        tid = msg.get("task_id")
        if not isinstance(tid, str):
            return
        with self._lock:
            rec = self._tasks.get(tid)
        if rec is None:
            return
        if msg["op"] == "task.started":
            if self.strict:
                return  # the real service never tells a client of a task's start
            job = msg.get("job_id")
            with self._lock:  # the status stays waiting-for-ep, as the real service's
                rec.started_at = float(msg["at"])
                rec.job_id = None if job in (None, "None") else str(job)
            for listener in list(self._started_listeners):
                try:
                    listener(tid, rec.job_id)
                except Exception:
                    logger.exception("started-listener failed for %s", tid)
        elif msg["op"] == "task.result":
            res = messagepack.unpack(protocol.unb64(msg["result"]))
            if not isinstance(res, Result):
                logger.error("endpoint sent a non-Result for %s", tid)
                return
            self._complete(rec, res, float(msg["at"]))

    def _delivered(self, task_id: str) -> None:
        with self._lock:
            rec = self._tasks.get(task_id)
            if rec is not None:
                rec.took()
        if self._memory is not None:
            self._memory.delivered(task_id)

    def _settle_delivered(self, endpoint_id: str) -> None:
        """The endpoint is (back) online: settle every task it took and still owes.

        Results it kept meanwhile are delivered; tasks it no longer knows, or reports as
        lost in its restart, fail with the endpoint's reason. Tasks still in the service's
        queue are not asked about: they are forwarded next.
        """
        with self._lock:
            ep = self._endpoints.get(endpoint_id)
            open_ids = [
                t
                for t in (ep.task_ids if ep else ())
                if (r := self._tasks.get(t)) is not None and r.packed is None and r.delivered
            ]
        if ep is None or not open_ids:
            return
        found = ep.link.conn.request({"op": "status", "task_ids": open_ids}, timeout_s=30)
        for tid in open_ids:
            if (rec := self._tasks.get(tid)) is None:
                continue  # released meanwhile
            info = found["tasks"].get(tid)
            if info and info.get("result"):
                res = messagepack.unpack(protocol.unb64(info["result"]))
                self._complete(rec, res, float(info.get("completed_at") or time.time()))
            elif info is None:
                msg = f"endpoint of site {ep.site} restarted and no longer knows this task"
                self._complete(rec, lost_result(tid, msg), time.time())

    def _complete(self, rec: _TaskRecord, res: Result, at: float) -> None:
        if not res.is_error and len(res.data) > PAYLOAD_LIMIT_BYTES:
            res = too_large_result(rec.task_id, len(res.data))
        if self._retention.expired(at):  # completed a window ago (a task re-learned late)
            self._release([rec.task_id])
            return
        with self._lock:
            if rec.packed is not None or self._tasks.get(rec.task_id) is not rec:
                return  # duplicate delivery, or released meanwhile
            rec.result, rec.completed_at = res, at
            rec.status = "failed" if res.is_error else "success"
            rw = self._watchers.get(rec.task_group_id)
            rw = rw if rw is not None and rw.is_alive() else None
            rec.fetched = rw is not None  # delivered to a live watcher, as AMQP delivers it
        self._retention.hold(rec.task_id, at)
        if rw is not None:
            rw.deliver(res)
        self._release(self._retention.due())

    def _release(self, task_ids: list[str]) -> None:
        """Forget tasks and their results (fetched or not), as the real service does past
        the abandonment window."""
        if not task_ids:
            return
        abandoned: list[str] = []
        with self._lock:
            for tid in task_ids:
                rec = self._tasks.pop(tid, None)
                if rec is None:
                    continue
                if rec.packed is not None and not rec.fetched:
                    abandoned.append(tid)
                self._groups.get(rec.task_group_id, {}).pop(tid, None)
                if not self._groups.get(rec.task_group_id, True):
                    del self._groups[rec.task_group_id]
                if (ep := self._endpoints.get(rec.endpoint_id)) is not None:
                    ep.task_ids.discard(tid)
        if self._memory is not None:
            self._memory.forget(task_ids)
        self._retention.abandoned(abandoned)

    def _endpoint(self, endpoint_id: str) -> _Endpoint:
        ep = self._endpoints.get(endpoint_id)
        if ep is None:
            raise _HTTPError(
                404,
                "ENDPOINT_NOT_FOUND",
                f"Endpoint {endpoint_id} is not registered with this service",
            )
        return ep

    # --- routes ----------------------------------------------------------------------------
    def handle(
        self, method: str, path: str, body: Any, identity: str = ANONYMOUS
    ) -> tuple[int, Any, dict[str, str]]:
        """One HTTP request from ``identity`` -> (status, JSON payload, headers)."""
        self.requests_served += 1
        wait_s = self._limiter.admit(identity)  # every route counts, even an unknown one
        if wait_s is not None:
            return self._limiter.refusal(wait_s)
        self._release(self._retention.due())
        for (m, pattern), handler in _ROUTES.items():
            if m == method and (match := pattern.fullmatch(path)):
                try:
                    return 200, handler(self, body, identity, *match.groups()), {}
                except _HTTPError as e:
                    error = {"code": e.code, "message": str(e), "http_status": e.status}
                    return e.status, error, {}
        return 404, {"code": "NOT_FOUND", "message": f"no route {method} {path}"}, {}

    def _version(self, _body: Any, _identity: str) -> dict[str, Any]:
        return {"api": "1.0", "min_ep_version": "2.0.0", "min_sdk_version": "2.0.0"}

    def _register_function(self, body: Any, _identity: str) -> dict[str, Any]:
        fid = str(uuid.uuid4())
        with self._lock:
            self._functions[fid] = {
                "function_code": body["function_code"],
                "function_name": body.get("function_name"),
            }
        return {"function_uuid": fid}

    def _endpoint_status(self, _body: Any, _identity: str, endpoint_id: str) -> dict[str, Any]:
        """``GET /v2/endpoints/<id>/status``: from the endpoint's heartbeats, as the real
        service (online while heard within 3 heartbeat periods on an open connection)."""
        ep = self._endpoint(endpoint_id)
        link = ep.link
        age = link.heard_age_s()
        details: dict[str, Any] = {
            k: link.report[k]
            for k in ("engines", "outstanding", "active", "period_s")
            if k in link.report
        }
        details["heartbeat_age_s"] = None if age is None else round(age, 3)
        details["queued_tasks"] = len(link)
        return {"status": "online" if link.online() else "offline", "details": details}

    def _endpoint_metadata(self, _body: Any, _identity: str, endpoint_id: str) -> dict[str, Any]:
        """``GET /v2/endpoints/<id>``: what the endpoint reported, as the cloud keeps it.

        ``python_version``, ``hostname`` and ``endpoint_version`` come from the endpoint's
        last heartbeat; an offline endpoint keeps the metadata it last reported.
        """
        ep = self._endpoint(endpoint_id)
        doc: dict[str, Any] = {
            "uuid": endpoint_id,
            "name": ep.site,
            "display_name": ep.site,
            "multi_user": False,
        }
        for key in ("python_version", "hostname", "endpoint_version"):
            if ep.link.report.get(key):
                doc[key] = str(ep.link.report[key])
        return doc

    def _submit(self, body: Any, identity: str, endpoint_id: str) -> dict[str, Any]:
        """``POST /v3/endpoints/<id>/submit``: accepted whether or not the endpoint is
        online (its tasks wait in the service's queue, ``waiting-for-ep``), refused whole
        when its tasks' payloads exceed :data:`PAYLOAD_LIMIT_BYTES` together. Each task is
        forwarded with the submitter's ``identity`` (the endpoint runs one process per
        identity and user endpoint config, as a multi-user endpoint does)."""
        ep = self._endpoint(endpoint_id)
        tg = body.get("task_group_id") or str(uuid.uuid4())
        uec = body.get("user_endpoint_config") or {}
        runtime = body.get("user_runtime")
        buffers: list[tuple[str, str]] = []  # (function id, task buffer)
        for fid, payloads in body["tasks"].items():
            fn = self._functions.get(fid)
            if fn is None:
                raise _HTTPError(404, "FUNCTION_NOT_FOUND", f"Function {fid} not found")
            buffers.extend((fid, fn["function_code"] + payload) for payload in payloads)
        size = sum(len(buf.encode()) for _, buf in buffers)
        if size > PAYLOAD_LIMIT_BYTES:
            raise _HTTPError(
                413,
                "TASK_PAYLOAD_TOO_LARGE",
                f"Task payload of {size} bytes exceeds the {PAYLOAD_LIMIT_BYTES} byte limit "
                "on a submission (function and arguments, serialized); stage large data "
                "to the endpoint's site and pass a reference instead",
            )
        tasks_out: dict[str, list[str]] = {fid: [] for fid in body["tasks"]}
        queued: list[protocol.Message] = []
        records: list[_TaskRecord] = []
        for fid, buf in buffers:
            tid = str(uuid.uuid4())
            packed = messagepack.pack(Task(task_id=uuid.UUID(tid), task_buffer=buf))
            rec = _TaskRecord(task_id=tid, endpoint_id=endpoint_id, task_group_id=tg)
            with self._lock:
                self._tasks[tid] = rec
                self._groups.setdefault(tg, {})[tid] = None
                ep.task_ids.add(tid)
                ep.shipped[str(self._functions[fid].get("function_name") or fid)] += 1
            msg = {
                "op": "submit",
                "task_id": tid,
                "packed_task": protocol.b64(packed),
                "user_endpoint_config": uec,
                "user_runtime": runtime,
                # its own UEPs: the cloud path's withdrawn copies stay outstanding in theirs
                "identity": identity if self.strict else f"embedded:{identity}",
            }
            if self._memory is not None:
                self._memory.remember(tid, endpoint_id, tg, msg)
            queued.append(msg)
            records.append(rec)
            tasks_out[fid].append(tid)
        ep.link.hold(queued)  # forwarded in order, now if the endpoint is online
        if not self.strict and ep.link.online():
            # Embedded, the service lives and dies with the coordinator: its acknowledgement
            # must mean the endpoint holds the task, or a coordinator killed right after it
            # would lose a task it recorded as shipped. (The real service is durable: its
            # queue outlives any client, so strict mode acknowledges at once.)
            deadline = time.monotonic() + SUBMIT_DELIVERY_WAIT_S
            for rec in records:
                if not rec.taken.wait(max(0.0, deadline - time.monotonic())):
                    break  # still queued: forwarded when the endpoint can take it
        return {
            "request_id": str(uuid.uuid4()),
            "task_group_id": tg,
            "endpoint_id": endpoint_id,
            "tasks": tasks_out,
        }

    def _task_view(self, tid: str) -> dict[str, Any]:
        """A task as ``GET /v2/tasks/<id>`` answers it: 404 ``TASK_NOT_FOUND`` for one it
        does not know, or no longer (released past the window)."""
        rec = self._tasks.get(tid)
        if rec is None and self._recover(tid) is not None:
            rec = self._tasks.get(tid)  # None if the endpoint's result was past the window
        if rec is None:
            raise _HTTPError(404, "TASK_NOT_FOUND", f"Task {tid} not found")
        with self._lock:  # status, result and completion time change together
            view: dict[str, Any] = {
                "task_id": tid,
                "status": rec.status,
                "task_group_id": rec.task_group_id,
            }
            res = rec.result
            if res is not None:
                key = "exception" if res.is_error else "result"
                view[key] = res.data
                view["completion_t"] = str(rec.completed_at)
                if res.details:
                    view["details"] = res.details
                rec.fetched = True
        return view

    def _recover(self, tid: str) -> _TaskRecord | None:
        """Ask the endpoints about a task this (restarted) service has not seen."""
        for eid, ep in list(self._endpoints.items()):
            try:
                # the request's own bound (30 s), not a short one: under load an endpoint may
                # answer late, and a task that finished while no service was up is known
                # only to its endpoint, so a missed answer would leave it queued forever
                found = ep.link.conn.request({"op": "status", "task_ids": [tid]})["tasks"]
            except SiteUnavailableError as e:
                logger.warning("re-learning task %s: endpoint %s not asked: %s", tid, eid, e)
                continue
            if tid in found:
                info = found[tid]
                rec = _TaskRecord(
                    task_id=tid,
                    endpoint_id=eid,
                    task_group_id="",
                    job_id=info.get("job_id"),
                    delivered=True,
                )
                with self._lock:
                    self._tasks[tid] = rec
                if info.get("result"):
                    res = messagepack.unpack(protocol.unb64(info["result"]))
                    self._complete(rec, res, float(info.get("completed_at") or time.time()))
                return rec
        return None

    def _get_task(self, _body: Any, _identity: str, tid: str) -> dict[str, Any]:
        return self._task_view(tid)

    def _batch_status(self, body: Any, _identity: str) -> dict[str, Any]:
        results = {}
        for tid in body.get("task_ids", []):
            try:
                results[tid] = self._task_view(tid)
            except _HTTPError:
                continue
        return {"response": "batch", "results": results}

    def _task_group(self, _body: Any, _identity: str, tg: str) -> dict[str, Any]:
        with self._lock:
            ids = list(self._groups.get(tg, {}))
        if self._memory is not None:  # tasks an earlier client (process) submitted
            known = set(ids)
            for tid, eid in self._memory.group(tg):
                if tid not in known:
                    ids.append(tid)
                    self._relearn(tid, eid, tg)
        with self._lock:  # without the tasks released past the window (re-learned ones too)
            ids = [t for t in ids if t in self._tasks]
        return {"taskgroup_id": tg, "tasks": [{"id": t} for t in ids]}

    def _relearn(self, tid: str, endpoint_id: str, tg: str, unknown: str | None = None) -> None:
        """A task this object has not seen (remembered, or adopted): ask its endpoint where
        it stands. One the endpoint answers it does not know fails with ``unknown`` (its
        ``{site}`` filled in; default: the endpoint restarted and lost it); one it cannot be
        asked about is settled when the endpoint is back (:meth:`_settle_delivered`)."""
        with self._lock:
            if tid in self._tasks:
                return
            # submitted: so the endpoint took it or will say it has not
            rec = _TaskRecord(
                task_id=tid, endpoint_id=endpoint_id, task_group_id=tg, delivered=True
            )
            self._tasks[tid] = rec
            self._groups.setdefault(tg, {})[tid] = None
            ep = self._endpoints.get(endpoint_id)
            if ep is not None:
                ep.task_ids.add(tid)
        if ep is None:
            return
        pending = self._memory.undelivered(tid) if self._memory is not None else None
        if pending is not None:
            # accepted and remembered, never taken by its endpoint (the service stopped
            # before forwarding it): queued again, as the real service's durable queue keeps
            # it (the endpoint ignores a resend of a task it did take)
            with self._lock:
                rec.delivered = False
            ep.link.hold([pending])
            return
        try:
            found = ep.link.conn.request({"op": "status", "task_ids": [tid]})["tasks"]
        except SiteUnavailableError as e:
            logger.warning("re-learning task %s: endpoint %s not asked: %s", tid, endpoint_id, e)
            return
        info = found.get(tid)
        if info is None:
            msg = unknown or "endpoint of site {site} restarted and no longer knows this task"
            msg = msg.format(site=ep.site)
            self._complete(rec, lost_result(tid, msg), time.time())
            return
        rec.job_id = info.get("job_id")
        if info.get("result"):
            res = messagepack.unpack(protocol.unb64(info["result"]))
            self._complete(rec, res, float(info.get("completed_at") or time.time()))

    def adopt_task(self, task_id: str, endpoint_id: uuid.UUID, task_group_id: uuid.UUID) -> None:
        """Re-learn a task after a restart (the real cloud never forgets; this one can).

        The embedded service died with the coordinator that shipped the task: a task its
        endpoint never received (the service acknowledged it, then died before forwarding
        it) fails saying so, instead of waiting forever."""
        if self.strict:
            raise RuntimeError("the Globus Compute service remembers its tasks on its own")
        self._relearn(
            task_id,
            str(endpoint_id),
            str(task_group_id),
            unknown="the endpoint of site {site} never received this task (the coordinator "
            "stopped before forwarding it); it never ran: submit it again",
        )

    def cancel(self, task_id: str) -> tuple[bool, str]:
        if self.strict:
            raise RuntimeError(
                "the Globus Compute service has no task cancel; withdraw the task on its "
                "site (federation.sites.jobtags: claim its tag before the task does)"
            )
        rec = self._tasks.get(task_id)
        if rec is None:
            return False, "unknown task"
        ep = self._endpoint(rec.endpoint_id)
        if ep.link.withdraw(task_id):  # still in the service's queue: never delivered
            self._complete(rec, cancelled_result(task_id), time.time())
            return True, "cancelled before delivery"
        reply = ep.link.conn.request({"op": "cancel", "task_id": task_id})
        return bool(reply.get("ok")), str(reply.get("reason", ""))


_UUID = r"([0-9a-fA-F-]{36})"
_ROUTES: Mapping[tuple[str, re.Pattern[str]], Callable[..., Any]] = {
    ("GET", re.compile(r"/v2/version")): LocalComputeService._version,
    ("POST", re.compile(r"/v3/functions")): LocalComputeService._register_function,
    ("POST", re.compile(rf"/v3/endpoints/{_UUID}/submit")): LocalComputeService._submit,
    ("GET", re.compile(rf"/v2/endpoints/{_UUID}/status")): LocalComputeService._endpoint_status,
    ("GET", re.compile(rf"/v2/endpoints/{_UUID}")): LocalComputeService._endpoint_metadata,
    ("GET", re.compile(rf"/v2/tasks/{_UUID}")): LocalComputeService._get_task,
    ("POST", re.compile(r"/v2/batch_status")): LocalComputeService._batch_status,
    ("GET", re.compile(rf"/v2/taskgroup/{_UUID}")): LocalComputeService._task_group,
}
