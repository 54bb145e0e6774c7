"""Results too large for the Globus Compute payload: written to site storage, referenced.

The engine refuses results over 10 MiB (``MaxResultSizeExceeded``). Every Python task is
shipped inside :func:`functions.results.run_and_spill`, which returns the value as usual
when its serialized form fits ``inline_limit_bytes`` and otherwise writes it to the site's
storage (``federation.core.storage.site_storage``) and returns a :class:`ResultRef`: path,
size and SHA-256. ``get_result`` / ``result_value`` load it back and check the digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from federation.core.errors import FederationError
from federation.core.model import Frozen
from federation.core.tasks import PythonTask, TaskSpec
from functions.results import REF_KEY, run_and_spill

DEFAULT_INLINE_LIMIT_BYTES = 10 * 1024 * 1024 - 256 * 1024
"""Globus Compute's 10 MiB result limit, less room for the result message around it."""

StorageRoot = Callable[[str], Path]
"""A site name -> the directory (on that site) where its large results are written."""


class ResultTooLargeError(FederationError):
    """A spilled result could not be read back (missing, truncated or altered)."""


class ResultRef(Frozen):
    """Where a result that was too large to return inline was written."""

    site: str
    path: str
    size_bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    format: Literal["globus-compute-serializer"] = "globus-compute-serializer"

    def load(self) -> Any:
        """The value, after checking its size and digest."""
        from globus_compute_sdk.serialize import ComputeSerializer

        p = Path(self.path)
        try:
            data = p.read_bytes()
        except OSError as e:
            raise ResultTooLargeError(
                f"result stored at {p} on site {self.site} cannot be read ({e}); "
                "copy it from the site's storage (move_data) and load it there"
            ) from e
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != self.size_bytes or digest != self.sha256:
            raise ResultTooLargeError(
                f"result stored at {p} does not match its manifest ({len(data)} bytes, "
                f"sha256 {digest[:12]}; expected {self.size_bytes} bytes, "
                f"{self.sha256[:12]}): it was changed or cut short; run the task again"
            )
        return ComputeSerializer().deserialize(data.decode())


def shipped(
    task: TaskSpec, site: str, name: str, storage: StorageRoot | None, limit_bytes: int
) -> TaskSpec:
    """What to send for ``task``: a Python task inside ``run_and_spill``, which spills large
    results to ``storage`` (when there is one) and is shipped by source; the task's own
    function travels as its payload (:func:`federation.sites.shipping.code_payload`)."""
    if not isinstance(task, PythonTask):
        return task
    from federation.sites.shipping import code_payload

    payload = code_payload(task.fn)
    directory = str(storage(site) / "results") if storage is not None else None
    return PythonTask(
        run_and_spill,
        (payload, task.args, task.kwargs, limit_bytes, directory, name),
        name=task.label,
    )


def as_ref(value: Any, site: str) -> ResultRef | None:
    """The reference ``run_and_spill`` returned in place of a large value, if it did."""
    if isinstance(value, dict) and value.get(REF_KEY) == 1:
        fields = {k: v for k, v in value.items() if k != REF_KEY}
        return ResultRef(site=site, **fields)
    return None
