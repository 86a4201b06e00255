"""Every OpenAPI operation has a client method, in both clients, with the parameters, body type
and result the schema gives it now; every schema component has its TypedDict with the same fields.
When this fails after an API change, run ``.venv/bin/python clients/python/codegen.py``.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import pytest
from drf_spectacular.generators import SchemaGenerator
from ledgered_memory import AsyncClient, Client, types
from ledgered_memory._operations import ITERATORS, OPERATIONS

CODEGEN = Path(__file__).resolve().parents[2] / "clients" / "python" / "codegen.py"


def _codegen():
    spec = importlib.util.spec_from_file_location("ledgered_memory_codegen", CODEGEN)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


@pytest.fixture(scope="module")
def operations(schema):
    return _codegen().operations(schema)


def test_every_api_operation_has_a_client_method(schema):
    documented = {
        operation["operationId"]: (method.upper(), path)
        for path, methods in schema["paths"].items()
        if path.startswith("/api/v1/")
        for method, operation in methods.items()
    }
    missing = sorted(set(documented) - set(OPERATIONS))
    assert not missing, f"operations without a client method: {missing}; run codegen.py"
    assert not sorted(set(OPERATIONS) - set(documented)), "client methods for removed operations"
    for operation_id, (method, path) in documented.items():
        assert OPERATIONS[operation_id][:2] == (method, path), operation_id
        name = OPERATIONS[operation_id][2]
        assert callable(getattr(Client, name, None)), name
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name, None)), name
    for list_method, iterator in ITERATORS.items():
        for client in (Client, AsyncClient):
            assert callable(getattr(client, iterator, None)), f"{list_method} has no {iterator}"


def test_client_methods_match_the_schema_now(operations):
    for operation in operations:
        method = getattr(Client, operation.name)
        parameters = inspect.signature(method).parameters
        expected = {p.name for p in operation.path_params + operation.query_params}
        if operation.body == "document":
            expected.add("document")
        elif operation.body is not None:
            expected.add("body")
            assert operation.body in parameters["body"].annotation, operation.name
        if operation.http_method == "POST":
            expected.add("idempotency_key")
        assert set(parameters) - {"self"} == expected, operation.name
        assert inspect.signature(method).return_annotation == operation.result, operation.name


def test_every_schema_component_has_its_typed_dict(schema):
    for name, component in schema["components"]["schemas"].items():
        generated = getattr(types, name, None)
        assert generated is not None, f"types.{name} missing; run codegen.py"
        if "properties" in component:
            assert set(generated.__annotations__) == set(component["properties"]), name
