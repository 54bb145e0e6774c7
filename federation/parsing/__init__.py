"""Parsers from raw Slurm output (probe text, JSON, third-party text) to snapshot models.

One module per command family; :mod:`.snapshot_builder` turns a whole probe result into a
:class:`federation.core.snapshot.SiteSnapshot`. The probe's own format is parsed strictly
(:class:`federation.core.errors.ParseError` names the line); third-party formats skip malformed
lines (each costs its own row only) and report them in ``warnings``, capped per kind
(:class:`federation.parsing.common.RowWarnings`), or raise a ParseError naming the first line
when no line fits at all.
"""

from federation.parsing.gres import UNTYPED, gpus_by_type, parse_gres_entries, request_gpus
from federation.parsing.hostlist import expand_hostlist
from federation.parsing.sacct import AcctRecord, parse_sacct_json, parse_sacct_parsable
from federation.parsing.sacctmgr_qos import QOS_FIELDS, parse_sacctmgr_qos
from federation.parsing.scontrol import (
    PartitionInfo,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_scontrol_records,
)
from federation.parsing.sinfo import SINFO_FIELDS, parse_sinfo, parse_sinfo_json
from federation.parsing.snapshot_builder import build_site_snapshot, unreachable_snapshot
from federation.parsing.squeue import (
    SQUEUE_FIELDS,
    jobs_from_table,
    parse_squeue,
    parse_squeue_json,
    parse_squeue_jsonlike,
)
from federation.parsing.squeue_start import (
    START_FIELDS,
    StartEstimate,
    parse_squeue_start,
    parse_squeue_start_default,
)
from federation.parsing.sshare import ShareRecord, parse_sshare_json
from federation.parsing.states import parse_job_state, parse_node_state
from federation.parsing.table import Table, parse_delimited, parse_format_output
from federation.parsing.table_jobs import TableJobs
from federation.parsing.times import (
    parse_duration,
    parse_memory,
    parse_memory_mb,
    parse_timestamp,
)

__all__ = [
    "QOS_FIELDS",
    "SINFO_FIELDS",
    "SQUEUE_FIELDS",
    "START_FIELDS",
    "UNTYPED",
    "AcctRecord",
    "PartitionInfo",
    "ShareRecord",
    "StartEstimate",
    "Table",
    "TableJobs",
    "build_site_snapshot",
    "expand_hostlist",
    "gpus_by_type",
    "jobs_from_table",
    "parse_delimited",
    "parse_duration",
    "parse_format_output",
    "parse_gres_entries",
    "parse_job_state",
    "parse_memory",
    "parse_memory_mb",
    "parse_node_state",
    "parse_sacct_json",
    "parse_sacct_parsable",
    "parse_sacctmgr_qos",
    "parse_scontrol_jobs",
    "parse_scontrol_nodes",
    "parse_scontrol_partitions",
    "parse_scontrol_records",
    "parse_sinfo",
    "parse_sinfo_json",
    "parse_squeue",
    "parse_squeue_json",
    "parse_squeue_jsonlike",
    "parse_squeue_start",
    "parse_squeue_start_default",
    "parse_sshare_json",
    "parse_timestamp",
    "request_gpus",
    "unreachable_snapshot",
]
