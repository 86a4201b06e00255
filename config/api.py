"""What every API endpoint shares: the error format, the JSON parser, the pagination, the query
parameters it accepts, and error codes.

Every error leaves the API as ``{"error": {"code": ..., "message": ..., "details": {...}}}`` with a
``code`` that clients may branch on (it never changes once published) and a ``message`` written for
the person reading the log.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import IO, Any
from urllib import parse

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, ValidationError
from django.db import DataError, connection, models
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, pagination, parsers, status

# Module import, not name import: DRF's views import our authentication class, which imports this.
from rest_framework import views as drf_views
from rest_framework.request import Request
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


# --- Request bodies ------------------------------------------------------------------------------

# How deep a body's arrays and objects may nest. Python's JSON decoder recurses once a level and
# gave up near 950 levels with a RecursionError (a 500); what comes after it (validation, the
# ledger's canonical JSON, jsonb, rendering the answer) recurses too. No request of this API needs
# more than a handful of levels: 64 leaves room for any client's metadata and payloads.
MAX_JSON_DEPTH = 64

_TEXT_PROBLEMS = {
    "nul_character": "holds a NUL character (\\u0000), which PostgreSQL cannot store",
    "lone_surrogate": "holds a lone surrogate (such as \\ud800): half of a UTF-16 pair, not a "
    "character, which PostgreSQL cannot store",
}


class JsonParser(parsers.JSONParser):
    """JSON bodies the service can store, checked once here for every endpoint.

    Refused with 400 before any view sees the data: nesting past ``MAX_JSON_DEPTH``
    (``too_deep``), and any text PostgreSQL refuses, a NUL character or a lone surrogate, or a
    number past the float range (``1e999`` reads as infinity), anywhere in the document, keys
    included (``invalid_value``, naming where as a JSON pointer). Nothing downstream (serializers,
    services, jsonb and text columns, the rendered answer) has to defend itself.
    """

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            document = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:  # the decoder's own recursion limit, far past ours
            raise _too_deep() from exc
        json_document_check(document)
        return document


def json_document_check(document: Any) -> None:
    """Raise ``ApiError`` for the first value of a parsed JSON document the service cannot take.

    Iterative, so a document nested deeper than Python's recursion limit is measured, not crashed
    on; only containers are pushed, scalars are checked where they are met.
    """
    _scalar_check(document, ())
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(document, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            entries: Any = value.items()
            for key in value:
                _scalar_check(key, (*path, key))
        elif isinstance(value, list):
            entries = enumerate(value)
        else:
            continue
        if len(path) >= MAX_JSON_DEPTH:
            raise _too_deep()
        for key, item in entries:
            if isinstance(item, dict | list):
                stack.append((item, (*path, key)))
            else:
                _scalar_check(item, (*path, key))


def _scalar_check(value: Any, path: tuple[str | int, ...]) -> None:
    if isinstance(value, str):
        problem = text_problem(value)
        if problem is not None:
            pointer = json_pointer(path)
            raise ApiError(
                code="invalid_value",
                message=f"The text at {pointer or 'the top'} {_TEXT_PROBLEMS[problem]}; "
                "nothing was changed.",
                details={"pointer": pointer, "problem": problem},
            )
    elif isinstance(value, float) and not math.isfinite(value):
        pointer = json_pointer(path)
        raise ApiError(
            code="invalid_value",
            message=f"The number at {pointer or 'the top'} is out of range; nothing was changed.",
            details={"pointer": pointer, "problem": "number_out_of_range"},
        )


def text_problem(text: str) -> str | None:
    """Why PostgreSQL would refuse this text (a key of ``_TEXT_PROBLEMS``), or None."""
    if "\x00" in text:
        return "nul_character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "lone_surrogate"
    return None


def json_pointer(path: tuple[str | int, ...]) -> str:
    """RFC 6901, printable: a lone surrogate in a key is shown escaped, as the answer must be
    valid UTF-8 itself."""
    parts = (str(part).replace("~", "~0").replace("/", "~1") for part in path)
    return "".join(f"/{part}" for part in parts).encode("utf-8", "backslashreplace").decode()


def _too_deep() -> ApiError:
    return ApiError(
        code="too_deep",
        message=f"The body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep.",
        details={"max_depth": MAX_JSON_DEPTH},
    )


# --- Query parameters ----------------------------------------------------------------------------

# A name clients reach for, and the one this API uses for it.
_INSTEAD = {"limit": "page_size", "per_page": "page_size", "page": "cursor", "offset": "cursor"}


def request_inputs_check(request: Request) -> None:
    """Check what every API request carries besides its route, before the view runs: the query
    parameters (``query_parameters_check``) and the JSON body (``JsonParser``, parsed here so a
    body that cannot be taken is refused on every endpoint alike, even one that ignores it)."""
    query_parameters_check(request)
    if request.method in ("POST", "PUT", "PATCH"):
        # The raw bytes first: DRF then parses a copy, and the Idempotency-Key's fingerprint
        # can still read them.
        _ = request.body
        _ = request.data


def query_parameters_check(request: Request) -> None:
    """Refuse a query parameter the endpoint's OpenAPI operation does not document (400
    ``unknown_parameter``, naming the accepted ones), and a NUL character in a parameter or a
    path segment (400 ``invalid_value``).

    The accepted names are read from the served schema itself (``config.schema``), which takes
    them from each view's ``extend_schema(parameters=...)`` and its pagination: one declaration,
    so the documentation and the behaviour cannot disagree. A misspelt filter used to be ignored
    silently, answering more than was asked for (``/events/?limit=2`` gave 50 events).
    """
    from config.schema import operation_query_parameters  # the generator imports the views

    accepted = operation_query_parameters(request.method or "GET", request.path_info)
    if accepted is not None:
        unknown = sorted(set(request.query_params) - accepted)
        if unknown:
            instead = {n: _INSTEAD[n] for n in unknown if _INSTEAD.get(n) in accepted}
            hint = "".join(f" For {n!r} use {instead[n]!r}." for n in instead)
            raise ApiError(
                code="unknown_parameter",
                message=f"Unknown query parameter {', '.join(map(repr, unknown))}; this endpoint "
                f"accepts {', '.join(sorted(accepted)) or 'none'}.{hint}",
                details={"unknown": unknown, "accepted": sorted(accepted), "instead": instead},
            )
    path_values = (request.parser_context or {}).get("kwargs", {}).values()
    values = [value for _, given in request.query_params.lists() for value in given]
    if any("\x00" in str(value) for value in [*values, *path_values]):
        raise ApiError(
            code="invalid_value",
            message="A query parameter or path segment holds a NUL character (%00), which "
            "PostgreSQL cannot compare; nothing was changed.",
            details={"problem": "nul_character"},
        )


# --- Pagination ----------------------------------------------------------------------------------


class CursorPagination(pagination.CursorPagination):
    """Opaque cursors over an immutable, unique ordering, so pages never skip or repeat rows.

    ``page_size`` is the page size (``limit`` is not an alias: one name per concept, and
    ``?limit=`` answers ``unknown_parameter`` pointing here). A cursor that was not handed out by
    this server (tampered, truncated, from another ordering) is a 400 ``invalid_cursor``, never a
    500 or DRF's 404, and a bad ``page_size`` is a 400 ``invalid_parameter``, not ignored.
    """

    ordering = "id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    page_size_query_description = (
        f"Results per page, 1 to {max_page_size} (larger is capped); default {page_size}."
    )
    cursor_query_description = (
        "Where the page starts: a cursor from a `next` or `previous` link, as given."
    )

    _model: type[models.Model]

    def paginate_queryset(
        self, queryset: QuerySet[Any], request: Request, view: Any = None
    ) -> list[Any] | None:
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
            raise ApiError(
                code="invalid_parameter",
                message=f"page_size must be a whole number from 1 to {self.max_page_size}.",
                details={"parameter": "page_size"},
            )
        return min(int(raw), self.max_page_size)

    def decode_cursor(self, request: Request) -> pagination.Cursor | None:
        """DRF's cursor format (base64 of ``o=<offset>&r=<0|1>&p=<position>``), read strictly:
        DRF's own reading took any text that decodes to nothing as the first page, and passed
        any position on to the query."""
        encoded = request.query_params.get(self.cursor_query_param)
        if not encoded:
            return None
        try:
            text = base64.b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
            tokens = parse.parse_qs(text, keep_blank_values=True, strict_parsing=True)
            if set(tokens) - {"o", "r", "p"} or any(len(v) != 1 for v in tokens.values()):
                raise ValueError(text)
            offset = int(tokens.get("o", ["0"])[0])
            reverse = tokens.get("r", ["0"])[0]
            if offset < 0 or reverse not in ("0", "1"):
                raise ValueError(text)
        except ValueError as exc:  # binascii.Error and UnicodeError are ValueErrors
            raise _invalid_cursor() from exc
        position = tokens.get("p", [None])[0]
        return pagination.Cursor(
            offset=min(offset, self.offset_cutoff),
            reverse=reverse == "1",
            position=None if position is None else self._position(position),
        )

    def _position(self, raw: Any) -> Any:
        """The cursor's position as a value of the ordering's column, or ``invalid_cursor``:
        unchecked, ``p=abc`` reached the query as a 500."""
        field = self._model._meta.get_field(self.ordering[0].lstrip("-"))
        assert isinstance(field, models.Field)  # orderings are columns of the model itself
        try:
            value = field.to_python(raw)
        except ValidationError as exc:
            raise _invalid_cursor() from exc
        if isinstance(field, models.IntegerField):
            low, high = connection.ops.integer_field_range(field.get_internal_type())
            if not low <= value <= high:
                raise _invalid_cursor()
        return value


def _invalid_cursor() -> ApiError:
    return ApiError(
        code="invalid_cursor",
        message="The cursor is not one this server handed out; start again without it, or use "
        "a `next` or `previous` link as given.",
    )
