"""Finding one task on a site, where the Globus Compute service tells nothing: claims.

The real service reports no start and has no task cancel, and tasks of one shape share one
``user_endpoint_config`` (one user endpoint process, one request per batch, blocks shared
by the shape), so nothing per task can ride in the config or the batch job's name. Instead
every task shipped to a cloud site carries a **tag** in its own arguments, and its first act
on the site is to **claim** the tag: it creates ``~/.federation-jobs/claims/<tag>``
atomically (``O_EXCL``; ``set -C`` in the shell) holding its ``$SLURM_JOB_ID`` and
``$GC_TASK_UUID``. A task whose claim exists already stops before running anything of the
scientist's (exit 125).

* **Starts**: one shell function per site per look lists the claims of the tags still
  waiting (:func:`look_command`), so the coordinator learns each start with its Slurm job id
  and the Globus Compute id of the task that claimed it.
* **Withdrawals** claim the same name first (:func:`withdraw_command`): the one that
  creates the file wins. A withdrawal that wins also holds (``scontrol uhold``) the pending
  blocks of the task's shape beyond the work still waiting for them, so the withdrawn copy
  makes no new Slurm job start. While a withdrawn copy is still held by its user endpoint
  process, each look keeps its shape's unheld pending blocks at the work still waiting:
  it releases held blocks the shape needs again, and holds the blocks the engine asks for
  beyond that (:func:`look_command`'s ``shapes``).

The user's home is shared by the login and compute nodes on every site. Tags and shape
names are lowercase hex and dotted words, so they need no shell quoting.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from federation.core.model import Frozen

JOB_NAME_PREFIX = "fed."
CLAIM_DIR = ".federation-jobs/claims"
"""Under the user's home on the site, which its login and compute nodes share."""
CLAIM_KEEP_DAYS = 7
WITHDRAWN = "withdrawn"
"""What a withdrawal writes into the claim it wins."""
WITHDRAWN_EXIT = 125

_TAG = re.compile(r"^[0-9a-f]{8,40}$")
_SHAPE = re.compile(r"^[0-9a-f]{8,24}$")
_KEY = re.compile(r"^[a-z0-9]{1,16}$")


class Claim(Frozen):
    """One claim as the site lists it: who took the tag first."""

    tag: str
    withdrawn: bool = False
    job_id: str | None = None
    compute_task_id: str | None = None


class ShapeJobs(Frozen):
    """A shape's batch jobs on the site, as one look counted them."""

    pending: int = 0
    held: int = 0
    running: int = 0


class Look(Frozen):
    """One look's answer: the claims of the tags asked about, and each shape's jobs."""

    claims: dict[str, Claim] = {}
    shapes: dict[str, ShapeJobs] = {}


def new_tag() -> str:
    return uuid.uuid4().hex[:20]


def tag_for(*parts: object) -> str:
    """A tag derived from what identifies one shipment (task id, attempt, copy), so a
    restarted coordinator finds the same claim again."""
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:20]


SHIPMENT_GENERATIONS = 8
"""Tags a restarted coordinator tries for one shipment (see :func:`shipment_tag`)."""


def shipment_tag(task_id: str, attempt: int, copy: int | None, generation: int = 0) -> str:
    """The tag of one shipment of a task: its id, attempt and copy, and the generation (a
    shipment a restart withdrew by claiming its tag is shipped again under the next one),
    so a restarted coordinator can find each in-flight shipment's claim (:func:`settle_command`)."""
    return tag_for(task_id, attempt, "-" if copy is None else copy, generation)


class Settled(Frozen):
    """What :func:`settle_command` found for one in-flight shipment: ``took``, a task
    claimed generation ``generation`` (``claim`` names its Slurm job and Globus Compute id);
    ``freed``, no task had claimed it and the look claimed it first, so it never runs
    (ship again under ``generation + 1``); ``full``, every generation tried was withdrawn."""

    kind: Literal["took", "freed", "full"]
    generation: int = 0
    claim: Claim | None = None


