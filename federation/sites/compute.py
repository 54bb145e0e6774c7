"""A site reached through Globus Compute: one Executor per (endpoint, user_endpoint_config).

The same class serves a local site (offline web service) and a real cloud endpoint: the
difference is the ``Client`` and the executor factory passed in, i.e. configuration.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from globus_compute_sdk import Client, Executor, ShellFunction

from federation.core.envelope import Shape
from federation.core.errors import SiteUnavailableError
from federation.core.spec import SiteSpec
from federation.core.tasks import PythonTask, ShellTask, TaskSpec
from federation.sites import jobtags
from federation.sites.jobwatch import StartListener, TaggedJobs
from federation.sites.registration import registrar_for
from federation.sites.shipping import code_payload, executor_serializer
from federation.sites.user_config import shape_to_user_config
from functions.jobs import claim_then_run

logger = logging.getLogger(__name__)

ExecutorFactory = Callable[[uuid.UUID, Client, dict[str, Any], uuid.UUID], Executor]
Canceller = Callable[[str], "bool | None"]
"""Cancels a queued task at the site: True done, False not possible (it started, or is
unknown), None not this way (its user endpoint process holds other tasks: withdraw it by
its claim instead)."""


class _ThrottleAsInfo(logging.Filter):
    """The SDK warns (eight lines) each time its own client-side limit delays a request;
    here that delay is expected and nobody waits on it (``submit_task`` returns first;
    :mod:`federation.runtime.acks`), so it is logged at INFO instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and "API rate-limit delay" in str(record.msg):
            record.levelno, record.levelname = logging.INFO, "INFO"
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        return True


logging.getLogger("globus_compute_sdk.sdk.executor").addFilter(_ThrottleAsInfo())

DEFAULT_SNIPPET_LINES = ShellTask(command=":").snippet_lines
JOBS_FUNCTION = ShellFunction("{command}", name="federation_jobs")
"""Runs a shell command on a site's login node (claims, starts): one for every site."""
_SHELL_FUNCTIONS: dict[int, ShellFunction] = {}
_SHELL_LOCK = threading.Lock()


def shell_function(snippet_lines: int) -> ShellFunction:
    """The one shell function per snippet length, shared by every site (the command is its
    argument), so a client registers it once for all of them."""
    with _SHELL_LOCK:
        fn = _SHELL_FUNCTIONS.get(snippet_lines)
        if fn is None:
            fn = ShellFunction("{command}", snippet_lines=snippet_lines, name="federation_shell")
            _SHELL_FUNCTIONS[snippet_lines] = fn
        return fn


_RELOADED: dict[str, weakref.WeakValueDictionary[str, Future[Any]]] = {}
"""Per task group, the futures any site's reload made (see :meth:`ComputeSite.reattach`)."""
_RELOADED_LOCK = threading.Lock()


def _live(fut: Future[Any] | None) -> bool:
    """A reloaded future still worth handing out: not one whose watcher stopped (a closed
    coordinator's, ended with an error) - a later reload makes a fresh one."""
    return fut is not None and not (fut.done() and (fut.cancelled() or fut.exception() is not None))


ONLINE_TTL_S = 10.0
"""How long the service's "online" answer for an endpoint stands before a probe asks again."""


def cloud_executor(
    endpoint_id: uuid.UUID, client: Client, uec: dict[str, Any], task_group_id: uuid.UUID
) -> Executor:
    """Executor for a real endpoint through the Globus Compute cloud."""
    return Executor(
        endpoint_id=endpoint_id,
        client=client,
        user_endpoint_config=uec,
        task_group_id=task_group_id,
    )


