"""What every API endpoint shares: the error format, the pagination, and error codes.

Every error leaves the API as ``{"error": {"code": ..., "message": ..., "details": {...}}}`` with a
``code`` that clients may branch on (it never changes once published) and a ``message`` written for
the person reading the log.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, pagination, status

# Module import, not name import: DRF's views import our authentication class, which imports this.
from rest_framework import views as drf_views
from rest_framework.response import Response


class ApiError(exceptions.APIException):
    """An error a service raises for the API to report with its own code and status."""

    def __init__(
        self,
        *,
        code: str,
        message: str,
        status_code: int = status.HTTP_400_BAD_REQUEST,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail=message, code=code)
        self.status_code = status_code
        self.error_code = code
        self.details = details or {}


class Conflict(ApiError):
    def __init__(self, *, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(
            code=code, message=message, status_code=status.HTTP_409_CONFLICT, details=details
        )


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(
    code: str, message: str, status_code: int, details: dict[str, Any] | None = None
) -> JsonResponse:
    """The same error shape for responses made outside DRF (middleware, Django 404/500)."""
    return JsonResponse(error_body(code, message, details), status=status_code)


# DRF's own exception classes mapped to our stable codes and messages a person can act on.
_DRF_ERRORS: dict[type[exceptions.APIException], tuple[str, str]] = {
    exceptions.ParseError: ("malformed_json", "The request body is not valid JSON."),
    exceptions.NotAuthenticated: (
        "not_authenticated",
        "Send an API key as 'Authorization: Bearer <key>'.",
    ),
    exceptions.AuthenticationFailed: ("invalid_api_key", "The API key is unknown or revoked."),
    exceptions.PermissionDenied: (
        "permission_denied",
        "This API key's role is not allowed to do this.",
    ),
    exceptions.NotFound: ("not_found", "No such object."),
    exceptions.MethodNotAllowed: ("method_not_allowed", "This method is not allowed here."),
    exceptions.NotAcceptable: ("not_acceptable", "Only application/json responses are served."),
    exceptions.UnsupportedMediaType: (
        "unsupported_media_type",
        "Send the request body as application/json.",
    ),
    exceptions.Throttled: ("rate_limited", "Too many requests; retry later."),
}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("payload_too_large", "The request body is larger than this server accepts."),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, DataError):
        # PostgreSQL refused a value the request carried (a NUL character in JSON, a time zone
        # offset past ±15:59, ...): the request's fault, and the transaction rolled back. The
        # database's message is not echoed: it quotes internals.
        return Response(
            error_body(
                "invalid_value",
                "A value in the request cannot be stored or compared (for example a NUL "
                "character, or a time zone offset out of range); nothing was changed.",
            ),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_views.exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response

    if isinstance(exc, ApiError):
        body = error_body(exc.error_code, str(exc.detail), exc.details)
    elif isinstance(exc, exceptions.ValidationError):
        body = error_body(
            "validation_error",
            "Some fields are missing or invalid; see details.",
            exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail},
        )
    else:
        code, message = _DRF_ERRORS.get(type(exc), (str(exc.default_code), str(exc.detail)))
        # A specific message raised by our code (or DRF's, e.g. naming the method) beats the
        # generic one; DRF's JSON parse messages stay generic as they quote parser internals.
        if str(exc.detail) != str(exc.default_detail) and not isinstance(
            exc, exceptions.ParseError
        ):
            message = str(exc.detail)
        body = error_body(code, message)
    response.data = body
    return response


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response("not_found", "No such endpoint.", status.HTTP_404_NOT_FOUND)


def api_server_error(request: HttpRequest) -> JsonResponse:
    return error_response(
        "internal_error",
        "The server failed to answer this request; it has been logged.",
        status.HTTP_500_INTERNAL_SERVER_ERROR,
    )


class CursorPagination(pagination.CursorPagination):
    """Opaque cursors over an immutable, unique ordering, so pages never skip or repeat rows."""

    ordering = "id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
