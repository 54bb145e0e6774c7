"""A caller's workspace on a site: where their tasks run and their files stay between steps.

Each caller (and, when given, each named workflow of theirs) has a folder under every site's
storage root, ``<storage root>/workspaces/<caller>/<workflow>``. The storage root is the
directory the site's Globus collection maps to (``federation.core.storage`` locally), so a
path in the workspace is also a path ``move_data`` can name. A shell task runs in its
workspace (its working directory); every task's environment names it
(``FEDERATION_WORKSPACE``) and the site (``FEDERATION_SITE``). When the task ends, the files
it created or changed there are listed (path, size, sha256; at most :data:`MAX_OUTPUTS`,
with a count of the rest), so the next step names them from the result manifest.

The shell side is a few lines of POSIX shell around the task's command
(:func:`wrap_shell`); its listing comes back as the last lines of the task's stdout and is
taken out of it again (:func:`split_outputs`).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator

from federation.core.errors import TransferPathError, WorkspaceAccessError
from federation.core.model import Frozen

WORKSPACES = "workspaces"
DEFAULT_WORKFLOW = "default"
MAX_OUTPUTS = 100
"""Files listed per task; the rest are counted (``outputs_more``)."""
HASH_LIMIT_BYTES = 256 * 1024 * 1024
"""Larger files are listed without a digest (reading them would cost the task's node)."""
LIST_MARK = "__federation_outputs__"
OUTPUT_MARK = "__federation_output__"
MORE_MARK = "__federation_outputs_more__"

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class OutputFile(Frozen):
    """A file a task created or changed in its workspace."""

    path: str
    """Relative to the workspace (as ``move_data`` and the next task name it)."""
    size_bytes: int
    sha256: str | None = None
    """None for files over :data:`HASH_LIMIT_BYTES`."""


def folder_name(name: str) -> str:
    """``name`` as one safe folder name: itself when it is one, else a readable part and a
    digest (so ``alice@uchicago.edu`` and ``alice@uchicago.ed`` never share a folder)."""
    if _SAFE.match(name) and name not in (".", ".."):
        return name
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:40] or "x"
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def workspace_rel(caller: str, workflow: str | None = None) -> PurePosixPath:
    """The workspace's path under a site's storage root."""
    return PurePosixPath(WORKSPACES, folder_name(caller), folder_name(workflow or DEFAULT_WORKFLOW))


def inside(workspace: PurePosixPath, path: str) -> PurePosixPath:
    """``path`` (relative to the workspace) as a path under the storage root; refuses one
    that leaves the workspace (absolute, or through ``..``)."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(
            f"{path!r} is not a path inside the workspace: name files relative to it "
            "(e.g. 'data/input.csv'), without '..'"
        )
    return workspace / p


def workspace_path(path: str) -> str:
    """``path`` itself, if it names a file inside a workspace (else ValueError, as
    :func:`inside`): the check of :data:`WorkspacePath` fields."""
    inside(PurePosixPath("."), path)
    return path


WorkspacePath = Annotated[str, AfterValidator(workspace_path)]
"""A path relative to a workspace, checked to stay inside it (no absolute path, no ``..``)."""


def wrap_shell(command: str, root: str, site: str) -> str:
    """``command`` run in the workspace ``root`` (created if missing), with
    ``FEDERATION_WORKSPACE`` and ``FEDERATION_SITE`` set; afterwards the files it created or
    changed there are printed as the last lines of stdout (``OUTPUT_MARK`` lines), and the
    command's own exit code is kept."""
    w = shlex.quote(root)
    listing = (
        f'find . -type f -newer "$__fed_m" ! -path "./.federation-start.*" 2>/dev/null '
        "| sed 's|^\\./||' | sort > \"$__fed_m.list\"; "
        f"__fed_n=0; while IFS= read -r __fed_f; do __fed_n=$((__fed_n+1)); "
        f'if [ "$__fed_n" -gt {MAX_OUTPUTS} ]; then continue; fi; '
        '__fed_s=$(stat -c %s "$__fed_f" 2>/dev/null || echo 0); '
        f'if [ "$__fed_s" -le {HASH_LIMIT_BYTES} ]; then '
        '__fed_h=$(sha256sum "$__fed_f" 2>/dev/null | cut -c1-64); else __fed_h=-; fi; '
        f'printf \'{OUTPUT_MARK}\\t%s\\t%s\\t%s\\n\' "$__fed_s" "${{__fed_h:--}}" "$__fed_f"; '
        'done < "$__fed_m.list"; '
        f'if [ "$__fed_n" -gt {MAX_OUTPUTS} ]; then '
        f"printf '{MORE_MARK}\\t%s\\n' $((__fed_n-{MAX_OUTPUTS})); fi; "
        'rm -f "$__fed_m" "$__fed_m.list"'
    )
    return (
        f"mkdir -p {w} && cd {w} || exit 3\n"
        f"export FEDERATION_WORKSPACE={w} FEDERATION_SITE={shlex.quote(site)}\n"
        '__fed_m=$(mktemp "$PWD/.federation-start.XXXXXX"); sleep 0.01\n'
        f"( {command}\n)\n"
        "__fed_rc=$?\n"
        f"printf '\\n{LIST_MARK}\\n'\n"
        f"{listing}\n"
        'exit "$__fed_rc"'
    )


