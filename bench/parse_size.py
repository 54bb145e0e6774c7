"""How long every Slurm parser takes, and how much memory it needs, on 50 MB of its format.

    .venv/bin/python bench/parse_size.py [--mb 50] [--only sinfo,squeue] [--save]

Each input is built by repeating the records of a real fixture (``tests/fixtures`` and the
shared sample set, ``../shared/slurm-samples``) with unique names and ids, written to a
temporary file, then parsed in a child process of its own: the child reads the file, parses
it once, reads every record once (a result that builds its records when read, like
``jobs_from_table``'s, builds them all), checks the record count (a fast wrong answer is not
a result) and reports the wall time of the parse and the read and its own peak resident
memory (``ru_maxrss``, which includes the interpreter and the 50 MB input itself). Targets
(issue 35): <= 5 s and <= 500 MB each.
``--save`` writes the figures to ``bench/results/parse-size-latest.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SAMPLES = FIXTURES / "slurm_samples"
RECORDED = FIXTURES / "probe_output"
SHARED = Path(os.environ.get("FEDERATION_SLURM_SAMPLES", ROOT.parent / "shared" / "slurm-samples"))
RESULTS = ROOT / "bench" / "results" / "parse-size-latest.json"
TARGET_S = 5.0
TARGET_MB = 500.0


def _probe(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / "probetest-22.05.8.json").read_text())
    return data[name]  # type: ignore[no-any-return]


def _repeat(lines: list[str], size: int, renumber: Callable[[str, int], str]) -> tuple[str, int]:
    """``lines`` over and over, each copy renumbered, until ``size`` characters."""
    out: list[str] = []
    total = n = 0
    while total < size:
        for line in lines:
            new = renumber(line, n)
            out.append(new)
            total += len(new)
            n += 1
    return "".join(out), n


# --- inputs: (text, expected record count) -------------------------------------------------


def _sinfo(size: int) -> tuple[str, int]:
    recs = [r + "\x1e\n" for r in _probe("sinfo")["stdout"].split("\x1e\n") if r]
    return _repeat(recs, size, lambda r, n: f"n{n:07d}" + r[r.index("\x1f") :])


def _squeue(size: int) -> tuple[str, int]:
    recs = [r + "\x1e\n" for r in _probe("squeue")["stdout"].split("\x1e\n") if r]
    return _repeat(recs, size, lambda r, n: f"{n + 1000}" + r[r.index("\x1f") :])


def _squeue_start(size: int) -> tuple[str, int]:
    recs = [r + "\x1e\n" for r in _probe("squeue_start")["stdout"].split("\x1e\n") if r]
    return _repeat(recs, size, lambda r, n: f"{n + 1000}" + r[r.index("\x1f") :])


SSHARE_ROWS = [
    "oz030||100|0.500000|4242|0.100000|0.100000||1.000000|cpu=6000,billing=9000\n",
    " oz030|ilabbe|1|0.500000|2365981|0.100000|0.100000|0.750000|inf|\n",
    " oz030|alice|parent|0.500000|0|0.000000|0.000000|0.950000|2.500000|\n",
]


def _sshare(size: int) -> tuple[str, int]:
    def renumber(row: str, n: int) -> str:
        acct, user, rest = row.split("|", 2)
        return f"{acct}{n // 3}|{user + str(n) if user else ''}|{rest}"

    return _repeat(SSHARE_ROWS, size, renumber)


def _scontrol_part(size: int) -> tuple[str, int]:
    text = (SAMPLES / "OSC__owens-scontrol-show-part-o.txt").read_text()
    lines = [ln + "\n" for ln in text.splitlines() if ln.strip()]
    return _repeat(
        lines, size, lambda ln, n: re.sub(r"^PartitionName=\S+", f"PartitionName=p{n}", ln)
    )


def _records(text: str, head: str) -> list[str]:
    parts = re.split(rf"(?m)^(?={head}=)", text)
    return [p if p.endswith("\n") else p + "\n" for p in parts if p.strip()]


def _scontrol_node(size: int) -> tuple[str, int]:
    recs = _records((RECORDED / "probetest-scontrol-show-node-22.05.8.txt").read_text(), "NodeName")
    with_parts = [r for r in recs if re.search(r"Partitions=\S", r)]
    text, _ = _repeat(with_parts, size, lambda r, n: re.sub(r"^NodeName=\S+", f"NodeName=n{n}", r))
    slots = sum(len(m.split(",")) for m in re.findall(r"Partitions=(\S+)", text))
    return text, slots


def _scontrol_job(size: int) -> tuple[str, int]:
    recs = _records((RECORDED / "probetest-scontrol-show-job-22.05.8.txt").read_text(), "JobId")

    def renumber(r: str, n: int) -> str:  # an array's id is its ArrayJobId's: both renumbered
        return re.sub(r"(^JobId|ArrayJobId)=\d+", rf"\g<1>={n + 1000}", r)

    return _repeat(recs, size, renumber)


def _sacct(size: int) -> tuple[str, int]:
    lines = (SAMPLES / "mila-iqia__beluga-sacct-p.txt").read_text().splitlines(keepends=True)
    head, body = lines[0], lines[1:]

    def renumber(ln: str, n: int) -> str:
        f = ln.split("|", 3)
        f[2] = f"{n}{f[2][f[2].find('.') :] if '.' in f[2] else ''}"
        return "|".join(f)

    text, n = _repeat(body, size, renumber)
    return head + text, n


def _squeue_table(size: int) -> tuple[str, int]:
    lines = (SHARED / "FredHutch__gizmo-squeue-semicolon-3559jobs.txt").read_text().splitlines()
    body = [ln + "\n" for ln in lines[1:]]
    text, n = _repeat(body, size, lambda ln, n: f"{n + 1000}" + ln[ln.index(";") :])
    return lines[0] + "\n" + text, n


def _json_list(
    doc: dict[str, Any], key: list[str], size: int, renumber: Callable[..., None]
) -> tuple[str, int]:
    block = doc
    for k in key[:-1]:
        block = block[k]
    items = block[key[-1]]
    one = sum(len(json.dumps(i, indent=1)) for i in items) or 1
    copies = max(1, size // one + 1)
    out = []
    n = 0
    for _ in range(copies):
        for item in items:
            new = json.loads(json.dumps(item))
            renumber(new, n)
            out.append(new)
            n += 1
    block[key[-1]] = out
    return json.dumps(doc, indent=1), n


def _sinfo_json(size: int) -> tuple[str, int]:
    doc = json.loads((SHARED / "ivolabbe__farnarkle-sinfo-json-24.11.6.json").read_text())

    def renumber(rec: dict[str, Any], n: int) -> None:
        rec["nodes"]["nodes"] = [f"x{n}n{k}" for k in range(len(rec["nodes"]["nodes"]))]
        rec["nodes"]["total"] = len(rec["nodes"]["nodes"])

    text, _ = _json_list(doc, ["sinfo"], size, renumber)
    count = sum(len(r["nodes"]["nodes"]) for r in json.loads(text)["sinfo"])
    return text, count


def _squeue_json(size: int) -> tuple[str, int]:
    doc = json.loads((SHARED / "ivolabbe__farnarkle-squeue-json-24.11.6.json").read_text())

    def renumber(job: dict[str, Any], n: int) -> None:
        job["job_id"] = n + 1000

    return _json_list(doc, ["jobs"], size, renumber)


def _sacct_json(size: int) -> tuple[str, int]:
    doc = json.loads((SHARED / "ivolabbe__farnarkle-sacct-json-24.11.6.json").read_text())

    def renumber(job: dict[str, Any], n: int) -> None:
        job["job_id"] = n + 1000

    return _json_list(doc, ["jobs"], size, renumber)


def _sshare_json(size: int) -> tuple[str, int]:
    doc = json.loads((SHARED / "ivolabbe__farnarkle-sshare-json-24.11.6.json").read_text())

    def renumber(row: dict[str, Any], n: int) -> None:
        row["name"] = f"{row['name']}{n}"

    return _json_list(doc, ["shares", "shares"], size, renumber)


# --- parsers: text -> record count ---------------------------------------------------------


def _parse(fmt: str, text: str) -> int:
    return len(_parser(fmt)(text))


def _parser(fmt: str) -> Callable[[str], Any]:
    """The parser of ``fmt`` (imported here: the timing starts after the import)."""
    from federation.parsing import (
        jobs_from_table,
        parse_format_output,
        parse_sacct_json,
        parse_sacct_parsable,
        parse_scontrol_jobs,
        parse_scontrol_nodes,
        parse_scontrol_partitions,
        parse_sinfo,
        parse_sinfo_json,
        parse_squeue,
        parse_squeue_json,
        parse_squeue_start,
        parse_sshare_json,
    )
    from federation.parsing.sshare import parse_sshare_text

    parsers: dict[str, Callable[[str], Any]] = {
        "sinfo": parse_sinfo,
        "squeue": parse_squeue,
        "squeue_start": parse_squeue_start,
        "sshare": parse_sshare_text,
        "scontrol_partition": parse_scontrol_partitions,
        "scontrol_node": parse_scontrol_nodes,
        "scontrol_job": parse_scontrol_jobs,
        "sacct": parse_sacct_parsable,
        "squeue_table": lambda t: jobs_from_table(parse_format_output(t, "%i;%t;%D;%C;%a;%u")),
        "sinfo_json": parse_sinfo_json,
        "squeue_json": parse_squeue_json,
        "sacct_json": parse_sacct_json,
        "sshare_json": parse_sshare_json,
    }
    return parsers[fmt]


INPUTS: dict[str, Callable[[int], tuple[str, int]]] = {
    "sinfo": _sinfo,
    "squeue": _squeue,
    "squeue_start": _squeue_start,
    "sshare": _sshare,
    "scontrol_partition": _scontrol_part,
    "scontrol_node": _scontrol_node,
    "scontrol_job": _scontrol_job,
    "sacct": _sacct,
    "squeue_table": _squeue_table,
    "sinfo_json": _sinfo_json,
    "squeue_json": _squeue_json,
    "sacct_json": _sacct_json,
    "sshare_json": _sshare_json,
}
"""Every format: its 50 MB input builder (the parser is chosen in :func:`_parse`)."""


def _peak_mb() -> float:
    """This process's peak resident memory: ``VmHWM`` (its own, where ``ru_maxrss`` would
    carry over the parent's across exec on Linux), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(fmt: str, path: str, expected: int) -> None:
    text = Path(path).read_text(encoding="utf-8")
    parse = _parser(fmt)  # the import of the package is not the parse
    before_mb = _peak_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    result = parse(text)
    # every record read once: a result that builds its records when read builds them here
    count = sum(1 for _ in result)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_mb = _peak_mb()
    if count != expected or len(result) != count:
        raise SystemExit(f"{fmt}: parsed {count} records ({len(result)}), expected {expected}")
    print(
        json.dumps({"seconds": seconds, "cpu_s": cpu, "peak_mb": peak_mb, "before_mb": before_mb})
    )


