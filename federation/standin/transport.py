"""The stand-in service's seams in the SDK: a ``requests`` transport adapter that answers
HTTP from the service's route table, and an ``Executor`` whose result watcher the service
supplies (no AMQP)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlparse

import requests
from globus_compute_sdk import Client, Executor
from globus_compute_sdk.sdk.executor import _ResultWatcher
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

from federation.standin.rate_limit import identity_of

__all__ = ["_HTTPError", "_OfflineExecutor", "_ServiceAdapter"]


class _Routes(Protocol):
    """What the adapter needs of the service: one HTTP request, from the identity its
    ``Authorization`` header names -> (status, JSON payload, response headers)."""

    def handle(
        self, method: str, path: str, body: Any, identity: str
    ) -> tuple[int, Any, Mapping[str, str]]: ...


class _Watchers(Protocol):
    """What the executor needs of the service: the result watcher of a task group."""

    def watcher_for(self, task_group_id: uuid.UUID, client: Client) -> _ResultWatcher: ...


class _HTTPError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class _ServiceAdapter(BaseAdapter):
    """A ``requests`` transport adapter answered by ``LocalComputeService.handle``."""

    def __init__(self, service: _Routes) -> None:
        super().__init__()
        self.service = service

    def send(self, request: requests.PreparedRequest, *_: Any, **__: Any) -> requests.Response:
        path = urlparse(request.url or "").path.rstrip("/")
        raw = request.body
        if raw is not None and not isinstance(raw, str | bytes):
            return self._response(request, 400, {"message": "streamed bodies are not supported"})
        body = json.loads(raw) if raw else None
        identity = identity_of(request.headers.get("Authorization"))
        status, payload, headers = self.service.handle(str(request.method), path, body, identity)
        return self._response(request, status, payload, headers)

    @staticmethod
    def _response(
        request: requests.PreparedRequest,
        status: int,
        payload: Any,
        headers: Mapping[str, str] | None = None,
    ) -> requests.Response:
        resp = requests.Response()
        resp.status_code = status
        resp._content = json.dumps(payload).encode()
        resp.headers = CaseInsensitiveDict({"Content-Type": "application/json", **(headers or {})})
        resp.url = request.url or ""
        resp.request = request
        resp.encoding = "utf-8"
        return resp

    def close(self) -> None:
        pass


class _OfflineExecutor(Executor):  # type: ignore[misc]
    """``globus_compute_sdk.Executor`` with its result watcher supplied by the service."""

    def __init__(self, service: _Watchers, **kwargs: Any) -> None:
        self._service = service
        super().__init__(**kwargs)

    def _get_result_watcher(self) -> _ResultWatcher:
        return self._service.watcher_for(self.task_group_id, self.client)
