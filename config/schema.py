"""What drf-spectacular cannot infer for the OpenAPI schema (every operation's error answers),
and what the service reads back from the schema (each operation's query parameters).

Every error leaves the API in one shape (``config.api.error_body``), from authentication, roles,
rate limits, validation, missing objects and dependency outages alike, so each operation lists
the statuses it can answer with and all of them point at one ``Error`` component. Clients (and
schemathesis) can then check every answer against the schema, not only the successful ones.
"""

from __future__ import annotations

import functools
import re
from typing import Any

ERROR_COMPONENT = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "Stable, machine-readable code."},
                "message": {"type": "string", "description": "What went wrong, for a person."},
                "details": {"type": "object", "additionalProperties": True},
            },
            "required": ["code", "message", "details"],
        }
    },
    "required": ["error"],
}

_COMMON = {
    "400": "The request is invalid (`validation_error` and friends); nothing was changed.",
    "401": "No API key, or an unknown or revoked one (`not_authenticated`, `invalid_api_key`).",
    "403": "The key's role or agent scope does not allow this (`permission_denied`).",
    "404": "No such object in the caller's tenant (or agent scope) (`not_found`).",
    "405": "The method is not allowed here (`method_not_allowed`).",
    "406": "Only JSON answers are served (`not_acceptable`).",
    "429": "Too many requests for this key (`rate_limited`); see `Retry-After`.",
    "503": "PostgreSQL or Redis is unavailable (`service_unavailable`); see `Retry-After`.",
}
_WRITES = {
    "409": "The object's state does not allow this (a conflict).",
    "413": "The body is larger than this server accepts (`payload_too_large`).",
    "415": "The body is not `application/json` (`unsupported_media_type`).",
    "422": "The Idempotency-Key was used for a different request (`idempotency_key_reused`).",
}


def document_error_responses(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular post-processing hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"])."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_COMPONENT
    reference = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            statuses = dict(_COMMON)
            if method in {"post", "put", "patch", "delete"}:
                statuses.update(_WRITES)
            responses = operation.setdefault("responses", {})
            for status, description in statuses.items():
                responses.setdefault(status, {"content": reference, "description": description})
    return result


# --- Query parameters, as documented ---------------------------------------------------------


@functools.cache
def _documented_operations() -> list[tuple[re.Pattern[str], dict[str, frozenset[str]]]]:
    """(path regex, {method: query parameter names}) of every operation of the served schema,
    concrete paths before templated ones (OpenAPI's own matching rule: ``/trust/metrics/``
    before ``/trust/{id}/``). Generated once per process, in about 0.2 s."""
    from drf_spectacular.generators import SchemaGenerator

    generator = SchemaGenerator()  # type: ignore[no-untyped-call]
    schema = generator.get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    routes: list[tuple[int, re.Pattern[str], dict[str, frozenset[str]]]] = []
    for template, operations in schema["paths"].items():
        literals = re.split(r"\{[^}/]+\}", template)
        regex = re.compile("[^/]+".join(map(re.escape, literals)) + r"\Z")
        by_method = {
            method.upper(): frozenset(
                p["name"] for p in operation.get("parameters", []) if p["in"] == "query"
            )
            for method, operation in operations.items()
        }
        routes.append((len(literals), regex, by_method))
    routes.sort(key=lambda route: route[0])
    return [(regex, by_method) for _, regex, by_method in routes]


def operation_query_parameters(method: str, path: str) -> frozenset[str] | None:
    """The query parameters the schema documents for this request, or None when it documents
    no such operation (the view then answers 404 or 405 itself)."""
    method = method.upper()
    method = "GET" if method == "HEAD" else method
    for regex, by_method in _documented_operations():
        if regex.match(path):
            return by_method.get(method)
    return None
