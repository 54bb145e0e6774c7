"""``federation sites new NAME``: a commented starting folder for a center's own site.

The folder holds ``site.yaml`` (every field commented, the optional ones shown commented
out) and the endpoint files generated from it (``config.yaml``,
``user_config_template.yaml.j2``, ``user_config_schema.json``), so it passes ``federation
config check`` as soon as a ``federation.yaml`` names it. The values are placeholders of a
plausible shape: replace them with the center's own (docs/add-a-site.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from federation.core.errors import FederationError
from federation.core.spec import SITE_FILE, load_site_folder
from federation.sites.endpoint_config import write_site_configs

NAME_RE = r"^[a-z][a-z0-9]*$"

SITE_YAML = """\
# Site facts for {name}: one Slurm cluster served by one Globus Compute endpoint.
# Written by `federation sites new {name}`; replace every value with your center's own,
# from its public user guide and the system itself (sinfo, sacctmgr, scontrol show partition).
# After editing, regenerate the endpoint files beside this one:
#   federation sites generate-configs --root {root} {name}
# and check a federation.yaml that names this folder:
#   federation config check --config federation.yaml
# Model and defaults: federation/core/spec.py (SiteSpec, PartitionSpec); docs/add-a-site.md.

name: {name}                 # the site's name: lower case letters and digits; the folder's name
institution: Example Center  # who runs it (shown in reports and the endpoint's display name)
arch: x86_64                 # the compute nodes' CPU architecture: x86_64 or aarch64
access: multi-user           # multi-user: one endpoint, each Globus identity mapped to its own
                             # account; login-node: run by one user under their own account
default_account: myproject   # the Slurm account jobs are charged to (sbatch --account)

# Optional site-wide submission settings (a partition's own value wins):
# qos: normal                      # sbatch --qos
# constraint: scratch              # sbatch --constraint: node features joined by & or |
# gpu_request: gpus-per-node       # or implied-by-partition: the partition brings its GPUs
# mem_request: allowed             # or refused: the scheduler rejects --mem (never sent)
# scheduler_options: ["--gpu-bind=closest"]   # extra #SBATCH lines, one option each
amqp_port: 443                     # the endpoint's AMQP port: 443, 5671 or 5672
# engine_ifname: ib0               # the interface compute nodes reach the login node on
slurm_cmd_timeout_s: 60            # how long sbatch/squeue/sacct may take (seconds)

# What users can ask for. Each `name` must be a partition of the live cluster
# (`sinfo -s` lists them): placement reads the partition under this name from the probe.
partitions:
  - name: cpu                  # the Slurm partition's name, exactly as sinfo prints it
    nodes_real: 100            # how many nodes the partition has on the real system
    nodes_local: 2             # how many nodes the embedded local cluster emulates (1-8)
    cpus_per_node: 64          # cores per node
    mem_gb_per_node: 256       # memory per node, GB
    max_walltime_s: 172800     # the partition's time limit, seconds (48 h)
    features: [x86_64]         # node features (sinfo -o %f), for --constraint
    charge_unit: core-hours    # what the center bills here: core-hours, gpu-hours or node-hours
    charge_su_per_unit: 1.0    # service units per charge unit
    # min_charge_hours: 0.25           # least hours billed per job
    # account: myproject-cpu           # charged here instead of default_account
    # qos: normal                      # this partition's QOS
    # constraint: cpu                  # this partition's --constraint
    # max_running_jobs_per_user: 20    # jobs one user may run here at once (QOS MaxJobsPU)
    # max_submitted_jobs_per_user: 40  # jobs one user may hold here at once (QOS MaxSubmit)
  # A GPU partition looks like this (uncomment and adjust):
  # - name: gpu
  #   nodes_real: 20
  #   nodes_local: 1
  #   cpus_per_node: 64
  #   mem_gb_per_node: 256
  #   gpus_per_node: 4           # GPUs per node
  #   gpu_type: a100             # the GPU model, lower case (what envelopes ask for)
  #   gpu_mem_gb: 40             # memory per GPU, GB
  #   max_walltime_s: 172800
  #   features: [x86_64, a100]
  #   charge_unit: gpu-hours
  #   account: myproject-gpu
"""


def write_new_site(name: str, folder: Path, *, force: bool = False) -> list[Path]:
    """Write a starting site folder ``folder`` for site ``name``; returns the files written.

    Refuses an existing ``site.yaml`` unless ``force`` (a center's edited facts are never
    overwritten by accident)."""
    if not re.match(NAME_RE, name):
        raise FederationError(
            f"site name {name!r}: use lower case letters and digits, starting with a letter"
        )
    site_file = folder / SITE_FILE
    if site_file.exists() and not force:
        raise FederationError(f"{site_file} exists: edit it, or pass --force to start over")
    folder.mkdir(parents=True, exist_ok=True)
    site_file.write_text(SITE_YAML.format(name=name, root=folder.parent))
    spec = load_site_folder(folder, name)
    return [site_file, *write_site_configs(spec, folder)]
