"""The OpenAPI schema as code generators read it, and the routes behaving as it says.

The Python and TypeScript clients are generated from this schema (docs/client.md), so names,
headers and status codes here are what their users call and branch on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from config.error_codes import ERROR_CODES
from ledger.models import Role
from tests.openapi_operations import COMPONENTS, OPERATIONS, SCHEMA

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent
POSTS = [op for op in OPERATIONS if op.method == "post"]


def _resource(path: str) -> str:
    return path.removeprefix("/api/v1/").split("/")[0]


def test_operations_are_tagged_and_named_by_resource():
    ids = [op.spec["operationId"] for op in OPERATIONS]

    assert len(ids) == len(set(ids))
    for op in OPERATIONS:
        assert op.spec["tags"] == [_resource(op.path)], op
        operation_id = op.spec["operationId"]
        assert re.fullmatch(r"[a-z][a-z_]*", operation_id), op
        assert operation_id.startswith(_resource(op.path).replace("-", "_")), op
    by_route = {str(op): op.spec["operationId"] for op in OPERATIONS}
    assert by_route["POST /api/v1/memories/"] == "memories_create"
    assert by_route["POST /api/v1/memories/search/"] == "memories_search"
    assert by_route["GET /api/v1/memories/{id}/"] == "memories_get"


def test_no_component_is_named_request_twice():
    assert [name for name in COMPONENTS if name.endswith("RequestRequest")] == []


def test_search_filters_and_weights_are_components_with_fields():
    search = COMPONENTS["SearchRequest"]["properties"]

    weights = search["weights"]["allOf"][0]["$ref"].rsplit("/", 1)[1]
    assert set(COMPONENTS[weights]["properties"]) == {
        "similarity",
        "recency",
        "importance",
        "source_priority",
    }
    filters = search["filters"]
    ref = filters["allOf"][0]["$ref"] if "allOf" in filters else filters["$ref"]
    assert ref == "#/components/schemas/MemoryFilter"


def test_the_filter_component_has_every_field_and_operator_the_parser_takes():
    from memory.search.filters import FIELDS

    properties = COMPONENTS["MemoryFilter"]["properties"]
    assert set(properties) == {*FIELDS, "AND", "OR", "NOT"}
    assert properties["NOT"]["$ref"] == "#/components/schemas/MemoryFilter"
    for name, spec in FIELDS.items():
        if spec.kind == "metadata":
            condition = properties[name]["additionalProperties"]["oneOf"][0]["$ref"]
        else:
            condition = properties[name]["oneOf"][0]["$ref"]
        operators = COMPONENTS[condition.rsplit("/", 1)[1]]["properties"]
        assert set(spec.ops) <= set(operators), name
    listed = {p["name"]: p for p in SCHEMA["paths"]["/api/v1/memories/"]["get"]["parameters"]}
    assert listed["filter"]["schema"]["$ref"] == "#/components/schemas/MemoryFilter"


def test_error_codes_are_an_enum_of_codes_the_code_raises():
    code = SCHEMA["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]
    assert COMPONENTS[code["$ref"].rsplit("/", 1)[1]]["enum"] == list(ERROR_CODES)
    assert len(ERROR_CODES) == len(set(ERROR_CODES))
    # A code listed but raised nowhere is stale: clients would branch on a code never sent.
    sources = "\n".join(
        path.read_text()
        for app in ("config", "ledger", "memory", "trust")
        for path in (ROOT / app).rglob("*.py")
        if path.name != "error_codes.py" and "migrations" not in path.parts
    )
    stale = [c for c in ERROR_CODES if f'"{c}"' not in sources]
    assert stale == []


@pytest.mark.parametrize("op", OPERATIONS, ids=str)
def test_retry_after_is_documented_on_429_and_503(op):
    for status in ("429", "503"):
        assert "Retry-After" in op.spec["responses"][status]["headers"], op


@pytest.mark.parametrize("op", POSTS, ids=str)
def test_every_post_documents_the_idempotency_key_it_honours(op, tenant, api_as):
    """A POST that reads the header refuses an empty one (400 ``invalid_idempotency_key``)
    before doing anything else; the schema must document the header exactly there."""
    documented = any(
        p["in"] == "header" and p["name"] == "Idempotency-Key"
        for p in op.spec.get("parameters", [])
    )

    response = api_as(tenant, role=Role.ADMIN).post(
        op.url(), {}, format="json", HTTP_IDEMPOTENCY_KEY=""
    )

    honoured = response.json()["error"]["code"] == "invalid_idempotency_key"
    assert (documented, honoured) == (True, True), (op, response.status_code, response.json())


def _answers_as_documented(op_path: str, method: str, status_code: int) -> None:
    responses = SCHEMA["paths"][op_path][method]["responses"]
    successes = [s for s in responses if s.startswith("2")]
    assert str(status_code) in successes, f"{method} {op_path} answered {status_code}: {successes}"


def test_successful_posts_answer_the_status_their_schema_documents(tenant, make_agent, api_as):
    make_agent(tenant, name="Skeptic")
    make_agent(tenant, name="Builder")
    admin = api_as(tenant, role=Role.ADMIN)
    calls = [
        ("/api/v1/agents/", {"name": "Planner", "primary_role": "creator"}),
        ("/api/v1/api-keys/", {"name": "planner key", "role": "agent", "agent": "Planner"}),
        ("/api/v1/memories/", {"agent": "Planner", "content": "Deploys go out on Tuesdays."}),
        ("/api/v1/memories/search/", {"agent": "Planner", "query": "when are deploys?"}),
        ("/api/v1/trust/devils-advocate/", {"candidates": ["Skeptic", "Builder"], "seed": 7}),
    ]

    for path, body in calls:
        response = admin.post(path, body, format="json")

        assert response.status_code < 300, (path, response.json())
        _answers_as_documented(path, "post", response.status_code)
