"""Agentic control of federated HPC resources through Globus Compute endpoints on Slurm."""

from federation.coordinator import Coordinator
from federation.envelope import ResourceEnvelope, Shape
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
from federation.placement import PlacementDecision, place
from federation.snapshot import FederationSnapshot, SiteSnapshot
from federation.tasks import PythonTask, ShellTask

__all__ = [
    "BadEnvelopeError",
    "Coordinator",
    "Event",
    "EventBus",
    "FederationError",
    "FederationSnapshot",
    "NoFeasibleSiteError",
    "PlacementDecision",
    "ProbeError",
    "PythonTask",
    "ResourceEnvelope",
    "SerializationError",
    "Shape",
    "ShellTask",
    "SiteSnapshot",
    "SiteUnavailableError",
    "TaskFailedError",
    "TaskHandle",
    "TaskResult",
    "TemplateVariableError",
    "UnknownSiteError",
    "place",
]
