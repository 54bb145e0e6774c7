"""The error every service operation raises: an HTTP status and a body that says what to do."""

from __future__ import annotations

from typing import Any

from federation.interfaces.service.models import ErrorBody


class OpsError(Exception):
    """A failed operation: an HTTP status plus the JSON body that explains it."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        hint: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.body = ErrorBody(error=error, message=message, hint=hint, details=details or {})
        super().__init__(message)

    def __str__(self) -> str:
        text = f"{self.body.error}: {self.body.message}"
        if self.body.hint:
            text += f" -- {self.body.hint}"
        return text
