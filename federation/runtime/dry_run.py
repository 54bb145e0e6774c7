"""A dry run: where a task would go and the Slurm job it would be, with nothing submitted.

:meth:`Coordinator.dry_run <federation.runtime.coordinator.Coordinator.dry_run>` places the
task as ``submit_task`` would (same policy, same snapshot, the coordinator's own jobs laid
over it; no hedge budget spent) and asks the policy gate for its verdict without recording
one. :func:`job_preview` then reads the job off the real path: the ``user_endpoint_config``
the site's backend would send for the shape, rendered by the site's endpoint template and
turned into a batch script by the provider the endpoint would build
(:func:`~federation.sites.sbatch_preview.sbatch_options`). The ``--partition``,
``--account``, ``--qos`` and ``--constraint`` shown are read from those options.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field, JsonValue

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.errors import FederationError
from federation.core.model import Frozen
from federation.core.spec import SiteSpec
from federation.core.tasks import TaskSpec
from federation.placement.candidates import PlacementDecision
from federation.security.policy import PolicyOutcome
from federation.sites.backend import SiteBackend
from federation.sites.jobtags import shape_tag
from federation.sites.sbatch_preview import PreviewUnavailable, option_value, sbatch_options
from federation.sites.user_config import shape_to_user_config


class JobPreview(Frozen):
    """The Slurm job one placement would be."""

    site: str
    node_class: str = Field(description="the class placement chose (a partition's own name)")
    class_description: str = Field(description="its partition, constraint and QOS in words")
    user_endpoint_config: dict[str, JsonValue] = Field(
        description="what the site's endpoint would get for the task's shape"
    )
    sbatch_options: tuple[str, ...] | None = Field(
        description="the options sbatch would read from the job's script (None: see note)"
    )
    partition: str | None = Field(default=None, description="--partition (None: not sent)")
    account: str | None = Field(default=None, description="--account")
    qos: str | None = Field(default=None, description="--qos (None: not sent)")
    constraint: str | None = Field(default=None, description="--constraint (None: not sent)")
    note: str | None = Field(default=None, description="why the options could not be read")

    def lines(self) -> list[str]:
        """The preview in words, one line each."""
        out = [f"{self.site}: {self.class_description}"]
        if self.sbatch_options is None:
            out.append(f"  sbatch options unknown: {self.note}")
        else:
            out += [f"  #SBATCH {o}" for o in self.sbatch_options]
        return out


class DryRun(Frozen):
    """What ``submit_task`` would do now; nothing was submitted."""

    label: str
    code_hash: str
    envelope: ResourceEnvelope = Field(description="as the caller's policy narrowed it")
    decision: PlacementDecision
    explain: str = Field(description="the decision trace")
    shape: Shape
    job: JobPreview
    hedges: tuple[JobPreview, ...] = Field(
        default=(), description="jobs of the copies a hedging policy would add"
    )
    policy: PolicyOutcome = Field(description="the policy gate's verdict (not recorded)")
    submitted: Literal[False] = False

    def text(self) -> str:
        """The chosen job, any copies, the policy's verdict and the decision trace."""
        lines = [f"dry run (nothing submitted): {self.label} -> {self.shape.describe()}"]
        for job in (self.job, *self.hedges):
            lines += job.lines()
        verdict = self.policy.verdict
        lines.append(f"policy: {verdict}")
        lines += [f"  {f.rule}: {f.message}" for f in self.policy.findings]
        lines += ["decision trace:", self.explain]
        return "\n".join(lines)


def job_preview(
    spec: SiteSpec, shape: Shape, shape_config: Callable[[Shape], dict[str, Any]] | None
) -> JobPreview:
    """The job of ``shape`` on ``spec``'s site. ``shape_config``: the backend's own
    ``user_endpoint_config`` for a shape (a Globus Compute site's), else the same built
    here (a tagged shape, the class's account left to the template)."""
    if shape_config is not None:
        uec = shape_config(shape)
    else:
        uec = shape_to_user_config(
            shape.partition,
            shape.nodes,
            shape.cpus,
            shape.mem_gb,
            shape.gpus,
            shape.walltime_s,
            shape.account,
        )
        uec["job_tag"] = shape_tag(uec)
    cls = spec.partition(shape.partition)
    try:
        opts: tuple[str, ...] | None = sbatch_options(spec, uec)
        note = None
    except PreviewUnavailable as e:
        opts, note = None, str(e)
    except (FederationError, OSError) as e:  # a folder without its endpoint files, ...
        opts, note = None, f"site {spec.name}: its endpoint template did not render: {e}"
    return JobPreview(
        site=spec.name,
        node_class=cls.name,
        class_description=cls.describe(),
        user_endpoint_config=uec,
        sbatch_options=opts,
        partition=option_value(opts, "--partition") if opts else None,
        account=option_value(opts, "--account") if opts else None,
        qos=option_value(opts, "--qos") if opts else None,
        constraint=option_value(opts, "--constraint") if opts else None,
        note=note,
    )


def dry_run_of(
    task: TaskSpec,
    code_hash: str,
    envelope: ResourceEnvelope,
    decision: PlacementDecision,
    policy: PolicyOutcome,
    site_for: Callable[[str, str], SiteBackend],
    caller: str,
) -> DryRun:
    """The dry run of ``decision`` (its chosen place and any copies), each job read off the
    backend ``site_for(caller, site)`` would ship it through."""

    def job(shape: Shape) -> JobPreview:
        site = site_for(caller, shape.site)
        return job_preview(site.spec, shape, getattr(site, "shape_config", None))

    return DryRun(
        label=task.label,
        code_hash=code_hash,
        envelope=envelope,
        decision=decision,
        explain=decision.explain(),
        shape=decision.chosen.shape,
        job=job(decision.chosen.shape),
        hedges=tuple(job(c.shape) for c in decision.hedges),
        policy=policy,
    )
