"""What the coordinator's own functions look like on the wire: by source, never by reference.

A site's worker environment has Globus Compute and nothing of this repository, so a
function shipped *by reference* ("import ``functions.probes``, take ``probe_slurm``": the
SDK's default for a function of an importable module) fails there with
``ModuleNotFoundError``. Everything the coordinator ships of its own (the probes, the
accounting query, the result wrapper :func:`functions.results.run_and_spill`, the
catalogue's workloads) lives in the ``functions`` package, imports what it needs inside its
body and refers to no module global, so it travels as its **source text**
(``PureSourceTextInspect``): readable by a site admin, independent of the worker's copy of
anything, and the same bytes whatever the coordinator's dill version. Shell tasks travel as
the SDK's own ``ShellFunction``.

A scientist's own Python function keeps the SDK's default (dill: by value when it is
defined in a notebook or script, by reference when it comes from an installed module, which
the site must then have too). It is wrapped in ``run_and_spill`` with its payload made here,
so the function the executor itself ships is always one of ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from globus_compute_sdk.serialize import (
    AllCodeStrategies,
    ComputeSerializer,
    PureSourceTextInspect,
)

OWN_PACKAGE = "functions"
"""The package whose functions are shipped by source."""


def executor_serializer() -> ComputeSerializer:
    """The serializer a site's Executor ships with: source first (our functions), then the
    SDK's own ways (the ``ShellFunction`` object, which has no source of its own)."""
    return ComputeSerializer(strategy_code=AllCodeStrategies())


def is_own(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is one of the coordinator's own shipped functions."""
    module = getattr(fn, "__module__", "") or ""
    return module == OWN_PACKAGE or module.startswith(OWN_PACKAGE + ".")


def code_payload(fn: Callable[..., Any]) -> str:
    """``fn`` serialized for :func:`functions.results.run_and_spill` to call on the worker:
    ours by source, a scientist's by the SDK's default."""
    strategy = PureSourceTextInspect() if is_own(fn) else None
    return str(ComputeSerializer(strategy_code=strategy).serialize(fn))
