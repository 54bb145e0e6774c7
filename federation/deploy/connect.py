"""One way to a coordinator for every entry point: a ``federation.yaml``, or the embedded one.

``federation serve``, ``inspect``, ``submit``, ``group``, ``move``, the MCP server in its
embedded mode and the Jupyter executor all connect here. With a config (``--config PATH``,
``config=...``, or ``$FEDERATION_CONFIG``) they act on the sites it names, local and Globus
Compute cloud sites alike, as ``serve`` does; without one, on the embedded local federation.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from federation.core.errors import StoreInUseError
from federation.deploy.config import CONFIG_ENV, Deployment, load_config
from federation.runtime.coordinator import Coordinator


@dataclass
class Connection:
    """A coordinator and what to close with it (the local sites' offline service)."""

    coord: Coordinator
    home: Path
    config: Path | None = None
    """The ``federation.yaml`` it was made from (None: the embedded local federation)."""
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        self.coord.close()
        for close in self.closers:
            close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def configured(config: Path | str | None = None) -> Path | None:
    """The config to act on: ``config``, else ``$FEDERATION_CONFIG``; None for the
    embedded local federation."""
    if config is not None:
        return Path(config)
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else None


STORE_HANDOVER_S = 30.0
"""How long a starting ``serve`` or ``mcp`` waits for the coordinator before it on the same
store to finish closing (an agent restarts its MCP server at once; the old one still drains
its results and acknowledgements for a few seconds)."""


def hold_store(store: Path, wait_s: float = 0.0) -> Callable[[], None]:
    """Hold ``store`` for this coordinator alone (an advisory lock on ``<store>.lock``, let
    go when the process ends however it ends); returns what lets it go. ``wait_s``: how long
    to wait for a holder that is going away.

    Raises :class:`StoreInUseError` when another live coordinator holds it: two coordinators
    on one store would number their events over each other's."""
    lock = store.with_name(store.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StoreInUseError(
                f"another coordinator (pid {holder}) keeps its tasks and events in {store}: "
                "stop it or use it (`--service URL`), or start this one with another --home, "
                "or with --in-memory (nothing kept across restarts)"
            ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())

    def release() -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    return release


def connect(
    config: Path | str | None = None,
    *,
    home: Path | None = None,
    sites: list[str] | None = None,
    bring_up: bool = True,
    durable: bool = False,
    exclusive: bool = False,
    store_path: Path | None = None,
    telemetry: bool = True,
    local_path: str | None = None,
    **coordinator_kwargs: Any,
) -> Connection:
    """A coordinator over the sites of ``config`` (see :func:`configured`), or over the
    embedded local federation (``sites``: only these). ``bring_up`` starts the local sites
    (cloud endpoints are their admins'); ``durable`` keeps tasks in ``coordinator.db``
    (``store_path``: elsewhere, embedded only) and re-attaches to the tasks left in flight
    there; ``exclusive`` (durable only): hold the store (:func:`hold_store`) for as long as
    the connection is open, as ``serve`` and ``mcp`` do; ``local_path`` is how the embedded
    sites are reached (``embedded`` or ``cloud``, see :data:`federation.deploy.local.PATHS`;
    default ``$FEDERATION_PATH``)."""
    path = configured(config)
    held: list[Callable[[], None]] = []
    try:
        if path is not None:
            if sites:
                raise ValueError(
                    f"--site {' '.join(sites)} is for the embedded federation; with a config, "
                    f"the sites are the ones {path} names"
                )
            if store_path is not None:
                raise ValueError(f"store_path is for the embedded federation: {path} names a home")
            deployment = Deployment(load_config(path), home=home)
            if durable and exclusive:
                held.append(hold_store(deployment.home / "coordinator.db", STORE_HANDOVER_S))
            if bring_up:
                deployment.up()
            coord = deployment.connect(durable=durable, telemetry=telemetry, **coordinator_kwargs)
            return Connection(coord, deployment.home, path, [deployment.close, *held])
        from federation.deploy.local import LocalSites

        local = LocalSites(home=home, sites=sites, path=local_path)
        if durable and exclusive:
            held.append(hold_store(store_path or local.home / "coordinator.db", STORE_HANDOVER_S))
        if bring_up:
            local.up()
        coord = local.connect(
            durable=durable, store_path=store_path, telemetry=telemetry, **coordinator_kwargs
        )
        closers = [local.service.close] if local.service is not None else []
        return Connection(coord, local.home, None, [*closers, *held])
    except BaseException:
        for release in held:
            release()
        raise