def settle_command(chains: Mapping[str, Sequence[str]]) -> str:
    """One shell function for a restart's in-flight shipments (``key`` -> its tags, first
    generation first): for each, the first generation a task claimed (``took|key|gen|...``)
    or, failing that, the first one nobody claimed, claimed now as withdrawn so that its
    task (if it reached the site) never runs (``freed|key|gen``); ``full|key`` if none."""
    d = f'"$HOME/{CLAIM_DIR}"'
    lines = [f"mkdir -p {d} && cd {d} || exit 3"]
    for key, tags in chains.items():
        if not _KEY.match(key):
            raise ValueError(f"not a shipment key: {key!r}")
        lines.append("done=")
        for gen, tag in enumerate(tags):
            t = _check(tag)
            lines.append(
                f'if [ -z "$done" ]; then if (set -C; echo {WITHDRAWN} > {t}) 2>/dev/null; '
                f'then echo "freed|{key}|{gen}"; done=1; else c=$(head -c 200 {t} | tr -d '
                f'\'\\n\'); case "$c" in {WITHDRAWN}*) ;; *) echo "took|{key}|{gen}|$c"; '
                "done=1;; esac; fi; fi"
            )
        lines.append(f'[ -n "$done" ] || echo "full|{key}"')
    return "\n".join(lines)


def parse_settle(stdout: str) -> dict[str, Settled]:
    """:func:`settle_command`'s output (other lines ignored)."""
    out: dict[str, Settled] = {}
    for line in stdout.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) < 2 or not _KEY.match(parts[1]):
            continue
        try:
            if parts[0] == "took" and len(parts) == 4:
                claim = _claim("0" * 20, parts[3])
                out[parts[1]] = Settled(kind="took", generation=int(parts[2]), claim=claim)
            elif parts[0] == "freed" and len(parts) == 3:
                out[parts[1]] = Settled(kind="freed", generation=int(parts[2]))
            elif parts[0] == "full" and len(parts) == 2:
                out[parts[1]] = Settled(kind="full")
        except ValueError:
            continue
    return out


def _check(tag: str) -> str:
    if not _TAG.match(tag):
        raise ValueError(f"not a job tag: {tag!r}")
    return tag


def _check_shape(shape: str) -> str:
    if not _SHAPE.match(shape):
        raise ValueError(f"not a shape name: {shape!r}")
    return shape


def shape_tag(uec: Mapping[str, Any]) -> str:
    """The name of a shape's batch jobs (``fed.<shape>``): a digest of its config."""
    body = {k: v for k, v in uec.items() if k != "job_tag"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]


def job_name(shape: str) -> str:
    return JOB_NAME_PREFIX + _check_shape(shape)


def claim_path(tag: str) -> str:
    """The claim's path relative to the home folder (``~/...`` for Python)."""
    return f"~/{CLAIM_DIR}/{_check(tag)}"


def guarded_command(command: str, tag: str) -> str:
    """A shell task's command, which first claims its tag and stops if it cannot."""
    d = f'"$HOME/{CLAIM_DIR}"'
    return (
        f"mkdir -p {d} && if ! (set -C; printf '%s %s\\n' \"${{SLURM_JOB_ID:-none}}\" "
        f'"${{GC_TASK_UUID:-none}}" > {d}/{_check(tag)}) 2>/dev/null; then '
        "echo 'withdrawn before it started: the coordinator withdrew this copy' >&2; "
        f"exit {WITHDRAWN_EXIT}; fi\n{command}"
    )


def look_command(tags: Iterable[str], shapes: Mapping[str, int] | None = None) -> str:
    """One look at the site: the claims of ``tags`` (``claim|<tag>|<content>`` lines) and,
    for each shape in ``shapes`` (shape -> tasks still waiting for a block of it), its jobs
    (``shape|<shape>|<pending>|<held>|<running>`` after releasing held blocks the waiting
    tasks need again)."""
    d = f'"$HOME/{CLAIM_DIR}"'
    lines = [f"mkdir -p {d} && cd {d} || exit 3"]
    wanted = sorted({_check(t) for t in tags})
    if wanted:
        lines.append(
            f'for t in {" ".join(wanted)}; do [ -f "$t" ] && '
            'printf \'claim|%s|%s\\n\' "$t" "$(head -c 200 "$t" | tr -d \'\\n\')"; done; true'
        )
    for shape, waiting in sorted((shapes or {}).items()):
        lines.append(_shape_script(_check_shape(shape), max(0, int(waiting))))
    lines.append(f"find . -type f -mtime +{CLAIM_KEEP_DAYS} -delete 2>/dev/null; true")
    return "\n".join(lines)


