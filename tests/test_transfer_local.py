"""The local transfer backend end to end: real files in site storage folders, sha256
checksums, sync levels, events in order, refusals before anything is copied, recovery."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from federation.core.errors import (
    DataNotFoundError,
    TransferError,
    TransferPathError,
    UnknownSiteError,
)
from federation.runtime.events import EventBus
from federation.runtime.store import Store
from federation.runtime.transfers import TransferManager
from federation.transfer import (
    DataRef,
    LocalCopyBackend,
    TransferRequest,
    TransferStatus,
)
from federation.transfer import local as local_mod

SITES = ["alpha", "beta"]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "fed"


@pytest.fixture
def store(home: Path) -> Store:
    s = Store(home / "coordinator.db")
    yield s
    s.close()


def _manager(home: Path, store: Store, **kw: int) -> TransferManager:
    return TransferManager(LocalCopyBackend(SITES, home, **kw), store, EventBus(store))


def _req(src: str, dst: str, **kw: object) -> TransferRequest:
    return TransferRequest(
        source=DataRef(site="alpha", path=src), destination=DataRef(site="beta", path=dst), **kw
    )


def _root(home: Path, site: str) -> Path:
    return home / "storage" / site


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".part-" in p.name]


def test_file_copy_checksummed_with_events_in_order(home: Path, store: Store) -> None:
    data = os.urandom(3 * 2**20 + 17)
    src = _write(_root(home, "alpha") / "runs" / "in.bin", data)
    mgr = _manager(home, store, progress_every_bytes=2**20)
    seen: list[str] = []
    h = mgr.submit(_req("runs/in.bin", "inputs/in.bin"), on_event=lambda e: seen.append(e.kind))
    assert store.transfers(transfer_id=h.id), "recorded before submit returned"
    assert h.wait(60)

    dst = _root(home, "beta") / "inputs" / "in.bin"
    assert dst.read_bytes() == data
    assert _sha(dst) == _sha(src)
    assert h.state == "succeeded" and h.checksum_verified is True
    assert (h.files, h.files_skipped, h.bytes_transferred) == (1, 0, len(data))
    kinds = [e.kind for e in h.events()]
    assert kinds[0] == "transfer.submitted" and kinds[-1] == "transfer.completed"
    assert set(kinds[1:-1]) == {"transfer.progress"} and len(kinds) >= 4  # a few per file
    progress = [e.detail["bytes_transferred"] for e in h.events() if e.kind == "transfer.progress"]
    assert progress == sorted(progress) and progress[-1] == len(data)
    assert seen == kinds  # the caller's callback saw the same, in order
    row = store.transfers(transfer_id=h.id)[0]
    assert row["state"] == "succeeded" and row["bytes_transferred"] == len(data)
    assert os.stat(dst).st_mtime == pytest.approx(os.stat(src).st_mtime)
    assert _leftovers(_root(home, "beta")) == []
    d = h.as_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["source"] == {"site": "alpha", "path": "runs/in.bin"} and d["backend"] == "local"


def test_directory_copy_is_renamed_into_place_whole(home: Path, store: Store) -> None:
    tree = {"a.txt": b"first", "sub/b.bin": os.urandom(5000), "sub/deeper/c": b""}
    for rel, data in tree.items():
        _write(_root(home, "alpha") / "ds" / rel, data)
    (_root(home, "alpha") / "ds" / "empty").mkdir()
    h = _manager(home, store).submit(_req("ds", "copies/ds"))
    assert h.wait(60) and h.state == "succeeded", h.error
    out = _root(home, "beta") / "copies" / "ds"
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == set(tree)
    for rel, data in tree.items():
        assert (out / rel).read_bytes() == data
    assert (out / "empty").is_dir()
    assert h.files == 3 and h.bytes_transferred == sum(len(v) for v in tree.values())
    assert _leftovers(_root(home, "beta")) == []


def test_rerun_skips_what_matches_and_copies_what_changed(home: Path, store: Store) -> None:
    for i in range(3):
        _write(_root(home, "alpha") / "ds" / f"f{i}", f"content {i}".encode())
    mgr = _manager(home, store)
    first = mgr.submit(_req("ds", "ds"))
    assert first.wait(60) and first.files == 3

    again = mgr.submit(_req("ds", "ds"))
    assert again.wait(60) and again.state == "succeeded"
    assert (again.files, again.files_skipped, again.bytes_transferred) == (0, 3, 0)

    _write(_root(home, "alpha") / "ds" / "f1", b"changed!!")  # same size as "content 1"
    by_size = mgr.submit(_req("ds", "ds", sync_level="size"))
    assert by_size.wait(60) and by_size.files_skipped == 3  # size matches: skipped
    assert (_root(home, "beta") / "ds" / "f1").read_bytes() == b"content 1"

    by_sum = mgr.submit(_req("ds", "ds", sync_level="checksum"))
    assert by_sum.wait(60) and (by_sum.files, by_sum.files_skipped) == (1, 2)
    assert (_root(home, "beta") / "ds" / "f1").read_bytes() == b"changed!!"


def test_sync_levels_exists_and_mtime(home: Path, store: Store) -> None:
    src = _write(_root(home, "alpha") / "x", b"new contents")
    dst = _write(_root(home, "beta") / "x", b"old")
    mgr = _manager(home, store)
    h = mgr.submit(_req("x", "x", sync_level="exists"))
    assert h.wait(60) and h.files_skipped == 1 and dst.read_bytes() == b"old"

    os.utime(dst, (src.stat().st_mtime + 100, src.stat().st_mtime + 100))  # dest newer
    h = mgr.submit(_req("x", "x", sync_level="mtime"))
    assert h.wait(60) and h.files_skipped == 1 and dst.read_bytes() == b"old"

    os.utime(src, (dst.stat().st_mtime + 100, dst.stat().st_mtime + 100))  # source newer
    h = mgr.submit(_req("x", "x", sync_level="mtime"))
    assert h.wait(60) and h.files == 1 and dst.read_bytes() == b"new contents"


@pytest.mark.parametrize(
    ("src", "dst", "error", "match"),
    [
        ("missing.bin", "out.bin", DataNotFoundError, "does not exist"),
        ("../beta/secret", "out.bin", TransferPathError, r"'\.\.'"),
        ("in.bin", "../../escape.bin", TransferPathError, r"'\.\.'"),
        ("/etc/hostname", "out.bin", TransferPathError, "outside"),
        ("in.bin", "/tmp/h1-escape.bin", TransferPathError, "outside"),
        ("in.bin", ".", TransferPathError, "storage root itself"),
        ("link/passwd", "out.bin", TransferPathError, "symbolic link"),
    ],
)
def test_bad_requests_refused_before_anything_is_copied(
    home: Path, store: Store, src: str, dst: str, error: type[Exception], match: str
) -> None:
    _write(_root(home, "alpha") / "in.bin", b"data")
    (_root(home, "alpha") / "link").symlink_to("/etc")
    _root(home, "beta").mkdir(parents=True)  # roots exist; nothing else may appear
    mgr = _manager(home, store)
    before = sorted(p for p in home.rglob("*") if p.name != "coordinator.db-wal")
    with pytest.raises(error, match=match):
        mgr.submit(_req(src, dst))
    assert store.transfers() == [] and mgr.bus.history() == []
    after = sorted(p for p in home.rglob("*") if p.name != "coordinator.db-wal")
    assert after == before
    assert not Path("/tmp/h1-escape.bin").exists()


def test_absolute_path_inside_the_root_is_accepted(home: Path, store: Store) -> None:
    src = _write(_root(home, "alpha") / "in.bin", b"data")
    h = _manager(home, store).submit(_req(str(src.resolve()), "out.bin"))
    assert h.wait(60) and (_root(home, "beta") / "out.bin").read_bytes() == b"data"


def test_unknown_site_and_mismatched_backends(home: Path, store: Store) -> None:
    mgr = _manager(home, store)
    bad = TransferRequest(
        source=DataRef(site="alpha", path="x"), destination=DataRef(site="nowhere", path="x")
    )
    with pytest.raises(UnknownSiteError, match="nowhere"):
        mgr.submit(bad)
    other = LocalCopyBackend(["beta"], home)
    split = TransferManager(
        {"alpha": LocalCopyBackend(["alpha"], home), "beta": other}, store, EventBus()
    )
    with pytest.raises(TransferError, match="no backend can move data between them"):
        split.submit(_req("x", "x"))


def test_checksum_mismatch_fails_and_leaves_destination_alone(
    home: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(_root(home, "alpha") / "in.bin", b"payload")
    dst = _write(_root(home, "beta") / "in.bin", b"previous")
    real = local_mod.sha256_file
    # bit rot on the destination disk: what was written reads back differently
    monkeypatch.setattr(
        local_mod,
        "sha256_file",
        lambda p: "0" * 64 if ".part-" in p.name else real(p),
    )
    h = _manager(home, store).submit(_req("in.bin", "in.bin"))
    assert h.wait(60) and h.state == "failed"
    assert "checksum mismatch" in (h.error or "")
    failed = h.events()[-1]
    assert failed.kind == "transfer.failed" and "checksum mismatch" in failed.detail["error"]
    assert dst.read_bytes() == b"previous" and _leftovers(_root(home, "beta")) == []
    assert store.transfers(transfer_id=h.id)[0]["state"] == "failed"


def test_deadline_passed_is_a_clear_failure(home: Path, store: Store) -> None:
    _write(_root(home, "alpha") / "in.bin", b"payload")
    h = _manager(home, store).submit(_req("in.bin", "out.bin", deadline_s=1e-9))
    assert h.wait(60) and h.state == "failed" and "deadline" in (h.error or "")
    assert not (_root(home, "beta") / "out.bin").exists()


class _StoppedBeforeCopying(LocalCopyBackend):
    """A coordinator killed after recording the transfer, before its copy thread ran."""

    def start(self, transfer_id, request, report, resume):  # type: ignore[no-untyped-def]
        self.validate(request)
        return TransferStatus(state="active")


def test_recover_reruns_an_interrupted_copy_idempotently(home: Path, store: Store) -> None:
    tree = {f"f{i}": os.urandom(1000 + i) for i in range(4)}
    for rel, data in tree.items():
        _write(_root(home, "alpha") / "ds" / rel, data)
    first = TransferManager(_StoppedBeforeCopying(SITES, home), store, EventBus(store))
    h = first.submit(_req("ds", "ds"))
    assert h.state == "active" and not h.done
    # what the killed run left behind: half a staged folder and a partial file
    stage = _root(home, "beta") / f".ds.part-{h.id[:8]}"
    _write(stage / "f0", tree["f0"][:10])

    bus = EventBus(store)  # a new process: events continue from the store
    second = TransferManager(LocalCopyBackend(SITES, home), store, bus)
    [back] = second.recover()
    assert back.id == h.id and back.wait(60) and back.state == "succeeded", back.error
    out = _root(home, "beta") / "ds"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == tree
    assert _leftovers(_root(home, "beta")) == []
    assert [x["what"] for x in back.history] == ["recovered"]
    assert "re-running" in back.history[0]["how"]
    assert json.loads(store.transfers(transfer_id=h.id)[0]["history"])[0]["what"] == "recovered"
    kinds = [e.kind for e in bus.history(h.id)]
    assert kinds[0] == "transfer.submitted" and kinds.count("transfer.completed") == 1
    # and once more: nothing left open, nothing re-run, the finished one is still readable
    third = TransferManager(LocalCopyBackend(SITES, home), store, EventBus(store))
    assert third.recover() == []
    assert third.get(h.id).state == "succeeded" and third.get(h.id).done
    with pytest.raises(TransferError, match="unknown transfer"):
        third.get("no-such-id")
