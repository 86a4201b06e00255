"""What drf-spectacular cannot infer for the OpenAPI schema, and what the service reads back
from the schema (each operation's query parameters).

The schema is written for code generators (the Python and TypeScript clients are generated from
it): each operation is tagged with its resource (``memories``) and has an operationId that reads
as a method name (``memories_create``, ``memories_search``), which the Python client uses as is;
request components are not named ``*RequestRequest``; every POST that honours an
``Idempotency-Key`` (each one on a ``TenantScopedViewSet``: ``ledger.scoping``) documents it;
``Retry-After`` is documented on 429 and 503; and ``error.code`` is an enum
(``config.error_codes``).

Every error leaves the API in one shape (``config.api.error_body``), from authentication, roles,
rate limits, validation, missing objects and dependency outages alike, so each operation lists
the statuses it can answer with and all of them point at one ``Error`` component. Clients (and
schemathesis) can then check every answer against the schema, not only the successful ones.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

from drf_spectacular import openapi
from drf_spectacular.utils import OpenApiParameter

from config.error_codes import ERROR_CODES

IDEMPOTENCY_PARAMETER = OpenApiParameter(
    "Idempotency-Key",
    str,
    location=OpenApiParameter.HEADER,
    description="Retrying with the same key returns the first answer and writes nothing new.",
)
# Operations whose name does not follow the rule of ``operation_name``: POST actions on a
# collection that are not "create", and GETs of one thing that is not an object by id.
OPERATION_NAMES = {
    "content_items_clear_create": "content_items_clear",
    "context_create": "context_assemble",
    "events_batch_create": "events_create_batch",
    "memories_batch_create": "memories_create_batch",
    "memories_bulk_update_create": "memories_bulk_update",
    "memories_bulk_delete_create": "memories_bulk_delete",
    "memories_search_create": "memories_search",
    "kb_search_create": "kb_search",
    "recall_create": "recall",
    "trust_devils_advocate_create": "trust_devils_advocate",
    "trust_import_create": "trust_import",
    "trust_recompute_create": "trust_recompute",
    "events_verify_retrieve": "events_verify",
    "events_verify_receipt_create": "events_verify_receipt",
    "trust_metrics_retrieve": "trust_metrics",
    "trust_export_retrieve": "trust_export",
    "export_list": "export",
}
# drf-spectacular's action suffixes, as the client's methods name them.
_SUFFIXES = {
    "_retrieve": "_get",
    "_partial_update": "_update",
    "_update": "_replace",
    "_destroy": "_delete",
}


def operation_name(default: str, path: str) -> str:
    """``memories_create``, ``memories_get``, ``rounds_finalize`` from drf-spectacular's
    ``v1_memories_create``, ``v1_memories_retrieve``, ``v1_rounds_finalize_create``: a POST on
    ``/{id}/<action>/`` is the action itself, and the other suffixes are the client's verbs."""
    name = default.removeprefix("v1_")
    if name in OPERATION_NAMES:
        return OPERATION_NAMES[name]
    segments = [s for s in path.split("/") if s]
    if name.endswith("_create") and len(segments) >= 2 and segments[-2].startswith("{"):
        return name.removesuffix("_create")
    for old, new in _SUFFIXES.items():
        if name.endswith(old):
            return name.removesuffix(old) + new
    return name


class AutoSchema(openapi.AutoSchema):
    """REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]: names, tags and headers for code generators."""

    def get_tags(self) -> list[str]:
        # "/api/v1/memories/search/" -> "memories": the resource, not the API version.
        tokens = [t for t in self._tokenize_path() if t != "v1"]
        return tokens[:1] or super().get_tags()

    def get_operation_id(self) -> str:
        return operation_name(super().get_operation_id(), self.path)

    def get_override_parameters(self) -> list[Any]:
        from ledger.scoping import TenantScopedViewSet  # the views import this module's settings

        parameters = list(super().get_override_parameters())
        if self.method == "POST" and isinstance(self.view, TenantScopedViewSet):
            parameters.append(IDEMPOTENCY_PARAMETER)
        return parameters

    def _get_serializer_name(
        self, serializer: Any, direction: Any, bypass_extensions: bool = False
    ) -> str:
        # COMPONENT_SPLIT_REQUEST appends "Request" to request components; a serializer already
        # named "...Request" (SearchRequestSerializer) would become "SearchRequestRequest".
        name = str(super()._get_serializer_name(serializer, direction, bypass_extensions))
        return name.removesuffix("Request") if name.endswith("RequestRequest") else name


ERROR_CODE_COMPONENT = {
    "type": "string",
    "enum": list(ERROR_CODES),
    "description": "Stable, machine-readable code: it never changes once published.",
}
RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer", "minimum": 0},
        "description": "Seconds to wait before retrying.",
    }
}

ERROR_COMPONENT = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"$ref": "#/components/schemas/ErrorCode"},
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
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_COMPONENT
    schemas["ErrorCode"] = ERROR_CODE_COMPONENT
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
            for status in ("429", "503"):
                responses[status].setdefault("headers", {}).update(RETRY_AFTER)
    return result


# --- Query parameters, as documented ---------------------------------------------------------


# drf-spectacular resolves each schema extension's target class the first time a schema is
# made, and two threads doing it at once can fail: one sets a class it could not import to None
# while the other reads it as a name (AttributeError, a 500 for a batch store that was a
# process's first request beside a search; the LoCoMo ingest benchmark, 2026-12-07). Every
# schema this process makes is made under this lock (config.views.SchemaView too).
schema_generation_lock = threading.Lock()


def _documented_operations() -> list[tuple[re.Pattern[str], dict[str, frozenset[str]]]]:
    """(path regex, {method: query parameter names}) of every operation of the served schema,
    concrete paths before templated ones (OpenAPI's own matching rule: ``/trust/metrics/``
    before ``/trust/{id}/``). Generated once per process, in about 0.2 s, by the first request
    while the others wait."""
    with schema_generation_lock:
        return _documented_operations_made()


@functools.cache
def _documented_operations_made() -> list[tuple[re.Pattern[str], dict[str, frozenset[str]]]]:
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