def run(fmt: str, size_mb: float, tmp: Path) -> dict[str, Any]:
    text, expected = INPUTS[fmt](int(size_mb * 1e6))
    path = tmp / f"{fmt}.txt"
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, __file__, "--child", fmt, str(path), str(expected)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    path.unlink()
    if proc.returncode != 0:
        return {"format": fmt, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "format": fmt,
        "mb": round(len(text.encode()) / 1e6, 1),
        "records": expected,
        "seconds": round(figures["seconds"], 2),
        "cpu_s": round(figures["cpu_s"], 2),
        "peak_mb": round(figures["peak_mb"]),
        "input_loaded_mb": round(figures["before_mb"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--only", default="", help="comma-separated formats (default: all)")
    ap.add_argument("--save", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    formats = [f for f in args.only.split(",") if f] or list(INPUTS)
    rows = []
    print(f"{'format':20s} {'MB':>5s} {'records':>9s} {'s':>6s} {'cpu s':>6s} {'peak MB':>8s}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in formats:
            row = run(fmt, args.mb, Path(tmp))
            rows.append(row)
            if "error" in row:
                print(f"{fmt:20s} ERROR {row['error']}")
                continue
            ok = row["seconds"] <= TARGET_S and row["peak_mb"] <= TARGET_MB
            print(
                f"{fmt:20s} {row['mb']:5.1f} {row['records']:9d} {row['seconds']:6.2f} "
                f"{row['cpu_s']:6.2f} {row['peak_mb']:8d}  (input loaded: "
                f"{row['input_loaded_mb']} MB)  "
                f"{'ok' if ok else 'OVER TARGET'}"
            )
    if args.save:
        RESULTS.write_text(
            json.dumps(
                {
                    "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "python": platform.python_version(),
                    "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                    "target": {"seconds": TARGET_S, "peak_mb": TARGET_MB},
                    "formats": rows,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
