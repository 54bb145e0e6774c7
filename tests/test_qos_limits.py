"""Live QOS limits (issue 34): the probe's ``sacctmgr show qos``, its strict parser, the
snapshot's ``qos_limits``, and placement holding a class to its QOS's live limits over what
site.yaml describes. No Slurm: outputs from ``tests/fixtures/sacctmgr_qos`` (a real
Perlmutter capture and the local federation's QOS in the probe's format, see its
PROVENANCE.md) and fake ``sacctmgr`` scripts."""

from __future__ import annotations

import copy
import json
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from perlmutter_scene import NOW, perlmutter, snapshot

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.errors import NoFeasibleSiteError, ParseError
from federation.core.snapshot import FederationSnapshot, QosLimits, SiteSnapshot
from federation.core.spec import SiteSpec
from federation.parsing.sacctmgr_qos import QOS_FIELDS, parse_sacctmgr_qos
from federation.parsing.snapshot_builder import build_site_snapshot
from federation.placement.candidates import Candidate, PlacementDecision
from federation.placement.coldstart import ColdStart
from federation.placement.decide import place
from federation.placement.qos import live_class
from functions.probes import probe_slurm

FIXTURES = Path(__file__).parent / "fixtures"
QOS_DIR = FIXTURES / "sacctmgr_qos"
REAL = (QOS_DIR / "LightconeResearch__perlmutter-sacctmgr-P-show-qos.txt").read_text()
LOCAL = (QOS_DIR / "written-local-federation-qos.txt").read_text()
ARGV = [
    "sacctmgr",
    "--noheader",
    "--parsable2",
    "show",
    "qos",
    "format=Name,Priority,MaxWall,MaxTRESPU,MaxJobsPU,MaxSubmitPU,Flags",
]


def real_perlmutter() -> list[QosLimits]:
    """The Perlmutter capture, read with its header as the field list."""
    header, _, body = REAL.partition("\n")
    return parse_sacctmgr_qos(body, tuple(header.split("|")))


# --- the parser ----------------------------------------------------------------------------


def test_a_real_perlmutter_capture_reads_with_its_header_as_fields() -> None:
    qos = {q.name: q for q in real_perlmutter()}
    assert list(qos) == [
        "normal",
        "gpu_debug",
        "gpu_regular",
        "gpu_shared",
        "gpu_preempt",
        "debug",
        "regular_1",
        "preempt",
        "shared",
    ]
    debug = qos["debug"]
    assert (debug.priority, debug.max_wall_s) == (69119, 1800)
    assert (debug.max_jobs_per_user, debug.max_submit_per_user) == (2, 5)
    assert debug.flags == ("DenyOnLimit",) and debug.deny_on_limit
    assert qos["gpu_regular"].max_wall_s == 2 * 86400
    assert qos["gpu_regular"].max_jobs_per_user is None
    assert qos["gpu_regular"].max_submit_per_user == 5000
    normal = qos["normal"]
    assert (normal.priority, normal.max_wall_s, normal.flags) == (0, None, ())
    assert all(q.max_tres_per_user == {} for q in qos.values())  # MaxTRESPU unset there


def test_the_probes_own_format_reads_with_the_default_fields() -> None:
    qos = {q.name: q for q in parse_sacctmgr_qos(LOCAL)}
    assert qos["debug"].max_wall_s == 1800 and qos["debug"].deny_on_limit
    assert qos["preempt"].max_wall_s == 86400  # printed 1-00:00:00
    gh = qos["vista-gh"]
    assert (gh.max_jobs_per_user, gh.max_submit_per_user, gh.max_wall_s) == (20, 40, None)
    assert gh.flags == () and not gh.deny_on_limit


@pytest.mark.parametrize(
    ("wall", "seconds"),
    [
        ("00:30:00", 1800),
        ("1-00:00:00", 86400),
        ("30:00", 1800),
        ("2-12:00:00", 216000),
        ("", None),
        ("UNLIMITED", None),
        ("INFINITE", None),
    ],
)
def test_slurm_durations_and_no_limit(wall: str, seconds: int | None) -> None:
    (q,) = parse_sacctmgr_qos(f"q|10|{wall}|cpu=128,gres/gpu=4|||NoReserve\n")
    assert q.max_wall_s == seconds
    assert q.max_tres_per_user == {"cpu": "128", "gres/gpu": "4"}


