"""One error root; each subclass says what the user can do about it."""

from __future__ import annotations

from collections.abc import Mapping


class FederationError(Exception):
    """Root of every error this package raises on purpose."""


class BadEnvelopeError(FederationError, ValueError):
    """A resource envelope is malformed (min > max, negative values, unknown GPU type)."""


class UnknownSiteError(FederationError, KeyError):
    """A site name that the federation does not know."""

    def __init__(self, site: str, known: list[str], where: str | None = None) -> None:
        self.site = site
        self.known = known
        looked = f" (looked in {where})" if where else ""
        super().__init__(
            f"unknown site {site!r}; known sites: {', '.join(known) or '(none)'}{looked}. "
            "Check the name, or add the site: `federation sites new NAME --dir DIR` writes "
            "its folder DIR/NAME/, which federation.yaml names with `sites_dir: DIR` "
            "(docs/add-a-site.md)."
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


class GlobusUnreachableError(SiteUnavailableError):
    """No route from this machine to a Globus service (connection refused, DNS, timeout):
    every site behind that service is out of reach at once."""


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


class TransferError(FederationError):
    """A data transfer (``move_data``) could not be started or did not complete."""


class TransferPathError(TransferError, ValueError):
    """A transfer path outside a site's storage root (``..``, or absolute elsewhere)."""


class WorkspaceAccessError(TransferPathError, PermissionError):
    """A path into another caller's workspace: a caller's workspace is theirs."""


class DataNotFoundError(TransferError, FileNotFoundError):
    """The source of a transfer does not exist; check the site and path."""


class TransferAuthError(TransferError):
    """Globus refused the transfer (401/403): log in again or grant the collection's consent."""


class TransferUnavailableError(TransferError):
    """The Transfer service or a collection is unreachable (offline, rate-limited, 5xx)."""


class ConfigError(FederationError, ValueError):
    """``federation.yaml`` is missing, unreadable or invalid; names the file and field."""


class AuthError(FederationError):
    """Globus Auth refused or has no usable tokens; the message says what to run."""


class LoginRequiredError(AuthError):
    """No tokens (never logged in), or the refresh token expired or was revoked."""


class ConsentRequiredError(AuthError):
    """A Globus service needs a consent (scope, session, MFA) the stored tokens lack."""


class PermissionDeniedError(AuthError):
    """Authenticated, but this identity may not use the endpoint or collection (403)."""


class PayloadTooLargeError(SerializationError):
    """A task's function plus arguments exceed the Globus Compute 10 MB payload limit."""


class VersionMismatchError(FederationError):
    """The coordinator's and the endpoint's Python versions differ (major.minor)."""


class CursorAheadError(FederationError, ValueError):
    """An event cursor past the end of the event log: the service restarted without its
    store, or the cursor came from another service. Resume with ``after=last`` (new events
    only) or ``after=0`` (re-read the log); waiting would never end."""

    def __init__(self, cursor: int, last: int, owner: str | None = None) -> None:
        self.cursor = cursor
        self.last = last
        self.owner = owner
        log = "the event log" if owner is None else f"the event log of {owner!r}"
        super().__init__(
            f"event cursor {cursor} is ahead of {log}, which ends at {last}: the service "
            "restarted without its store (or the cursor is from another service). Resume "
            f"with after={last} for the events from now on, or after=0 to re-read the log."
        )


class StoreInUseError(FederationError):
    """Another live coordinator keeps its state in this store: two would collide on event
    numbers. Stop it or talk to it, or give this one another home (or no store)."""
