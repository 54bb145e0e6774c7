"""The wrapper that keeps large return values out of the Globus Compute payload.

:func:`run_and_spill` runs on the endpoint: it calls the task's function and, when the
serialized return value is larger than ``limit_bytes``, writes it to the site's storage and
returns a small reference instead (with no ``directory``, it returns the value as it is).
Like the probes, it imports everything inside its body and refers to no module global: it
is shipped by source, to workers that have nothing of this repository.
"""

from __future__ import annotations

from typing import Any

REF_KEY = "__federation_result_ref__"
"""The key that marks a returned dict as a reference to a spilled result."""
OUTPUTS_KEY = "__federation_outputs__"
"""The key that marks a returned dict as a value with the workspace files it wrote."""


def run_and_spill(
    fn_payload: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    limit_bytes: int,
    directory: str | None,
    name: str,
    workspace: str | None = None,
    site: str | None = None,
) -> Any:
    """Call the serialized function; return its value, or a reference if it is too large.

    With a ``workspace`` (created if missing; ``FEDERATION_WORKSPACE`` and
    ``FEDERATION_SITE`` name it and the site), the files the function created or changed
    there come back with the value:
    ``{OUTPUTS_KEY: 1, "value": ..., "outputs": [...], "more": n}``."""
    import hashlib
    import os

    from globus_compute_sdk.serialize import ComputeSerializer

    def files(root: str) -> dict[str, tuple[int, int]]:
        seen: dict[str, tuple[int, int]] = {}
        for base, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".federation")]
            for n in names:
                full = os.path.join(base, n)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                seen[os.path.relpath(full, root)] = (st.st_mtime_ns, st.st_size)
                if len(seen) > 100_000:  # a workspace this large is listed no further
                    return seen
        return seen

    def spill(value: Any) -> Any:
        if directory is None:
            return value
        data = serde.serialize(value).encode()
        if len(data) <= limit_bytes:
            return value
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name)
        tmp = path + ".part"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return {
            "__federation_result_ref__": 1,
            "path": path,
            "size_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "format": "globus-compute-serializer",
        }

    before: dict[str, tuple[int, int]] = {}
    if workspace is not None:
        os.makedirs(workspace, exist_ok=True)  # named, not entered: workers may be shared
        os.environ["FEDERATION_WORKSPACE"] = workspace
        os.environ["FEDERATION_SITE"] = site or ""
        before = files(workspace)
    serde = ComputeSerializer()
    fn = serde.deserialize(fn_payload)
    value = spill(fn(*args, **kwargs))
    if workspace is None:
        return value
    changed = sorted(p for p, stat in files(workspace).items() if before.get(p) != stat)
    outputs = []
    for p in changed[:100]:
        full = os.path.join(workspace, p)
        try:
            size = os.path.getsize(full)
            digest = None
            if size <= 256 * 1024 * 1024:
                h = hashlib.sha256()
                with open(full, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                digest = h.hexdigest()
        except OSError:
            continue
        outputs.append({"path": p, "size_bytes": size, "sha256": digest})
    more = max(0, len(changed) - 100)
    return {"__federation_outputs__": 1, "value": value, "outputs": outputs, "more": more}


def make_bytes(n_bytes: int) -> bytes:
    """A deterministic byte string of ``n_bytes`` (a workload whose result is large)."""
    import hashlib

    out = bytearray()
    block = b"seed"
    while len(out) < n_bytes:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n_bytes])
