"""Agentic control of federated HPC resources through Globus Compute endpoints on Slurm."""

from federation.coordinator import Coordinator
from federation.envelope import ResourceEnvelope, Shape, StageIn
from federation.errors import (
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
from federation.events import Event, EventBus
from federation.handles import TaskHandle, TaskResult
from federation.hooks import CommandHook, WebhookHook
from federation.milestones import Milestones
from federation.placement import PlacementDecision, place
from federation.security.policy import PolicyViolationError
from federation.snapshot import FederationSnapshot, SiteSnapshot
from federation.tasks import PythonTask, ShellTask
from federation.transfer import TransferHandle

__all__ = [
    "BadEnvelopeError",
    "CommandHook",
    "Coordinator",
    "Event",
    "EventBus",
    "FederationError",
    "FederationSnapshot",
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
