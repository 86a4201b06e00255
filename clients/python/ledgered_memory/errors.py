"""Typed exceptions for the service's error answers.

The service answers every error as ``{"error": {"code", "message", "details"}}``; ``code`` is
stable once published, so branch on ``exc.code`` (or on the class, which follows the HTTP status).
"""

from __future__ import annotations

from typing import Any


class AgentMemoryError(Exception):
    """Base of everything this client raises."""


class TransportError(AgentMemoryError):
    """The service could not be reached (or stopped answering) after every retry."""


class ApiError(AgentMemoryError):
    """The service answered with an error status."""

    def __init__(
        self,
        *,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        text = f"{status} {code}: {message}"
        if details:
            text += f" {details}"[:1000]
        super().__init__(text)
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}


class BadRequestError(ApiError):
    """400: invalid input (``validation_error`` with per-field ``details``, or a specific code)."""


class AuthenticationError(ApiError):
    """401: no API key, or an unknown or revoked one."""


class PermissionDeniedError(ApiError):
    """403: the key's role may not do this."""


class NotFoundError(ApiError):
    """404: no such object in the caller's tenant (another tenant's ids look the same)."""


class ConflictError(ApiError):
    """409: the request conflicts with the current state (e.g. a round already finalised)."""


class PayloadTooLargeError(ApiError):
    """413: the body or one of its parts is larger than the service accepts."""


class UnprocessableError(ApiError):
    """422: e.g. ``idempotency_key_reused`` for a key sent with a different request."""


class RateLimitedError(ApiError):
    """429: too many requests."""


class ServiceUnavailableError(ApiError):
    """503: a dependency (database, Redis) is down; raised once the retries are used up."""


class ServerError(ApiError):
    """Any other 5xx."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableError,
    429: RateLimitedError,
    503: ServiceUnavailableError,
}


def error_for(status: int, body: Any) -> ApiError:
    """The typed exception for an error answer; tolerant of bodies not in the service's shape
    (a proxy's HTML page, say), which keep ``code`` as ``http_<status>``."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code") or f"http_{status}")
        message = str(error.get("message") or "")
        details = error.get("details") if isinstance(error.get("details"), dict) else {}
    else:
        code, message, details = f"http_{status}", str(body)[:500] if body else "", {}
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(status=status, code=code, message=message, details=details)
