"""Request bodies the service cannot take are a 400 on every endpoint, and write nothing.

Issue 18, item 8: a lone surrogate ("\\ud800") in event payloads, content items and action
results was a 500 (PostgreSQL's text and jsonb refuse it, as they refuse NUL), and JSON nested
about 950 deep was a 500 on any endpoint (RecursionError in the decoder). One parser
(``config.api.JsonParser``) refuses all of them before any view runs, so every operation with a
body in the OpenAPI schema is tried here, not a list kept by hand.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from config.api import MAX_JSON_DEPTH
from ledger.models import Event
from ledger.selectors import event_chain_verify
from tests.openapi_operations import WRITES, Operation, table_rows

pytestmark = pytest.mark.django_db

JSON = "application/json"


def nested(depth: int, leaf: str = "1") -> str:
    """JSON text of arrays ``depth`` deep, written out so no encoder has to recurse."""
    return "[" * depth + leaf + "]" * depth


def first_property(operation: Operation) -> str:
    schema = operation.body_schema or {}
    return next(iter(schema.get("properties", {})), "value")


# JSON texts, each a document the service must refuse: (raw value, error code, problem).
HOSTILE = {
    "lone surrogate": ('"a\\ud800b"', "invalid_value", "lone_surrogate"),
    "lone low surrogate": ('"\\udfff"', "invalid_value", "lone_surrogate"),
    "NUL": ('"a\\u0000b"', "invalid_value", "nul_character"),
    "number past the float range": ("1e999", "invalid_value", "number_out_of_range"),
    "nested 950 deep": (nested(950), "too_deep", None),
    "nested one past the limit": (nested(MAX_JSON_DEPTH), "too_deep", None),
}


@pytest.mark.parametrize("operation", WRITES, ids=str)
@pytest.mark.parametrize("kind", HOSTILE)
def test_a_body_the_database_cannot_take_is_a_400_that_writes_nothing(
    api_as, tenant, make_agent, operation, kind
):
    make_agent(tenant, name="Creator1")
    client = api_as(tenant)
    raw, code, problem = HOSTILE[kind]
    body = f'{{"{first_property(operation)}": {raw}}}'
    before = table_rows()

    response = getattr(client, operation.method)(
        operation.url(), body, content_type="application/json", HTTP_IDEMPOTENCY_KEY=f"k-{kind}"
    )

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == code
    if problem is not None:
        assert error["details"] == {"pointer": f"/{first_property(operation)}", "problem": problem}
    assert table_rows() == before


# The reported ones, each with an otherwise valid body: the surrogate alone decides.
VALID_BODIES = {
    "/api/v1/events/": {"kind": "agent.spoke", "actor": "Creator1", "payload": {"text": "X"}},
    "/api/v1/content/items/": {"agent": "Creator1", "content": {"page": "X"}, "run_id": "r"},
    "/api/v1/content/action-results/": {
        "agent": "Creator1",
        "run_id": "r",
        "action_type": "web.fetch",
        "result": "X",
    },
}


@pytest.mark.parametrize("path", VALID_BODIES)
def test_a_lone_surrogate_where_a_valid_body_has_text_is_refused_and_the_text_is_stored(
    api_as, tenant, make_agent, path
):
    make_agent(tenant, name="Creator1")
    client = api_as(tenant)
    body = json.dumps(VALID_BODIES[path])
    events = Event.objects.count()

    refused = client.post(path, body.replace("X", "\\ud800"), content_type="application/json")
    stored = client.post(
        path, body.replace("X", "ok \\ud83d\\ude00"), content_type="application/json"
    )

    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_value")
    assert stored.status_code == 201, stored.content  # a surrogate pair is a character
    assert Event.objects.count() == events + 1


def test_a_payload_as_deep_as_allowed_is_stored_chained_and_read_back(api_as, tenant):
    # The envelope is level 1 and the payload object level 2: it may hold 62 levels more.
    deep: Any = "bottom"
    for _ in range(MAX_JSON_DEPTH - 2):
        deep = [deep]
    client = api_as(tenant)

    created = client.post(
        "/api/v1/events/",
        {"kind": "agent.spoke", "actor": "system", "payload": {"deep": deep}},
        format="json",
    )
    read = client.get(f"/api/v1/events/{created.json()['seq']}/")

    assert created.status_code == 201, created.content
    assert read.json()["payload"] == {"deep": deep}
    assert event_chain_verify(tenant=tenant).ok


def test_a_body_on_an_operation_that_reads_none_is_still_checked(api_as, tenant, make_key):
    # Parsed before the view runs: a revoke ignores its body, yet 950 levels are refused.
    api_key, _ = make_key(tenant)

    response = api_as(tenant).post(
        f"/api/v1/api-keys/{api_key.pk}/revoke/", nested(950), content_type="application/json"
    )

    assert (response.status_code, response.json()["error"]["code"]) == (400, "too_deep")
    api_key.refresh_from_db()
    assert api_key.revoked_at is None
