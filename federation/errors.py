"""One error root; each subclass says what the user can do about it."""

from __future__ import annotations

from collections.abc import Mapping


class FederationError(Exception):
    """Root of every error this package raises on purpose."""


class BadEnvelopeError(FederationError, ValueError):
    """A resource envelope is malformed (min > max, negative values, unknown GPU type)."""


class UnknownSiteError(FederationError, KeyError):
    """A site name that the federation does not know."""

    def __init__(self, site: str, known: list[str]) -> None:
        self.site = site
        self.known = known
        super().__init__(
            f"unknown site {site!r}; known sites: {', '.join(known) or '(none)'}. "
            "Check the name, or add endpoint_configs/<site>/site.yaml."
        )

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class NoFeasibleSiteError(FederationError):
    """No site can satisfy the envelope; ``reasons`` says why each site was rejected."""

    def __init__(self, summary: str, reasons: Mapping[str, str]) -> None:
        self.reasons = dict(reasons)
        lines = [summary] + [f"  - {site}: {why}" for site, why in self.reasons.items()]
        lines.append("Relax the envelope (fewer GPUs, another GPU type, shorter walltime).")
        super().__init__("\n".join(lines))


class SiteUnavailableError(FederationError):
    """A site cannot be reached (endpoint down, Slurm down, probe timed out)."""


class TemplateVariableError(FederationError, ValueError):
    """A user_endpoint_config value that the site's schema does not allow."""


class SerializationError(FederationError, ValueError):
    """A task's function or arguments cannot be serialized for shipping."""


class TaskFailedError(FederationError):
    """The task ran and failed; carries the remote traceback."""

    def __init__(self, message: str, remote_traceback: str = "") -> None:
        self.remote_traceback = remote_traceback
        super().__init__(
            message
            + (f"\n--- remote traceback ---\n{remote_traceback}" if remote_traceback else "")
        )


class ProbeError(FederationError):
    """A probe returned nothing usable (timeout, garbage, command missing)."""


class ParseError(ProbeError, ValueError):
    """Scheduler output that a parser could not read; names the line or field."""
