"""Local backend: copies between the site storage directories of the local federation.

Each file is copied under a temporary name next to its destination, checksummed (sha256 of
the bytes read from the source and of the bytes written), then renamed into place, so a
reader never sees half a file; a directory that does not exist yet is assembled under a
temporary name and renamed into place as a whole. Files that already match at the
destination (by the request's sync level) are skipped, which makes re-running an
interrupted copy safe.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from federation.core.errors import (
    DataNotFoundError,
    TransferError,
    TransferPathError,
    UnknownSiteError,
)
from federation.core.storage import site_storage
from federation.transfer.backend import Reporter
from federation.transfer.models import DataRef, SyncLevel, TransferRequest, TransferStatus
from federation.transfer.paths import under_root

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20


class LocalCopyBackend:
    """Copies files or directories between ``<home>/storage/<site>`` folders.

    Args:
        sites: the sites it serves (default: any valid site name).
        home: the federation home (default ``$FEDERATION_HOME``).
        progress_every_bytes: report progress within a file at most this often.
    """

    name = "local"

    def __init__(
        self,
        sites: Iterable[str] | None = None,
        home: Path | None = None,
        *,
        progress_every_bytes: int = 64 << 20,
    ) -> None:
        self.sites = sorted(sites) if sites is not None else None
        self.home = home
        self.progress_every_bytes = progress_every_bytes
        self._threads: list[threading.Thread] = []

    # --- seam -------------------------------------------------------------------------------
    def serves(self, site: str) -> bool:
        return self.sites is None or site in self.sites

    def root(self, site: str) -> Path:
        """The site's storage directory (created on first use)."""
        if not self.serves(site):
            raise UnknownSiteError(site, self.sites or [])
        try:
            return site_storage(site, self.home).resolve()
        except ValueError as e:
            raise UnknownSiteError(site, self.sites or []) from e

    def resolve(self, ref: DataRef) -> Path:
        """``ref`` as a path inside its site's root; symlinks may not lead outside it."""
        root = self.root(ref.site)
        path = Path(under_root(str(root), ref.path, ref.site))
        real = Path(os.path.realpath(path))
        if real != root and root not in real.parents:
            raise TransferPathError(
                f"path {ref.path!r} on {ref.site} leads outside the site's storage root "
                f"{root} through a symbolic link; name the real location inside the root"
            )
        return path

    def validate(self, request: TransferRequest) -> None:
        src = self.resolve(request.source)
        dst = self.resolve(request.destination)
        if not src.exists():
            raise DataNotFoundError(
                f"source {request.source.describe()} does not exist ({src}); "
                "check the site and the path relative to its storage root"
            )
        if not (src.is_file() or src.is_dir()):
            raise TransferPathError(f"source {request.source.describe()} is not a file or folder")
        if src == dst or (src.is_dir() and src in dst.parents):
            raise TransferPathError(
                f"destination {request.destination.describe()} is the source or inside it"
            )
        if src.is_file() and dst.is_dir():
            raise TransferPathError(
                f"destination {request.destination.describe()} is a folder; give the full "
                "destination file path (as Globus Transfer requires)"
            )
        if src.is_dir() and dst.exists() and not dst.is_dir():
            raise TransferPathError(
                f"destination {request.destination.describe()} is a file; the source is a folder"
            )

    def start(
        self, transfer_id: str, request: TransferRequest, report: Reporter, resume: TransferStatus
    ) -> TransferStatus:
        """Validate, then copy in a worker thread; re-running after a restart is safe."""
        self.validate(request)
        t = threading.Thread(
            target=self._run,
            args=(transfer_id, request, report),
            daemon=True,
            name=f"copy-{transfer_id[:8]}",
        )
        self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()
        return TransferStatus(state="active")

    def close(self) -> None:
        for t in self._threads:
            t.join(timeout=5)

    # --- the copy -----------------------------------------------------------------------------
    def _run(self, transfer_id: str, request: TransferRequest, report: Reporter) -> None:
        try:
            report(_Copy(self, transfer_id, request, report).run())
        except TransferError as e:
            report(TransferStatus(state="failed", error=str(e)))
        except OSError as e:
            report(TransferStatus(state="failed", error=f"copy failed: {e}"))
        except Exception as e:  # never leave a transfer without a terminal status
            logger.exception("local copy %s failed", transfer_id)
            report(TransferStatus(state="failed", error=f"{type(e).__name__}: {e}"))