def _line(**values: str) -> str:
    row = {"Name": "debug", "Priority": "0", "MaxWall": "00:30:00", "MaxTRESPU": ""}
    row |= {"MaxJobsPU": "2", "MaxSubmitPU": "5", "Flags": "DenyOnLimit"} | values
    return "|".join(row[f] for f in QOS_FIELDS) + "\n"


DAMAGED = {
    "cut at the end": (LOCAL[:-1], "line 8: output ends without a newline: cut short"),
    "cut inside a line": (LOCAL[: LOCAL.index("DenyOnLimit") + 4], "line 2: output ends"),
    "a line repeated": (LOCAL + LOCAL.splitlines(keepends=True)[2], "QOS debug is listed twice"),
    "a name repeated in capitals": (LOCAL + _line(Name="DEBUG"), "listed twice (first on line 3)"),
    "lines glued": (LOCAL.replace("\nvista-gg", "vista-gg"), "line 7: 13 fields, expected 7"),
    "parsable, not parsable2": (_line()[:-1] + "|\n", "line 1: 8 fields, expected 7"),
    "a count not a whole token": (_line(MaxJobsPU="2x"), "line 1 (debug) MaxJobsPU: expected a"),
    "a negative count": (_line(MaxSubmitPU="-5"), "(debug) MaxSubmitPU: expected a whole number"),
    "a count past 32 bits": (_line(MaxJobsPU="4294967296"), "(debug) MaxJobsPU: 4294967296 is"),
    "a count of 5000 digits": (_line(MaxSubmitPU="9" * 5000), "MaxSubmitPU: expected a whole"),
    "a float count": (_line(MaxJobsPU="2.5"), "(debug) MaxJobsPU"),
    "a priority made a word": (_line(Priority="high"), "(debug) Priority"),
    "a priority gone": (_line(Priority=""), "(debug) Priority: empty"),
    "a duration cut": (_line(MaxWall="00:3:00"), "(debug) MaxWall: expected a duration"),
    "minutes past 59": (_line(MaxWall="00:60:00"), "(debug) MaxWall: duration '00:60:00'"),
    "a duration negative": (_line(MaxWall="-00:30:00"), "(debug) MaxWall"),
    "a duration of days out of range": (
        _line(MaxWall="9999999-00:00:00"),
        "-00:00:00': out of range",
    ),
    "a duration a word": (_line(MaxWall="N/A"), "(debug) MaxWall"),
    "a TRES list damaged": (_line(MaxTRESPU="cpu="), "(debug) MaxTRESPU: TRES 'cpu='"),
    "a flag with a space": (_line(Flags="Deny OnLimit"), "(debug) Flags: 'Deny OnLimit' is not"),
    "a flag twice": (_line(Flags="DenyOnLimit,DenyOnLimit"), "(debug) Flags: a flag given twice"),
    "no name": (_line(Name=""), "line 1: '' is not a QOS name"),
    "a NUL byte": ("\x00" + LOCAL, "line 1: NUL byte"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_damaged_output_is_a_parse_error_naming_line_qos_and_field(case: str) -> None:
    text, message = DAMAGED[case]
    with pytest.raises(ParseError, match="sacctmgr qos") as err:
        parse_sacctmgr_qos(text)
    assert message in str(err.value)


def test_damaged_real_capture_is_refused_too() -> None:
    header, _, body = REAL.partition("\n")
    fields = tuple(header.split("|"))
    for text in (body[:-1], body.replace("|00:30:00|", "|0:30:00x|", 1), body + body[:40] + "\n"):
        with pytest.raises(ParseError, match="sacctmgr qos line"):
            parse_sacctmgr_qos(text, fields)


def test_not_utf8_and_no_name_column_are_parse_errors() -> None:
    with pytest.raises(ParseError, match="sacctmgr qos line 1: output is not UTF-8"):
        parse_sacctmgr_qos(b"d\xffbug|0||||2|\n")
    with pytest.raises(ParseError, match="no Name field"):
        parse_sacctmgr_qos(LOCAL, ("Priority", "MaxWall"))


def test_an_unknown_flag_is_kept_with_a_warning_naming_qos_and_field() -> None:
    warnings: list[str] = []
    (q,) = parse_sacctmgr_qos(_line(Flags="DenyOnLimit,FutureFlag"), warnings=warnings)
    assert q.flags == ("DenyOnLimit", "FutureFlag")
    assert warnings == ["sacctmgr qos line 1 (debug) Flags: unknown flag FutureFlag (kept)"]
    assert parse_sacctmgr_qos("") == [] and parse_sacctmgr_qos("\n") == []


# --- probe output -> snapshot --------------------------------------------------------------


def _probe(entry: dict[str, Any] | None) -> dict[str, Any]:
    """A probe recorded on Slurm 22.05 (before the QOS were read), with ``entry`` as its
    ``sacctmgr_qos`` command."""
    recorded = FIXTURES / "probe_output" / "probetest-22.05.8.json"
    probe: dict[str, Any] = copy.deepcopy(json.loads(recorded.read_text()))
    assert "sacctmgr_qos" not in probe
    if entry is not None:
        probe["sacctmgr_qos"] = entry
    return probe


def _entry(stdout: str, rc: int | None = 0, **extra: Any) -> dict[str, Any]:
    entry = {
        "argv": ARGV,
        "rc": rc,
        "stdout": stdout,
        "stderr": "",
        "duration_s": 0.02,
        "timed_out": False,
        "error": None,
        "fields": list(QOS_FIELDS),
    }
    return entry | extra


def test_probe_output_builds_a_snapshot_with_live_qos_limits() -> None:
    snap = build_site_snapshot("perlmutter", _probe(_entry(LOCAL)))
    assert snap.qos_limits is not None and len(snap.qos_limits) == 8
    debug = snap.qos("DEBUG")  # Slurm's QOS names are case-insensitive
    assert debug is not None and (debug.max_wall_s, debug.flags) == (1800, ("DenyOnLimit",))
    assert snap.qos("nonesuch") is None
    assert not any("qos" in w for w in snap.health.warnings)
    again = SiteSnapshot.model_validate_json(snap.model_dump_json())  # telemetry's round trip
    assert again == snap and again.qos("vista-gh") == snap.qos("vista-gh")


def test_an_old_probe_knows_no_qos_and_says_nothing() -> None:
    snap = build_site_snapshot("x", _probe(None))
    assert snap.qos_limits is None and snap.qos("debug") is None
    assert not any("qos" in w for w in snap.health.warnings)
    old = json.loads(snap.model_dump_json())
    old.pop("qos_limits")  # a snapshot stored before QOS were read
    assert SiteSnapshot.model_validate(old).qos_limits is None


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (
            _entry("", rc=1, stderr="sacctmgr: error: Problem talking to the database\n"),
            "exited with rc=1: sacctmgr: error: Problem talking to the database",
        ),
        (_entry("", rc=None, error="command not found: sacctmgr"), "did not run: command not"),
        (
            _entry("", rc=None, timed_out=True, error="timed out after 10.0 s"),
            "timed out after 0.02 s",
        ),
        (_entry(LOCAL.replace("00:30:00", "00:30:0x")), "line 3 (debug) MaxWall"),
        (_entry(LOCAL[:-1]), "cut short"),
        (_entry(LOCAL, fields="Name"), "'fields' must be a list"),
    ],
)
def test_a_failed_or_damaged_sacctmgr_is_qos_limits_unknown_never_a_failed_probe(
    entry: dict[str, Any], says: str
) -> None:
    snap = build_site_snapshot("x", _probe(entry))
    assert snap.health.reachable and snap.partitions and snap.qos_limits is None
    (warning,) = [w for w in snap.health.warnings if w.startswith("qos limits unknown: ")]
    assert says in warning