class ComputeSite:
    """:class:`~federation.sites.backend.SiteBackend` over ``globus_compute_sdk.Executor``."""

    def __init__(
        self,
        spec: SiteSpec,
        endpoint_id: uuid.UUID,
        client: Client,
        executor_factory: ExecutorFactory = cloud_executor,
        task_group_id: uuid.UUID | None = None,
        canceller: Canceller | None = None,
        probe_fn: Callable[[], dict[str, Any]] | None = None,
        adopter: Callable[[str], None] | None = None,
        account: str | None = None,
        budgets: Mapping[str, float] | None = None,
        online_ttl_s: float = ONLINE_TTL_S,
        job_check_s: float | None = None,
        starts_by_claims: bool = True,
        storage_root: str | None = None,
    ) -> None:
        self.spec = spec
        self.storage_root = storage_root
        """The site's storage as its login node sees it (the probe reports its free space)."""
        self.account = account or spec.default_account
        """The site's default Slurm account, whose credit the probe's ``sshare`` reads with
        that of each partition's own account (:attr:`accounts`)."""
        self.accounts: tuple[str, ...] = tuple(
            dict.fromkeys([self.account, *(p.account for p in spec.partitions if p.account)])
        )
        """Every account the site charges, the default first (Delta: ``-cpu``, ``-gpu``)."""
        self.budgets: dict[str, float] = {
            (self.account if name == "default" else name): float(amount)
            for name, amount in (budgets or {}).items()
        }
        """Configured budgets per account, in the site's units (``default``: the default
        account's): each is an allocation's limit when the site reports none."""
        self.endpoint_id = endpoint_id
        self.client = client
        # the SDK serializes with the client's serializer: the coordinator's own functions
        # by source, so a worker with nothing of this repository can run them
        client.fx_serializer = executor_serializer()
        self.task_group_id = task_group_id or uuid.uuid4()
        self.probe_group_id = uuid.uuid5(self.task_group_id, "probes")
        """Probes, accounting queries and withdrawals run in a task group of their own, so
        the work group lists only tasks and copies, each of which a record claims (what a
        restart asks: :meth:`task_group_ids`)."""
        self._factory = executor_factory
        self._canceller = canceller
        self._probe_fn = probe_fn
        self._adopter = adopter
        self._executors: dict[str, Executor] = {}
        self.online_ttl_s = online_ttl_s
        self._online_at: float | None = None
        """When the service last said the endpoint is online (monotonic)."""
        self._reloaders: list[Executor] = []
        """Executors that reloaded tasks after a restart (their watchers serve those futures)."""
        self._lock = threading.Lock()
        self._registrar = registrar_for(client)
        """Function ids, shared by every site on this client (:mod:`.registration`)."""
        self.jobs: TaggedJobs | None = (
            None
            if job_check_s is None
            else TaggedJobs(self.name, self._run_shell, job_check_s, watch_starts=starts_by_claims)
        )
        """Each task's claim on the site (:mod:`federation.sites.jobwatch`): its withdrawal
        by claiming first and, with ``starts_by_claims``, its start read from one listing of
        the claims every ``job_check_s`` seconds while one waits (else whoever reports
        starts tells :meth:`TaggedJobs.mark_started`). None: nothing withdraws by claim."""

    @property
    def name(self) -> str:
        return self.spec.name

    def executor(self, uec: dict[str, Any]) -> Executor:
        """The executor for one user_endpoint_config (created once, never mutated;
        replaced only if the SDK stopped it after a failed submission)."""
        key = json.dumps(uec, sort_keys=True)
        with self._lock:
            ex = self._executors.get(key)
            # The SDK shuts an Executor down for good when a submission fails (e.g. the
            # endpoint was unreachable); a later call must not inherit that.
            if ex is not None and getattr(ex, "_stopped", False):
                logger.info("site %s: replacing a stopped executor for %s", self.name, key)
                ex = None
            if ex is None:
                group = self.probe_group_id if uec.get("profile") == "probe" else self.task_group_id
                ex = self._factory(self.endpoint_id, self.client, uec, group)
                self._executors[key] = ex
            return ex

    def _ensure_online(self, *, refresh: bool = False) -> None:
        """The service holds a task for an endpoint that is away until it returns: a probe
        would wait out its timeout, so ask the endpoint's status first. An "online" answer
        stands for ``online_ttl_s`` (a status request per probe round would spend the
        service's request rate on asking), and so does a probe's answer: the endpoint that
        just answered one is online (:meth:`_answered`). Any other answer is asked again."""
        at = self._online_at
        if not refresh and at is not None and time.monotonic() - at < self.online_ttl_s:
            return
        status = self.client.get_endpoint_status(str(self.endpoint_id))
        state = str((status or {}).get("status", "unknown"))
        if state != "online":
            self._online_at = None
            raise SiteUnavailableError(
                f"site {self.name}: its endpoint is {state}; run `federation sites up`"
            )
        self._online_at = time.monotonic()

    def check_online(self) -> None:
        """Ask the service for the endpoint's status now (raises if it is not online)."""
        self._ensure_online(refresh=True)

    def probe(self) -> Future[dict[str, Any]]:
        from functions.probes import probe_slurm

        self._ensure_online()
        ex = self.executor({"profile": "probe"})
        fut: Future[dict[str, Any]]
        # through the client's registrar: the probe function is registered once for every
        # site (each site's executor registered it itself before: a request per site)
        if self._probe_fn is not None:
            fut = self._registrar.submit(ex, self._probe_fn, (), {})
        else:  # the accounts for sshare; the budgets are echoed back for the snapshot
            kwargs = {
                "accounts": list(self.accounts),
                "budgets": dict(self.budgets) or None,
                "storage_root": self.storage_root,
            }
            fut = self._registrar.submit(ex, probe_slurm, (), kwargs)
        fut.add_done_callback(self._answered)
        return fut

    def _answered(self, fut: Future[Any]) -> None:
        """A probe that came back is the endpoint's word that it is online (no status
        request needed until ``online_ttl_s`` after it)."""
        if not fut.cancelled() and fut.exception() is None:
            self._online_at = time.monotonic()

    def submit(self, task: TaskSpec, shape: Shape, tag: str | None = None) -> Future[Any]:
        """Ship ``task`` with its shape's config; where tasks are withdrawn by claim, it
        claims ``tag`` (a fresh one if none is given) on the site before it runs."""
        uec = self.shape_config(shape)  # rendered once: its job_tag names the shape's jobs
        if self.jobs is None:
            return self.submit_tagged(task, shape, None, uec)
        tag = tag or jobtags.new_tag()
        fut = self.submit_tagged(task, shape, tag, uec)
        self.jobs.track(tag, fut, uec["job_tag"])
        return fut

    def submit_claiming(self, task: TaskSpec, shape: Shape, tag: str) -> Future[Any]:
        """:meth:`submit` under the coordinator's own ``tag`` (one per shipment, so a restart
        finds its claim: :meth:`settle_claims`); untagged where nothing claims."""
        return self.submit(task, shape, tag if self.jobs is not None else None)

    def settle_claims(self, chains: Mapping[str, Sequence[str]]) -> dict[str, jobtags.Settled]:
        """After a restart: each in-flight shipment's claim by its tags (key -> tags by
        generation), a free one claimed as withdrawn (:func:`jobtags.settle_command`)."""
        if self.jobs is None:
            raise SiteUnavailableError(f"site {self.name}: its tasks claim no tags here")
        return self.jobs.settle(chains)

    def _run_shell(self, command: str) -> Future[Any]:
        """Run ``command`` on the site's login node (the endpoint's probe profile), through
        one function registered once (the command is its argument)."""
        ex = self.executor({"profile": "probe"})
        return self._registrar.submit(ex, JOBS_FUNCTION, (), {"command": command})

    def on_started(self, listener: StartListener) -> None:
        """Call ``listener(task_id, slurm_job_id)`` when a task's claim shows it started."""
        if self.jobs is not None:
            self.jobs.on_started(listener)

    def shape_config(self, shape: Shape) -> dict[str, Any]:
        """The ``user_endpoint_config`` every task of ``shape`` shares here: nothing per task
        in it, so one user endpoint process, one executor and one request per batch serve
        the shape, and its batch jobs are named ``fed.<shape>`` (:func:`jobtags.shape_tag`)."""
        uec = shape_to_user_config(
            partition=shape.partition,
            nodes=shape.nodes,
            cpus=shape.cpus,
            mem_gb=shape.mem_gb,
            gpus=shape.gpus,
            walltime_s=shape.walltime_s,
            account=shape.account,
        )
        return {**uec, "job_tag": jobtags.shape_tag(uec)}

    def submit_tagged(
        self, task: TaskSpec, shape: Shape, tag: str | None, uec: dict[str, Any] | None = None
    ) -> Future[Any]:
        """Ship ``task`` with its shape's config; with a ``tag``, the task first claims the
        tag on the site (:mod:`federation.sites.jobtags`), so its start can be read and a
        withdrawal can win the claim before it. The tag rides in the task's arguments,
        never in the config, which stays the shape's."""
        ex = self.executor(uec or self.shape_config(shape))  # ``uec``: the caller's, if any
        fn: Any
        args: tuple[Any, ...] = ()
        kwargs: dict[str, Any] = {}
        if isinstance(task, ShellTask):
            command = task.command if tag is None else jobtags.guarded_command(task.command, tag)
            # one function object per site and snippet length: registered once per
            # executor, never per task (the command is its argument)
            fn = shell_function(task.snippet_lines)
            kwargs = {"command": command}
        elif isinstance(task, PythonTask) and tag is None:
            fn, args, kwargs = task.fn, tuple(task.args), dict(task.kwargs)
        elif isinstance(task, PythonTask):
            fn = claim_then_run
            args = (jobtags.claim_path(tag), code_payload(task.fn), tuple(task.args), task.kwargs)
        else:  # pragma: no cover - TaskSpec is closed
            raise TypeError(f"not a task: {task!r}")
        return self._registrar.submit(ex, fn, args, kwargs)  # never waits on a registration

    def warm(self) -> None:
        """Register, in the background, the functions every task here uses (shell commands,
        claims, job looks), so the first task does not wait for a registration request."""
        ex = self.executor({"profile": "probe"})
        fns: list[Any] = [shell_function(DEFAULT_SNIPPET_LINES), JOBS_FUNCTION]
        if self.jobs is not None:
            fns.append(claim_then_run)
        self._registrar.warm(ex, fns)

    def reattach(self, task_ids: list[str]) -> dict[str, Future[Any]]:
        """Reload this site's tasks from the task group (``Executor.reload_tasks``).

        ``adopter`` (offline service only) re-teaches a restarted in-process service about
        each task; the real cloud remembers task groups on its own.
        """
        if self._adopter is not None:
            for tid in task_ids:
                self._adopter(tid)
        with _RELOADED_LOCK:  # another site's reload of the shared group has them already
            known = _RELOADED.get(str(self.task_group_id))
            if known is not None and task_ids and all(_live(known.get(t)) for t in task_ids):
                return {tid: known[tid] for tid in task_ids}
        ex = self._factory(self.endpoint_id, self.client, {"profile": "probe"}, self.task_group_id)
        with self._lock:  # its result watcher serves the reloaded futures until close()
            self._reloaders.append(ex)
        try:
            futs = {str(f.task_id): f for f in ex.reload_tasks()}
        finally:
            ex.shutdown(wait=False)  # no more submissions; the watcher carries on
        # The task group is the coordinator's, shared by its sites: a reload returns every
        # site's tasks, and skips those an earlier reload left watched. So what one site
        # reloaded is kept for the others (until its future is let go).
        with _RELOADED_LOCK:
            shared = _RELOADED.setdefault(str(self.task_group_id), weakref.WeakValueDictionary())
            shared.update(futs)
            return {tid: shared[tid] for tid in task_ids if _live(shared.get(tid))}

    def task_group_ids(self) -> list[str]:
        """The Globus Compute ids of every task the web service holds in this coordinator's
        work group (the SDK's own ``get_task_group``, which ``reload_tasks`` reads)."""
        web = self.client._compute_web_client.v2
        reply = web.get_task_group(str(self.task_group_id))
        return [str(t["id"]) for t in reply.get("tasks", [])]

    def cancel(self, task_id: str) -> bool:
        """Withdraw a task not seen started: the site's own cancel first, where it has one
        (the embedded federation's ends a user endpoint process holding only this task, and
        its batch job with it); else claim its tag first and hold its shape's pending blocks
        beyond the work still waiting (the Globus Compute service has no task cancel)."""
        if self._canceller is not None:
            done = self._canceller(task_id)
            if done is not None or self.jobs is None:
                return bool(done)
        return self.jobs is not None and self.jobs.withdraw(task_id)

    def withdraw_future(self, future: Future[Any]) -> bool:
        """Withdraw a task not acknowledged yet (no id to cancel it by): by its claim."""
        return self.jobs is not None and self.jobs.withdraw_future(future)

    @property
    def can_cancel(self) -> bool:
        return self._canceller is not None or self.jobs is not None

    def close(self) -> None:
        if self.jobs is not None:
            self.jobs.close()  # first: its thread must not make a new executor after this
        with _RELOADED_LOCK:  # its watchers stop: what they would have served goes too
            _RELOADED.pop(str(self.task_group_id), None)
        with self._lock:
            executors = [*self._executors.values(), *self._reloaders]
            self._executors.clear()
            self._reloaders.clear()
        for ex in executors:
            ex.shutdown(wait=False, cancel_futures=True)
