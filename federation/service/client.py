"""A Python client of the HTTP service, with the same operations as :class:`LocalOps`.

Errors come back as the :class:`OpsError` the service raised (status, code, message, hint),
so the MCP server can sit on top of either one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
from pydantic import TypeAdapter

from federation.catalog import FunctionInfo
from federation.drafting import EnvelopeDraft
from federation.service.models import (
    CancelResponse,
    DraftRequest,
    ErrorBody,
    EventsPage,
    SubmitResponse,
    TaskRequest,
    TaskStatus,
)
from federation.service.ops import OpsError
from federation.snapshot import FederationSnapshot

SERVER_MAX_POLL_S = 30.0
_FUNCTIONS = TypeAdapter(list[FunctionInfo])


class ServiceClient:
    """Talks to ``federation serve`` at ``base_url`` with a bearer ``token``."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = timeout_s
        self._client = httpx.Client(
            base_url=self.base_url, headers=self._headers, timeout=timeout_s
        )

    def _raise_for(self, r: httpx.Response) -> None:
        if r.status_code < 400:
            return
        try:
            body = ErrorBody.model_validate(r.json())
        except Exception:
            body = ErrorBody(error=f"http_{r.status_code}", message=r.text[:2000])
        raise OpsError(r.status_code, body.error, body.message, body.hint, body.details)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self._client.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise OpsError(
                503,
                "service_unreachable",
                f"cannot reach the service at {self.base_url}: {e}",
                "start it with `federation serve` and check the URL",
            ) from e
        self._raise_for(r)
        return r.json()

    def inspect(self, refresh: bool = False) -> FederationSnapshot:
        data = self._call("GET", "/v1/federation", params={"refresh": str(refresh).lower()})
        return FederationSnapshot.model_validate(data)

    def functions(self) -> list[FunctionInfo]:
        return _FUNCTIONS.validate_python(self._call("GET", "/v1/functions"))

    def draft(self, req: DraftRequest) -> EnvelopeDraft:
        data = self._call("POST", "/v1/envelopes/draft", json=req.model_dump(mode="json"))
        return EnvelopeDraft.model_validate(data)

    def submit(self, req: TaskRequest, caller: str = "") -> SubmitResponse:
        body = req.model_dump(mode="json", exclude_defaults=True)
        body["envelope"] = req.envelope.model_dump(mode="json", exclude_defaults=True)
        return SubmitResponse.model_validate(self._call("POST", "/v1/tasks", json=body))

    def status(self, task_id: str) -> TaskStatus:
        return TaskStatus.model_validate(self._call("GET", f"/v1/tasks/{task_id}"))

    def cancel(self, task_id: str) -> CancelResponse:
        return CancelResponse.model_validate(self._call("POST", f"/v1/tasks/{task_id}/cancel"))

    async def events(
        self,
        after: int,
        task_ids: Sequence[str] | None,
        kinds: Sequence[str] | None,
        timeout_s: float,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
    ) -> EventsPage:
        """Long-polls in rounds of at most the server's cap until ``timeout_s`` is spent."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, timeout=SERVER_MAX_POLL_S + 15
        ) as client:
            while True:
                wait = max(0.0, min(SERVER_MAX_POLL_S, deadline - time.monotonic()))
                params: dict[str, Any] = {"after": after, "timeout_s": wait}
                if task_ids:
                    params["task_id"] = list(task_ids)
                if kinds:
                    params["kinds"] = list(kinds)
                try:
                    r = await client.get("/v1/events", params=params)
                except httpx.HTTPError as e:
                    raise OpsError(
                        503,
                        "service_unreachable",
                        f"cannot reach the service at {self.base_url}: {e}",
                        "start it with `federation serve` and check the URL",
                    ) from e
                self._raise_for(r)
                page = EventsPage.model_validate(r.json())
                if page.events or time.monotonic() >= deadline:
                    return page

    def close(self) -> None:
        self._client.close()
