"""Agentic control of federated HPC resources through Globus Compute endpoints on Slurm."""

from federation.core.envelope import ResourceEnvelope, Shape, StageIn
from federation.core.errors import (
    BadEnvelopeError,
    FederationError,
    NoFeasibleSiteError,
    ProbeError,
    SerializationError,
    SiteUnavailableError,
    TaskFailedError,
    TemplateVariableError,
    UnknownSiteError,
)
from federation.core.snapshot import FederationSnapshot, SiteSnapshot
from federation.core.tasks import PythonTask, ShellTask
from federation.placement.candidates import PlacementDecision
from federation.placement.decide import place
from federation.runtime.coordinator import Coordinator
from federation.runtime.dry_run import DryRun, JobPreview
from federation.runtime.events import Event, EventBus
from federation.runtime.handles import TaskHandle, TaskResult
from federation.runtime.hooks import CommandHook, WebhookHook
from federation.runtime.milestones import Milestones
from federation.runtime.transfers import TransferHandle
from federation.security.policy import PolicyViolationError

__all__ = [
    "BadEnvelopeError",
    "CommandHook",
    "Coordinator",
    "DryRun",
    "Event",
    "EventBus",
    "FederationError",
    "FederationSnapshot",
    "JobPreview",
    "Milestones",
    "NoFeasibleSiteError",
    "PlacementDecision",
    "PolicyViolationError",
    "ProbeError",
    "PythonTask",
    "ResourceEnvelope",
    "SerializationError",
    "Shape",
    "ShellTask",
    "SiteSnapshot",
    "SiteUnavailableError",
    "StageIn",
    "TaskFailedError",
    "TaskHandle",
    "TaskResult",
    "TemplateVariableError",
    "TransferHandle",
    "UnknownSiteError",
    "WebhookHook",
    "place",
]
