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
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import Field

from federation.core.errors import FederationError
from federation.core.model import Frozen
from federation.core.tasks import PythonTask, ShellTask, TaskSpec
from federation.core.workspace import OutputFile, split_outputs, wrap_shell
from functions.results import OUTPUTS_KEY, REF_KEY, run_and_spill

DEFAULT_INLINE_LIMIT_BYTES = 10 * 1024 * 1024 - 256 * 1024
"""Globus Compute's 10 MiB result limit, less room for the result message around it."""

StorageRoot = Callable[[str], Path | None]
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
    task: TaskSpec,
    site: str,
    name: str,
    storage: StorageRoot | None,
    limit_bytes: int,
    workspace: PurePosixPath | None = None,
) -> TaskSpec:
    """What to send for ``task``: a Python task inside ``run_and_spill``, which spills large
    results to ``storage`` (when there is one) and is shipped by source; the task's own
    function travels as its payload (:func:`federation.sites.shipping.code_payload`).

    With a ``workspace`` (its path under the site's storage root) and a storage root, the
    task runs there and lists the files it wrote (:mod:`federation.core.workspace`)."""
    base = storage(site) if storage is not None else None  # None: the site has no storage
    root = str(base / workspace) if base is not None and workspace else None
    if isinstance(task, ShellTask):
        if root is None:
            return task
        return task.model_copy(update={"command": wrap_shell(task.command, root, site)})
    if not isinstance(task, PythonTask):
        return task
    from federation.sites.shipping import code_payload

    payload = code_payload(task.fn)
    directory = str(base / "results") if base is not None else None
    return PythonTask(
        run_and_spill,
        (payload, task.args, task.kwargs, limit_bytes, directory, name, root, site),
        name=task.label,
    )


def take_outputs(value: Any, is_shell: bool) -> tuple[Any, tuple[OutputFile, ...], int]:
    """The task's own value, and the workspace files it wrote (with the count left out):
    from ``run_and_spill``'s wrapper, or the listing at the end of a shell task's stdout."""
    if isinstance(value, dict) and value.get(OUTPUTS_KEY) == 1:
        files = tuple(OutputFile.model_validate(o) for o in value.get("outputs") or ())
        return value.get("value"), files, int(value.get("more") or 0)
    stdout = getattr(value, "stdout", None)
    if is_shell and isinstance(stdout, str):
        own, files_list, more = split_outputs(stdout)
        if files_list or more or own != stdout:
            value.stdout = own
        return value, tuple(files_list), more
    return value, (), 0


def as_ref(value: Any, site: str) -> ResultRef | None:
    """The reference ``run_and_spill`` returned in place of a large value, if it did."""
    if isinstance(value, dict) and value.get(REF_KEY) == 1:
        fields = {k: v for k, v in value.items() if k != REF_KEY}
        return ResultRef(site=site, **fields)
    return None