def split_outputs(stdout: str) -> tuple[str, list[OutputFile], int]:
    """The task's own stdout, and the outputs :func:`wrap_shell` listed after it (with the
    count of those left out). Output without the listing is returned as it is."""
    cut = stdout.rfind("\n" + LIST_MARK + "\n")
    if cut < 0:
        return stdout, [], 0
    outputs: list[OutputFile] = []
    more = 0
    for line in stdout[cut + len(LIST_MARK) + 2 :].splitlines():
        parts = line.split("\t", 3)
        if parts[0] == OUTPUT_MARK and len(parts) == 4 and parts[1].isdigit():
            digest = parts[2] if re.fullmatch(r"[0-9a-f]{64}", parts[2]) else None
            outputs.append(OutputFile(path=parts[3], size_bytes=int(parts[1]), sha256=digest))
        elif parts[0] == MORE_MARK and len(parts) == 2 and parts[1].isdigit():
            more = int(parts[1])
    return stdout[:cut], outputs, more


PathBase = Literal["workspace", "storage"]
"""How a transfer names its paths: relative to the caller's ``workspace`` on each site, or to
the site's ``storage`` root (shared data; other callers' workspaces are refused there)."""


def storage_path(
    caller: str,
    path: str,
    paths: PathBase = "workspace",
    workflow: str | None = None,
    *,
    trusted: bool = False,
) -> str:
    """``path`` as a path under a site's storage root, for ``caller``.

    ``workspace``: relative to the caller's workspace (no absolute paths, no ``..``).
    ``storage``: relative to the storage root as given, but a path into another caller's
    workspace is refused (:class:`WorkspaceAccessError`): a caller's workspace is theirs.
    An absolute path is only ``trusted`` callers' (the coordinator's own local user): it
    could name any workspace.
    """
    if paths == "workspace":
        try:
            return str(inside(workspace_rel(caller, workflow), path))
        except ValueError as e:
            raise TransferPathError(str(e)) from e
    p = PurePosixPath(path)
    if p.is_absolute():
        if not trusted:
            raise TransferPathError(
                f"{path!r} is absolute; name it relative to the site's storage root "
                "(or, with paths='workspace', to your workspace)"
            )
        return path  # the transfer backend keeps it inside the root (or refuses it)
    parts = [x for x in p.parts if x not in ("", ".")]
    if len(parts) >= 2 and parts[0] == WORKSPACES and parts[1] != folder_name(caller):
        raise WorkspaceAccessError(
            f"{path!r} is in another caller's workspace ({WORKSPACES}/{parts[1]}); a caller "
            f"reads and writes only their own ({WORKSPACES}/{folder_name(caller)}). Ask its "
            "owner to move the data to a shared folder of the storage root"
        )
    return path
