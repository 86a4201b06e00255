"""Query parameters: exactly the documented ones are accepted, on every operation of the schema.

Issue 18: an unknown parameter was ignored (``/events/?limit=2`` answered 50 events, ``?tags=``
on memories filtered nothing), and a tampered cursor (``cD1hYmM=``, base64 of ``p=abc``) was a
500. The accepted names come from the served OpenAPI schema (``config.schema``), so these tests
walk the same schema: an operation added later is covered, and documenting a parameter is what
makes it accepted.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from config.schema import operation_query_parameters
from ledger.services import event_append
from tests.openapi_operations import OPERATIONS, PAGINATED, Operation

pytestmark = pytest.mark.django_db


def _call(client: Any, operation: Operation, params: dict[str, str]) -> Any:
    """The operation called with ``params`` in its query string (a body too, for a write)."""
    with transaction.atomic():  # a statement PostgreSQL refuses must not spoil the next call
        response = client.generic(
            operation.method.upper(),
            operation.url(),
            data="{}" if operation.method in ("post", "put", "patch") else "",
            content_type="application/json",
            QUERY_STRING="&".join(f"{k}={v}" for k, v in params.items()),
        )
        transaction.set_rollback(True)
    return response


@pytest.mark.parametrize("operation", OPERATIONS, ids=str)
def test_an_unknown_query_parameter_is_refused_naming_the_accepted_ones(api_as, tenant, operation):
    response = _call(api_as(tenant), operation, {"colour": "red"})

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "unknown_parameter"
    assert error["details"]["unknown"] == ["colour"]
    assert error["details"]["accepted"] == sorted(operation.query_parameters)


def _plausible(parameter: dict[str, Any]) -> str:
    schema = parameter.get("schema", {})
    if "enum" in schema:
        return str(schema["enum"][0])
    return {
        "boolean": "true",
        "integer": "1",
        "number": "1",
    }.get(schema.get("type", ""), "2026-01-01T00:00:00Z" if schema.get("format") else "x")


@pytest.mark.parametrize("operation", [op for op in OPERATIONS if op.query_parameters], ids=str)
def test_every_documented_query_parameter_is_accepted(api_as, tenant, operation):
    params = {
        name: _plausible(parameter)
        for name, parameter in operation.query_parameters.items()
        if name != "cursor"  # a made-up cursor is refused for what it is, below
    }

    response = _call(api_as(tenant), operation, params)

    assert response.status_code < 500, response.content
    if response.status_code == 400:
        assert response.json()["error"]["code"] != "unknown_parameter", response.content


def _api_routes(resolver: URLResolver, prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for entry in resolver.url_patterns:
        pattern = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            found += _api_routes(entry, pattern)
        elif isinstance(entry, URLPattern) and pattern.startswith("api/v1/"):
            found.append((pattern, entry.callback))
    return found


def test_every_method_of_every_api_route_has_a_documented_operation():
    # The check is skipped for a request the schema documents no operation for (the view then
    # answers 404 or 405), so the URLconf must hold nothing the schema leaves out.
    routes = _api_routes(get_resolver())

    assert len(routes) > 40
    for pattern, callback in routes:
        # "api/v1/^events/(?P<seq>\d+)/$" -> "/api/v1/events/1/"
        sample = "/" + re.sub(r"\(\?P<[^>]+>[^)]*\)", "1", pattern).replace("^", "")
        sample = sample.replace("$", "").replace("\\", "")
        assert resolve(sample).func is callback, pattern
        for method in callback.actions:
            assert operation_query_parameters(method, sample) is not None, (method, pattern)


def test_limit_names_page_size_as_the_page_size(api_as, tenant):
    for turn in range(3):
        event_append(tenant=tenant, kind="world.observed", actor="system", turn=turn)
    client = api_as(tenant)

    refused = client.get("/api/v1/events/", {"limit": 2})
    page = client.get("/api/v1/events/", {"page_size": 2})

    assert refused.status_code == 400
    assert refused.json()["error"]["details"]["instead"] == {"limit": "page_size"}
    assert len(page.json()["results"]) == 2


def test_a_misspelt_memory_filter_is_refused_not_ignored(api_as, tenant):
    response = api_as(tenant).get("/api/v1/memories/", {"tags": "ops"})

    assert response.status_code == 400
    assert "tag" in response.json()["error"]["details"]["accepted"]


def _cursor(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


TAMPERED = {
    "position that is not a number": _cursor("p=abc"),
    "position past bigint": _cursor("p=99999999999999999999999"),
    "negative offset": _cursor("o=-1&p=3"),
    "reverse flag that is not a number": _cursor("r=yes"),
    "not base64": "!!!",
    "not ascii": "é",
    "base64 of bytes that are not ascii": base64.b64encode(b"\xff\xfe").decode(),
    "NUL in the position": _cursor("p=1\x00"),
}


@pytest.mark.parametrize("operation", PAGINATED, ids=str)
@pytest.mark.parametrize("kind", TAMPERED)
def test_a_tampered_cursor_is_a_400_on_every_paginated_list(api_as, tenant, operation, kind):
    response = api_as(tenant).get(operation.url(), {"cursor": TAMPERED[kind]})

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_cursor"


@pytest.mark.parametrize("operation", PAGINATED, ids=str)
@pytest.mark.parametrize("page_size", ["0", "-1", "ten", "1.5", ""])
def test_a_bad_page_size_is_a_400_not_ignored(api_as, tenant, operation, page_size):
    response = api_as(tenant).get(operation.url(), {"page_size": page_size})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_parameter"


def test_pages_follow_their_cursors_and_a_big_page_size_is_capped(api_as, tenant):
    for turn in range(5):
        event_append(tenant=tenant, kind="world.observed", actor="system", turn=turn)
    client = api_as(tenant)

    first = client.get("/api/v1/events/", {"page_size": 2}).json()
    second = client.get(first["next"]).json()
    back = client.get(second["previous"]).json()
    capped = client.get("/api/v1/events/", {"page_size": 100000})

    assert [e["seq"] for e in back["results"]] == [e["seq"] for e in first["results"]]
    assert second["results"][0]["seq"] == first["results"][-1]["seq"] + 1
    assert capped.status_code == 200


@pytest.mark.parametrize(
    "url",
    ["/api/v1/agents/?name=a%00b", "/api/v1/events/?kind=%00", "/api/v1/content/runs/a%00b/"],
)
def test_a_nul_in_a_parameter_or_path_is_named_as_such(api_as, tenant, url):
    response = api_as(tenant).get(url)

    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"problem": "nul_character"}


@pytest.mark.parametrize(
    "url",
    [
        "/ledger/?before_seq=abc",
        "/ledger/?before_seq=-1",
        "/ledger/?before_seq=99999999999999999999999",
        "/trust/?page=abc",
        "/trust/?page=99999999999999999999",
        "/trust/review/?waiting=-1",
    ],
)
def test_a_tampered_page_cursor_is_never_a_500(tenant, reviewer_client, url):
    # The pages' own cursors: the ledger's before_seq (a form field) and Django's Paginator.
    response = reviewer_client.get(url)

    assert response.status_code in (200, 400)


def test_a_process_first_requests_at_once_all_get_the_documented_parameters(monkeypatch):
    """The schema is made on a process's first request; several requests at once made it at
    once, and drf-spectacular's extension loading is not thread-safe: one thread set a target it
    could not import to None while another still read it as a name (AttributeError, a 500)."""
    import sys
    import threading

    from drf_spectacular.extensions import OpenApiSerializerFieldExtension

    from config import schema

    # An optional extension for a package that is not installed, as a fresh process has it
    # (drf-spectacular ships several); the registry is restored afterwards.
    monkeypatch.setattr(
        OpenApiSerializerFieldExtension,
        "_registry",
        list(OpenApiSerializerFieldExtension._registry),
    )

    class AbsentPackageField(OpenApiSerializerFieldExtension):
        target_class = "absent_package_for_this_test.fields.Field"
        optional = True

    schema._documented_operations_made.cache_clear()
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often, as a busy process's do
    start = threading.Barrier(6)
    answers: list[Any] = []

    def first_request() -> None:
        start.wait()
        try:
            answers.append(operation_query_parameters("GET", "/api/v1/memories/"))
        except Exception as exc:  # the race's AttributeError, were it back
            answers.append(exc)

    try:
        threads = [threading.Thread(target=first_request) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch_interval)
    assert AbsentPackageField.target_class is None
    assert len(answers) == 6
    assert all(isinstance(answer, frozenset) and "page_size" in answer for answer in answers)