class _Copy:
    """One run of one transfer (so its counters are not shared between threads)."""

    def __init__(
        self, backend: LocalCopyBackend, tid: str, request: TransferRequest, report: Reporter
    ) -> None:
        self.backend = backend
        self.tag = f".part-{tid[:8]}"
        self.request = request
        self.report = report
        self.bytes = 0
        self.files = 0
        self.skipped = 0
        self.deadline = (
            time.monotonic() + request.deadline_s if request.deadline_s is not None else None
        )

    def run(self) -> TransferStatus:
        src = self.backend.resolve(self.request.source)
        dst = self.backend.resolve(self.request.destination)
        if not src.exists():
            raise DataNotFoundError(f"source {self.request.source.describe()} disappeared")
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            self._file(src, dst, staged=False)
        else:
            self._tree(src, dst)
        return TransferStatus(
            state="succeeded",
            bytes_transferred=self.bytes,
            files=self.files,
            files_skipped=self.skipped,
            checksum_verified=self.request.verify_checksum,
        )

    def _tree(self, src: Path, dst: Path) -> None:
        staged = not dst.exists()
        target = dst.with_name(f".{dst.name}{self.tag}") if staged else dst
        if staged:
            shutil.rmtree(target, ignore_errors=True)  # left over from an interrupted run
        target.mkdir(parents=True, exist_ok=True)
        for d in sorted(p for p in src.rglob("*") if p.is_dir() and not p.is_symlink()):
            (target / d.relative_to(src)).mkdir(parents=True, exist_ok=True)
        for f in sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink()):
            self._file(f, target / f.relative_to(src), staged=staged)
        if staged:
            os.rename(target, dst)

    def _file(self, src: Path, out: Path, *, staged: bool) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TransferError(
                f"deadline of {self.request.deadline_s:.0f} s passed after {self.files} "
                "file(s); move_data again to continue (files already there are skipped)"
            )
        if not staged and in_sync(src, out, self.request.sync_level):
            self.skipped += 1
            self._progress()
            return
        tmp = out.with_name(f".{out.name}{self.tag}")
        src_sum = self._copy_bytes(src, tmp)
        if self.request.verify_checksum:
            dst_sum = sha256_file(tmp)
            if dst_sum != src_sum:
                tmp.unlink(missing_ok=True)
                raise TransferError(
                    f"checksum mismatch copying {src.name}: source sha256 {src_sum}, "
                    f"destination {dst_sum}; the destination was left unchanged, try again"
                )
        shutil.copystat(src, tmp)
        os.replace(tmp, out)
        self.files += 1
        self._progress()

    def _copy_bytes(self, src: Path, tmp: Path) -> str:
        digest = hashlib.sha256()
        since = 0
        with src.open("rb") as fin, tmp.open("wb") as fout:
            while chunk := fin.read(CHUNK_BYTES):
                digest.update(chunk)
                fout.write(chunk)
                self.bytes += len(chunk)
                since += len(chunk)
                if since >= self.backend.progress_every_bytes:
                    since = 0
                    self._progress()
            fout.flush()
            os.fsync(fout.fileno())
        return digest.hexdigest()

    def _progress(self) -> None:
        self.report(
            TransferStatus(
                state="active",
                bytes_transferred=self.bytes,
                files=self.files,
                files_skipped=self.skipped,
            )
        )


def in_sync(src: Path, dst: Path, level: SyncLevel) -> bool:
    """Whether ``dst`` already holds ``src`` by Globus Transfer's ``sync_level`` rule."""
    if not dst.is_file():
        return False
    if level == "exists":
        return True
    s, d = src.stat(), dst.stat()
    if level == "size":
        return s.st_size == d.st_size
    if level == "mtime":
        return d.st_mtime >= s.st_mtime
    return s.st_size == d.st_size and sha256_file(src) == sha256_file(dst)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
