"""HTTP routes for operators: list held tasks, approve or reject them (``/v1/policy/...``).

Mounted by :func:`federation.interfaces.service.app.create_app`. Only callers whose policy says
``operator: true`` may use them (403 otherwise); the bearer-token guard in front of the app
has already authenticated the caller.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field

from federation.core.errors import FederationError
from federation.core.model import Frozen
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import (
    SubmitResponse,
    TaskStatus,
    submit_response,
    task_status,
)
from federation.runtime.coordinator import Coordinator


class HeldView(Frozen):
    """A task held by the policy gate: who asked, where it would run, and why it waits."""

    task_id: str
    caller: str
    label: str
    granted: str
    rules: tuple[str, ...]
    why: str
    held_at: str


class RejectRequest(Frozen):
    reason: str = Field(default="rejected by an operator", min_length=1, max_length=2000)


def policy_router(coord: Coordinator) -> APIRouter:
    router = APIRouter(prefix="/v1/policy", tags=["policy"])

    def operator(request: Request) -> str:
        caller = str(getattr(request.state, "caller", ""))
        if not coord.gate.is_operator(caller):
            raise OpsError(
                403,
                "not_an_operator",
                f"caller {caller!r} may not decide held tasks",
                "use a token whose caller policy has `operator: true`",
            )
        return caller

    def decide(task_id: str, fn: Any) -> Any:
        try:
            return fn()
        except FederationError as e:
            status = 404 if coord.held.get(task_id) is None else 409
            raise OpsError(status, "not_held", str(e), "GET /v1/policy/pending") from e

    @router.get("/pending")
    def pending(request: Request) -> list[HeldView]:
        """Tasks held for an operator (placed, not shipped)."""
        operator(request)
        return [
            HeldView(
                task_id=h.task_id,
                caller=h.caller,
                label=h.label,
                granted=h.decision.chosen.shape.describe(),
                rules=tuple(f.rule for f in h.outcome.findings),
                why=h.why,
                held_at=h.held_at.isoformat(),
            )
            for h in coord.pending_policy()
        ]

    @router.post("/{task_id}/approve")
    def approve(task_id: str, request: Request) -> SubmitResponse:
        """Ship a held task on the shape it was placed on."""
        actor = operator(request)
        cursor = coord.events.last_seq
        h = decide(task_id, lambda: coord.approve(task_id, actor=actor))
        return submit_response(h, cursor)

    @router.post("/{task_id}/reject")
    def reject(task_id: str, req: RejectRequest, request: Request) -> TaskStatus:
        """Fail a held task with a reason; nothing is shipped."""
        actor = operator(request)
        h = decide(task_id, lambda: coord.reject(task_id, req.reason, actor=actor))
        return task_status(h)

    return router
