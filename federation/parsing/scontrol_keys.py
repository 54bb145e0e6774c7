"""The keys ``scontrol show partition|job|node`` records hold, for :mod:`.scontrol`."""

from __future__ import annotations

PARTITION_KEYS = ("PartitionName", "State", "MaxTime", "TotalNodes", "TotalCPUs", "Nodes", "TRES")
JOB_KEYS = (
    "JobId",
    "JobName",
    "UserId",
    "Priority",
    "JobState",
    "Partition",
    "NumNodes",
    "NumCPUs",
    "TimeLimit",
    "SubmitTime",
    "StartTime",
    "EndTime",
)
NODE_KEYS = (
    "NodeName",
    "CPUAlloc",
    "CPUTot",
    "RealMemory",
    "AllocMem",
    "State",
    "Gres",
    "AvailableFeatures",
)
"""Keys every record of its kind holds (Slurm 17.11 to 25.11): a record without one lost a
line or a value, and is skipped with a warning, not read with defaults."""


MAY_BE_EMPTY = frozenset({"JobName"})
ONE_WORD = (
    "JobId",
    "UserId",
    "Priority",
    "JobState",
    "Partition",
    "NumNodes",
    "NumCPUs",
    "TimeLimit",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "PartitionName",
    "MaxTime",
    "TotalNodes",
    "TotalCPUs",
    "Nodes",
    "TRES",
    "State",
)
"""Job and partition fields whose value is one word: more words before the next key are
damage (a line glued into the value). Nodes warn and keep the first word instead."""
