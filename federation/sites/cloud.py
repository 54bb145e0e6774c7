"""A site served by a real Globus Compute endpoint, through the Globus Compute cloud.

:class:`CloudSite` is :class:`~federation.sites.compute.ComputeSite` (one ``Executor`` per
(endpoint, user_endpoint_config), task-group re-attach) plus the checks the cloud needs
before anything is sent:

* the endpoint is online (``Client.get_endpoint_status``), else
  :class:`~federation.core.errors.SiteUnavailableError`;
* the endpoint's Python (``Client.get_endpoint_metadata``) has the coordinator's
  major.minor, else :class:`~federation.core.errors.VersionMismatchError` for Python tasks
  (``python_mismatch: warn`` turns it into a logged warning);
* a task's serialized function plus arguments fit the service's 10 MB payload limit, else
  :class:`~federation.core.errors.PayloadTooLargeError` before any request is made;
* Globus Auth failures come out as :mod:`federation.sites.globus_auth`'s clear errors.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, Literal

from globus_compute_sdk import Client, ShellFunction

from federation.core.envelope import Shape
from federation.core.errors import (
    PayloadTooLargeError,
    SerializationError,
    SiteUnavailableError,
    VersionMismatchError,
)
from federation.core.model import Frozen
from federation.core.spec import SiteSpec
from federation.core.tasks import PythonTask, ShellTask, TaskSpec
from federation.sites.compute import ComputeSite, ExecutorFactory, cloud_executor
from federation.sites.globus_auth import AuthSettings, auth_errors

logger = logging.getLogger(__name__)

PAYLOAD_LIMIT_BYTES = 10 * 1000 * 1000
"""The Globus Compute web service rejects larger task payloads (TASK_PAYLOAD_TOO_LARGE)."""

PythonMismatch = Literal["error", "warn"]


class EndpointInfo(Frozen):
    """What the cloud says about one endpoint (status and metadata)."""

    endpoint_id: uuid.UUID
    status: str
    python_version: str | None = None
    endpoint_version: str | None = None
    hostname: str | None = None
    checked_at: float


_SHELL_SIZE_FN = ShellFunction("{command}")


def payload_size_bytes(client: Client, task: TaskSpec) -> int:
    """Bytes the SDK would send for ``task``: serialized function plus arguments (a shell
    task's function is one shared object whose command is its argument)."""
    ser = client.fx_serializer
    try:
        if isinstance(task, ShellTask):
            fn: Any = _SHELL_SIZE_FN
            args: tuple[Any, ...] = ()
            kwargs: dict[str, Any] = {"command": task.command}
        elif isinstance(task, PythonTask):
            fn, args, kwargs = task.fn, tuple(task.args), dict(task.kwargs)
        else:  # pragma: no cover - TaskSpec is closed
            raise TypeError(f"not a task: {task!r}")
        code = _code_size(ser, fn)
        payload = ser.pack_buffers([ser.serialize(args), ser.serialize(kwargs)])
    except SerializationError:
        raise
    except Exception as e:
        raise SerializationError(f"task {task.label!r} cannot be serialized: {e}") from e
    return code + len(payload.encode())


_CODE_SIZES: dict[int, tuple[Any, int]] = {}


def _code_size(ser: Any, fn: Any) -> int:
    """The serialized function's size, once per function object (serializing by source
    takes milliseconds; a fan-out ships one function many times)."""
    hit = _CODE_SIZES.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    size = len(ser.serialize(fn).encode())
    if len(_CODE_SIZES) > 1024:
        _CODE_SIZES.clear()
    _CODE_SIZES[id(fn)] = (fn, size)
    return size


def check_payload(client: Client, task: TaskSpec, site: str) -> int:
    """Raise :class:`PayloadTooLargeError` if ``task`` exceeds the payload limit."""
    size = payload_size_bytes(client, task)
    if size > PAYLOAD_LIMIT_BYTES:
        raise PayloadTooLargeError(
            f"task {task.label!r} for site {site}: function + arguments serialize to "
            f"{size / 1e6:.1f} MB; Globus Compute accepts at most "
            f"{PAYLOAD_LIMIT_BYTES / 1e6:.0f} MB. Stage the data to the site first "
            "(move_data, or write it to the site's storage) and pass its path instead; "
            "results over 10 MB fail the same way, so write large results to site "
            "storage and return the path."
        )
    return size


def python_major_minor(version: str) -> tuple[int, int] | None:
    parts = version.strip().split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def python_mismatch_message(
    site: str, client_py: str, endpoint_py: str, who: str = "the endpoint runs"
) -> str | None:
    """None when major.minor agree; else a message naming both versions and the fix."""
    a, b = python_major_minor(client_py), python_major_minor(endpoint_py)
    if a is None or b is None or a == b:
        return None
    return (
        f"site {site}: the coordinator runs Python {client_py} but {who} "
        f"Python {endpoint_py}; functions and arguments pickled on one do not load on the "
        f"other. Run the coordinator under Python {b[0]}.{b[1]}, or have the site admin "
        f"start the endpoint (and its worker_init environment) with Python {a[0]}.{a[1]}; "
        "shell tasks are unaffected. Set python_mismatch: warn for this site to try anyway."
    )


def _metadata_python(meta: dict[str, Any]) -> str | None:
    for block in (meta, meta.get("metadata") or {}):
        if isinstance(block, dict) and block.get("python_version"):
            return str(block["python_version"])
    return None


class CloudSite(ComputeSite):
    """:class:`ComputeSite` for a real endpoint id, with the cloud's checks up front."""

    def __init__(
        self,
        spec: SiteSpec,
        endpoint_id: uuid.UUID,
        client: Client,
        *,
        auth: AuthSettings | None = None,
        executor_factory: ExecutorFactory = cloud_executor,
        task_group_id: uuid.UUID | None = None,
        account: str | None = None,
        budgets: Mapping[str, float] | None = None,
        python_mismatch: PythonMismatch = "error",
        status_ttl_s: float = 60.0,
        job_check_s: float | None = 60.0,
        storage_root: str | None = None,
    ) -> None:
        super().__init__(
            spec,
            endpoint_id,
            client,
            executor_factory=executor_factory,
            task_group_id=task_group_id,
            account=account,
            budgets=budgets,
            job_check_s=job_check_s,
            storage_root=storage_root,
        )
        self.auth = auth or AuthSettings()
        self.worker_python: str | None = None
        """The Python the site's workers run, as the last probe (run on them) reported."""
        self.python_mismatch = python_mismatch
        self.status_ttl_s = status_ttl_s
        self._info: EndpointInfo | None = None
        self._meta: dict[str, Any] | None = None
        """The endpoint's metadata, asked once, when a Python task needs its Python (the
        probe reports the workers' own, which wins): ``None`` until asked."""
        self._info_lock = threading.Lock()
        self.warnings: list[str] = []

    def endpoint_info(self, *, refresh: bool = False, metadata: bool = False) -> EndpointInfo:
        """Status of the endpoint, cached for ``status_ttl_s``, and its metadata when asked
        for (``metadata``, or ``refresh``; asked once, then kept): a probe round asks the
        status only, so connecting to N sites costs N requests of the service's 20 per 10 s,
        not 2N (over the limit at six sites, a 429 and its 10-s wait).

        Raises :class:`SiteUnavailableError` when the endpoint is offline or unknown, and
        the auth errors of :func:`~federation.sites.globus_auth.translate`.
        """
        with self._info_lock:
            info = self._info
            want_meta = refresh or (metadata and self._meta is None)
            if (
                not want_meta  # (``refresh`` asks both again)
                and info is not None
                and time.monotonic() - info.checked_at < self.status_ttl_s
            ):
                return info
            what = f"Globus Compute (endpoint {self.endpoint_id} of site {self.name})"
            with auth_errors(self.auth, what=what):
                try:
                    status = self.client.get_endpoint_status(str(self.endpoint_id))
                    if want_meta:
                        self._meta = self.client.get_endpoint_metadata(str(self.endpoint_id)) or {}
                except Exception as e:
                    if getattr(e, "http_status", None) == 404:
                        raise SiteUnavailableError(
                            f"site {self.name}: endpoint {self.endpoint_id} is not known to "
                            "Globus Compute. Check sites."
                            f"{self.name}.endpoint_id in federation.yaml against "
                            "`globus-compute-endpoint list` on the site."
                        ) from e
                    raise
            state = str((status or {}).get("status", "unknown"))
            meta = self._meta
            info = EndpointInfo(
                endpoint_id=self.endpoint_id,
                status=state,
                python_version=_metadata_python(meta or {}),
                endpoint_version=(meta or {}).get("endpoint_version"),
                hostname=(meta or {}).get("hostname"),
                checked_at=time.monotonic(),
            )
            if state != "online":
                self._info = None  # ask again next time; it may come back
                raise SiteUnavailableError(
                    f"site {self.name}: endpoint {self.endpoint_id} is {state}. Ask the site "
                    "admin to start it (`globus-compute-endpoint start "
                    f"{self.name}` on the login node; see docs/deploy.md)."
                )
            self._info = info
            return info

    def _check_python(self, info: EndpointInfo, task: TaskSpec | None) -> None:
        """The Python that runs tasks is the workers' (reported by the last probe, which
        runs on them); until a probe came back, the endpoint process's (its metadata)."""
        if self.worker_python is not None:
            theirs, who = self.worker_python, "the site's workers run"
        elif info.python_version is not None:
            theirs, who = info.python_version, "the endpoint runs"
        else:
            return
        msg = python_mismatch_message(self.name, platform.python_version(), theirs, who)
        if msg is None:
            return
        if isinstance(task, PythonTask) and self.python_mismatch == "error":
            raise VersionMismatchError(msg)
        if msg not in self.warnings:
            self.warnings.append(msg)
            logger.warning("%s", msg)

    def probe(self) -> Future[dict[str, Any]]:
        # The probe is written for any Python >= 3.6 and ships by source: a version
        # mismatch is only warned about here.
        self._check_python(self.endpoint_info(), None)
        with auth_errors(self.auth, what=f"Globus Compute (site {self.name})"):
            fut = super().probe()
        fut.add_done_callback(self._learn_worker_python)
        return fut

    def _ensure_online(self, *, refresh: bool = False) -> None:
        self.endpoint_info(refresh=refresh)  # probe() asked it already (cached for status_ttl_s)

    def _learn_worker_python(self, fut: Future[dict[str, Any]]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        raw = fut.result()
        version = raw.get("python_version") if isinstance(raw, dict) else None
        if isinstance(version, str) and version:
            self.worker_python = version

    def submit(self, task: TaskSpec, shape: Shape, tag: str | None = None) -> Future[Any]:
        """Ship ``task`` with its shape's config; it claims ``tag`` (a fresh one if none is
        given) on the site before it runs, so its start is read from its claim and a
        withdrawal can win the claim first (:mod:`federation.sites.jobwatch`)."""
        check_payload(self.client, task, self.name)
        # a Python task checks the Python it will meet: the workers' once a probe said it,
        # else the endpoint's own (its metadata, asked once)
        needs_meta = isinstance(task, PythonTask) and self.worker_python is None
        self._check_python(self.endpoint_info(metadata=needs_meta), task)
        with auth_errors(self.auth, what=f"Globus Compute (site {self.name})"):
            return super().submit(task, shape, tag)

    def _run_shell(self, command: str) -> Future[Any]:
        with auth_errors(self.auth, what=f"Globus Compute (site {self.name})"):
            return super()._run_shell(command)