# --- the probe runs sacctmgr ---------------------------------------------------------------


def _fake_sacctmgr(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``sacctmgr`` alone on PATH (no other Slurm command): it runs ``body``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "sacctmgr"
    script.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/argv"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "qos.out").write_text(LOCAL)
    monkeypatch.setenv("PATH", str(bindir))
    return tmp_path


def test_the_probe_asks_sacctmgr_for_every_qos_in_parsable2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_sacctmgr(tmp_path, f'exec /bin/cat "{tmp_path}/qos.out"', monkeypatch)
    raw = probe_slurm(timeout_s=5.0)
    entry = raw["sacctmgr_qos"]
    assert isinstance(entry, dict)
    assert entry["argv"] == ARGV and tuple(entry["fields"]) == QOS_FIELDS
    assert (entry["rc"], entry["timed_out"], entry["error"]) == (0, False, None)
    assert entry["stdout"] == LOCAL
    assert (tmp_path / "argv").read_text().split() == ARGV[1:]
    # the required commands are missing here: the probe fails, but not for sacctmgr
    sinfo = raw["sinfo"]
    assert isinstance(sinfo, dict) and str(sinfo["error"]).startswith("command not found")


def test_a_hanging_sacctmgr_costs_at_most_half_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_sacctmgr(tmp_path, "exec /bin/sleep 30", monkeypatch)
    begin = time.monotonic()
    raw = probe_slurm(timeout_s=2.0)
    assert time.monotonic() - begin < 6
    entry = raw["sacctmgr_qos"]
    assert isinstance(entry, dict) and entry["timed_out"] is True and entry["rc"] is None
    assert "timed out after 1.0 s" in str(entry["error"])


# --- placement holds a class to its QOS's live limits --------------------------------------


@pytest.fixture(scope="module")
def pm() -> SiteSpec:
    return perlmutter()


def _with_qos(*qos: QosLimits, default: str | None = None, max_time_s: int = 0) -> Any:
    """The Perlmutter scene's snapshot with ``qos`` as its live QOS (and, with ``default``,
    that partition made the default with ``max_time_s``)."""
    snap = snapshot()
    site = snap.sites[0]
    parts = tuple(
        p.model_copy(update={"default": True, "max_time_s": max_time_s})
        if p.partition == default
        else p
        for p in site.partitions
    )
    site = site.model_copy(update={"qos_limits": qos, "partitions": parts})
    return snap.model_copy(update={"sites": (site,)})


def _place(pm: SiteSpec, snap: FederationSnapshot, **env: Any) -> PlacementDecision:
    return place(ResourceEnvelope(**env), [pm], snap, now=NOW)


DEBUG = QosLimits(name="debug", max_wall_s=1800, flags=("DenyOnLimit",))


def test_a_class_over_its_live_qos_walltime_is_refused_naming_the_qos(pm: SiteSpec) -> None:
    with pytest.raises(NoFeasibleSiteError) as err:
        _place(pm, _with_qos(DEBUG), gpus_min=1, walltime_s=3600, qos=("debug",))
    reasons = err.value.reasons
    assert (
        reasons["perlmutter/gpu_debug"] == "QOS debug allows 1800 s (live sacctmgr); asked 3600 s"
    )
    assert reasons["perlmutter/cpu_debug"].startswith("no GPUs")
    # within it: the debug class, with nothing to say (the live limit is the described one)
    ok = _place(pm, _with_qos(DEBUG), gpus_min=1, walltime_s=1200, qos=("debug",))
    assert ok.chosen.partition == "gpu_debug" and "live" not in ok.chosen.why


def test_a_tighter_live_limit_wins_and_the_reason_quotes_site_yaml(pm: SiteSpec) -> None:
    tight = DEBUG.model_copy(update={"max_wall_s": 900})
    d = _place(pm, _with_qos(tight), gpus_min=1, walltime_s=1200)
    reasons = {r.partition: r.reason for r in d.rejected}
    assert reasons["gpu_debug"] == (
        "QOS debug allows 900 s (live sacctmgr); asked 1200 s (site.yaml says 1800 s)"
    )
    assert "not perlmutter/gpu_debug: QOS debug allows 900 s (live sacctmgr)" in d.explain()


def test_a_looser_live_limit_wins_and_the_trace_says_so(pm: SiteSpec) -> None:
    loose = DEBUG.model_copy(update={"max_wall_s": 3600})
    d = _place(pm, _with_qos(loose), gpus_min=1, walltime_s=2400, qos=("debug",))
    assert d.chosen.partition == "gpu_debug"  # site.yaml alone would refuse 2400 s
    assert (
        "QOS debug (live sacctmgr): walltime 3600 s where site.yaml says 1800 s: the live "
        "limits hold" in d.chosen.why
    )


def test_the_live_partition_limit_still_caps_a_looser_qos(pm: SiteSpec) -> None:
    preempt = QosLimits(name="preempt", max_wall_s=172800, flags=("DenyOnLimit",))
    env = {"cpus_min": 8, "mem_gb_min": 16, "walltime_s": 100_000, "qos": ("preempt",)}
    wide = _place(pm, _with_qos(preempt, default="regular_milan_ss11", max_time_s=172800), **env)
    assert wide.chosen.partition == "cpu_preempt"
    assert "walltime 172800 s where site.yaml says 86400 s" in wide.chosen.why
    capped = _with_qos(preempt, default="regular_milan_ss11", max_time_s=43200)
    with pytest.raises(NoFeasibleSiteError) as err:
        _place(pm, capped, **env)
    assert err.value.reasons["perlmutter/cpu_preempt"] == (
        "partition regular_milan_ss11 allows 43200 s (live scontrol; QOS preempt 172800 s); "
        "asked 100000 s (site.yaml says 86400 s)"
    )
    # unless the QOS overrides the partition's limit
    over = preempt.model_copy(update={"flags": ("DenyOnLimit", "PartitionTimeLimit")})
    ok = _place(pm, _with_qos(over, default="regular_milan_ss11", max_time_s=43200), **env)
    assert ok.chosen.partition == "cpu_preempt"


def test_a_qos_allowing_no_jobs_refuses_its_classes(pm: SiteSpec) -> None:
    shut = DEBUG.model_copy(update={"max_submit_per_user": 0})
    d = _place(pm, _with_qos(shut), gpus_min=1, walltime_s=600)
    reasons = {r.partition: r.reason for r in d.rejected}
    assert reasons["gpu_debug"] == (
        "QOS debug allows no submitted jobs per user (live sacctmgr): sbatch refuses them"
    )
    assert d.chosen.partition != "gpu_debug"


def test_the_real_perlmutter_qos_in_placement(pm: SiteSpec) -> None:
    """The capture's QOS: ``debug`` as described (30 min) with live per-user limits site.yaml
    lacks, ``preempt`` 48 h where site.yaml says 24 h, ``regular`` not a QOS name there
    (NERSC maps it at submission), so described."""
    snap = _with_qos(*real_perlmutter())
    d = _place(pm, snap, gpus_min=1, walltime_s=1200, qos=("debug",))
    assert d.chosen.partition == "gpu_debug"
    assert (
        "QOS debug (live sacctmgr): 2 running jobs per user where site.yaml says none; "
        "5 submitted jobs per user where site.yaml says none: the live limits hold"
    ) in d.chosen.why
    regular = _place(pm, snap, gpus_min=4, gpus_max=4, cpus_min=64, mem_gb_min=200)
    assert regular.chosen.partition == "gpu" and "live" not in regular.chosen.why
    long = _place(pm, snap, cpus_min=8, mem_gb_min=16, walltime_s=100_000, qos=("preempt",))
    assert long.chosen.partition == "cpu_preempt"


def test_live_per_user_limits_size_the_blocks_where_site_yaml_gives_none(pm: SiteSpec) -> None:
    debug = pm.partition("gpu_debug")
    assert debug.max_running_jobs_per_user is None  # site.yaml publishes none
    live = QosLimits(name="debug", max_wall_s=1800, max_jobs_per_user=2, max_submit_per_user=5)
    snap = _with_qos(live)
    cls = live_class(pm, debug, snap.sites[0]).cls
    assert (cls.max_running_jobs_per_user, cls.max_submitted_jobs_per_user) == (2, 5)
    shape = Shape(
        site="perlmutter", partition="gpu_debug", nodes=1, cpus=1, mem_gb=1, gpus=1, walltime_s=600
    )
    c = Candidate(
        site="perlmutter", partition="gpu_debug", shape=shape, predicted_wait_s=0,
        free_fraction=1.0, why="",
    )  # fmt: skip
    specs = {"perlmutter": pm}
    assert ColdStart._blocks_for(c, 10, specs["perlmutter"], snap) == 2
    assert ColdStart._blocks_for(c, 10, pm, snapshot()) == 10  # unknown QOS: up to 32