def _shape_script(shape: str, waiting: int) -> str:
    """Count a shape's jobs and keep as many unheld pending blocks as ``waiting`` tasks
    still need: release held ones while fewer (held blocks count as blocks to the engine,
    which would not ask for more), hold the newest beyond that while more (the engine asks
    for blocks for the withdrawn copies it still holds, which would start and run
    nothing)."""
    name = job_name(shape)
    return "\n".join(
        [
            f"q=$(squeue --noheader --name={name} --states=PENDING --format='%i %r' "
            "2>/dev/null | sort -n)",
            "u=$(printf '%s\\n' \"$q\" | awk 'NF && $2 !~ /^JobHeld/ {print $1}')",
            "h=$(printf '%s\\n' \"$q\" | awk 'NF && $2 ~ /^JobHeld/ {print $1}')",
            "p=$(printf '%s\\n' \"$u\" | grep -c .)",
            f"need=$(( {waiting} - p ))",
            'if [ "$need" -gt 0 ] && [ -n "$h" ]; then '
            "printf '%s\\n' $h | head -n \"$need\" | xargs -r scontrol release 2>/dev/null; fi",
            'if [ "$need" -lt 0 ]; then '
            "printf '%s\\n' $u | tail -n $(( -need )) | xargs -r scontrol uhold 2>/dev/null; fi",
            f"q=$(squeue --noheader --name={name} --format='%i %T %r' 2>/dev/null)",
            "p=$(printf '%s\\n' \"$q\" | awk '$2==\"PENDING\" && $3 !~ /^JobHeld/' | grep -c .)",
            "h=$(printf '%s\\n' \"$q\" | awk '$2==\"PENDING\" && $3 ~ /^JobHeld/' | grep -c .)",
            "r=$(printf '%s\\n' \"$q\" | awk 'NF && $2!=\"PENDING\"' | grep -c .)",
            f'echo "shape|{shape}|$p|$h|$r"',
        ]
    )


def withdraw_command(tag: str, shape: str | None = None, waiting: int = 0) -> str:
    """Withdraw one copy: claim its tag first (``won``) or learn who did (``lost|<content>``).
    A won withdrawal holds its shape's unheld pending jobs beyond the ``waiting`` tasks that
    still need them, so no Slurm job starts for the withdrawn copy."""
    d = f'"$HOME/{CLAIM_DIR}"'
    t = _check(tag)
    hold = ""
    if shape is not None:
        name = job_name(shape)
        hold = (
            f"\n  ids=$(squeue --noheader --name={name} --states=PENDING --format='%i %r' "
            "2>/dev/null | awk '$2 !~ /^JobHeld/ {print $1}' | sort -n)"
            "\n  n=$(printf '%s\\n' \"$ids\" | grep -c .)"
            f"\n  x=$(( n - {max(0, int(waiting))} ))"
            '\n  if [ "$x" -gt 0 ]; then printf \'%s\\n\' $ids | tail -n "$x" | '
            'xargs -r scontrol uhold 2>/dev/null; echo "held|$x"; fi'
        )
    return (
        f"mkdir -p {d} || exit 3\n"
        f"if (set -C; echo {WITHDRAWN} > {d}/{t}) 2>/dev/null; then\n  echo won{hold}\n"
        f"else\n  printf 'lost|%s\\n' \"$(head -c 200 {d}/{t} | tr -d '\\n')\"\nfi"
    )


def _claim(tag: str, content: str) -> Claim:
    words = content.split()
    if words[:1] == [WITHDRAWN]:
        return Claim(tag=tag, withdrawn=True)
    job = words[0] if words and words[0] != "none" else None
    tid = words[1] if len(words) > 1 and words[1] != "none" else None
    return Claim(tag=tag, job_id=job, compute_task_id=tid)


def parse_look(stdout: str) -> Look:
    """:func:`look_command`'s output (other lines ignored)."""
    claims: dict[str, Claim] = {}
    shapes: dict[str, ShapeJobs] = {}
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if parts[0] == "claim" and len(parts) == 3 and _TAG.match(parts[1]):
            claims[parts[1]] = _claim(parts[1], parts[2])
        elif parts[0] == "shape" and len(parts) == 5 and _SHAPE.match(parts[1]):
            try:
                counts = [int(x) for x in parts[2:]]
            except ValueError:
                continue
            shapes[parts[1]] = ShapeJobs(pending=counts[0], held=counts[1], running=counts[2])
    return Look(claims=claims, shapes=shapes)


def parse_withdraw(tag: str, stdout: str) -> tuple[bool, Claim | None, int]:
    """(won, the claim that beat it when lost, blocks held)."""
    won, claim, held = False, None, 0
    for line in stdout.splitlines():
        line = line.strip()
        if line == "won":
            won = True
        elif line.startswith("lost|"):
            claim = _claim(tag, line[len("lost|") :])
        elif line.startswith("held|"):
            try:
                held = int(line[len("held|") :])
            except ValueError:
                held = 0
    return won, claim, held
