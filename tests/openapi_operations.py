"""The API's operations as its OpenAPI schema lists them, for tests that must reach every one.

Read from the schema the service serves, so an operation added later is covered by every test
that walks ``OPERATIONS`` without being listed anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from drf_spectacular.generators import SchemaGenerator

SCHEMA: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
COMPONENTS: dict[str, Any] = SCHEMA["components"]["schemas"]


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # the template, "/api/v1/memories/{id}/"
    spec: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.path}"

    def url(self, value: str = "1") -> str:
        """The path with every template variable set to ``value``."""
        return re.sub(r"\{[^}/]+\}", value, self.path)

    @property
    def query_parameters(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.spec.get("parameters", []) if p["in"] == "query"}

    @property
    def body_schema(self) -> dict[str, Any] | None:
        body = self.spec.get("requestBody")
        return None if body is None else resolved(body["content"]["application/json"]["schema"])


def resolved(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = COMPONENTS[schema["$ref"].rsplit("/", 1)[1]]
    return schema


OPERATIONS = [
    Operation(method, path, spec)
    for path, operations in SCHEMA["paths"].items()
    if path.startswith("/api/v1/")
    for method, spec in operations.items()
]
WRITES = [op for op in OPERATIONS if op.method in ("post", "put", "patch")]
PAGINATED = [op for op in OPERATIONS if "cursor" in op.query_parameters]


def table_rows() -> dict[str, int]:
    """Every row count of our apps: a refused request must leave each one as it was."""
    return {
        model._meta.label: model._default_manager.count()
        for label in ("ledger", "memory", "trust")
        for model in apps.get_app_config(label).get_models()
    }
