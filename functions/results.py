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


def run_and_spill(
    fn_payload: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    limit_bytes: int,
    directory: str | None,
    name: str,
) -> Any:
    """Call the serialized function; return its value, or a reference if it is too large."""
    import hashlib
    import os

    from globus_compute_sdk.serialize import ComputeSerializer

    serde = ComputeSerializer()
    fn = serde.deserialize(fn_payload)
    value = fn(*args, **kwargs)
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


def make_bytes(n_bytes: int) -> bytes:
    """A deterministic byte string of ``n_bytes`` (a workload whose result is large)."""
    import hashlib

    out = bytearray()
    block = b"seed"
    while len(out) < n_bytes:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n_bytes])
