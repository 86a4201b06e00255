"""The isolation matrix: every API endpoint against another tenant's ids, revoked keys, missing
keys and keys of too low a role.

ENDPOINTS must list every operation in the OpenAPI schema (a test checks it), so an endpoint added
later cannot skip these checks.
"""

from __future__ import annotations

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from ledger.models import Agent, ApiKey, Event, Role
from ledger.scoping import TenantScopedViewSet
from ledger.services import api_key_revoke
from memory.episodic.services import MemoryDraft, memories_store
from memory.knowledge.services import DocumentFields, knowledge_document_create
from memory.models import KnowledgeDocument, Memory
from tests.endpoints import Endpoint
from tests.ledger.test_chain import append_n
from tests.memory.isolation_content import (
    CONTENT_ENDPOINTS,
    content_snapshot,
    content_victims,
)
from tests.memory.private_reflection import (
    RUN,
    SECRET,
    SECRET_LINE,
    SECRET_QUERY,
    private_reflection_made,
)
from tests.trust.isolation_core import TRUST_CORE_ENDPOINTS, trust_core_snapshot, trust_core_victims
from tests.trust.isolation_governance import (
    GOVERNANCE_ENDPOINTS,
    governance_snapshot,
    governance_victims,
)

pytestmark = pytest.mark.django_db


SPOKEN = {"kind": "agent.spoke", "actor": "system", "payload": {"text": "hello"}}
ENDPOINTS = [
    Endpoint("get", "/api/v1/agents/", Role.AGENT),
    Endpoint("post", "/api/v1/agents/", Role.ADMIN, {"name": "NewAgent"}),
    Endpoint("get", "/api/v1/agents/{id}/", Role.AGENT, target="agent"),
    Endpoint("put", "/api/v1/agents/{id}/", Role.ADMIN, {"name": "Renamed"}, target="agent"),
    Endpoint("patch", "/api/v1/agents/{id}/", Role.ADMIN, {"model": "m2"}, target="agent"),
    Endpoint("delete", "/api/v1/agents/{id}/", Role.ADMIN, target="agent"),
    Endpoint("get", "/api/v1/api-keys/", Role.ADMIN),
    Endpoint("post", "/api/v1/api-keys/", Role.ADMIN, {"name": "k", "role": "agent"}),
    Endpoint("get", "/api/v1/api-keys/{id}/", Role.ADMIN, target="api_key"),
    Endpoint("post", "/api/v1/api-keys/{id}/revoke/", Role.ADMIN, target="api_key"),
    Endpoint("get", "/api/v1/events/", Role.AGENT),
    Endpoint("post", "/api/v1/events/", Role.AGENT, SPOKEN),
    Endpoint("post", "/api/v1/events/batch/", Role.AGENT, {"events": [SPOKEN, SPOKEN]}),
    Endpoint("get", "/api/v1/events/{seq}/", Role.AGENT, target="event"),
    Endpoint("get", "/api/v1/events/verify/", Role.REVIEWER),
    Endpoint(
        "post", "/api/v1/events/verify-receipt/", Role.AGENT, {"receipt": f"acme:1:{'0' * 64}"}
    ),
    Endpoint("get", "/api/v1/recall-settings/", Role.AGENT),
    Endpoint("patch", "/api/v1/recall-settings/", Role.ADMIN, {"top_k": 3}),
    # Global job status, no tenant data (ledger/jobs_api.py): admins of every tenant see the same.
    Endpoint("get", "/api/v1/jobs/", Role.ADMIN),
    Endpoint("get", "/api/v1/memories/", Role.AGENT),
    Endpoint("post", "/api/v1/memories/", Role.AGENT, {"agent": "Creator1", "content": "hi"}),
    Endpoint(
        "post",
        "/api/v1/memories/batch/",
        Role.AGENT,
        {"agent": "Creator1", "memories": [{"content": "a"}]},
    ),
    Endpoint("get", "/api/v1/memories/{id}/", Role.AGENT, target="memory"),
    Endpoint("patch", "/api/v1/memories/{id}/", Role.AGENT, {"importance": 0.9}, target="memory"),
    Endpoint("delete", "/api/v1/memories/{id}/", Role.AGENT, target="memory"),
    Endpoint("get", "/api/v1/memories/{id}/history/", Role.AGENT, target="memory"),
    Endpoint(
        "post", "/api/v1/memories/{id}/supersede/", Role.AGENT, {"supersedes": [1]}, target="memory"
    ),
    Endpoint(
        "post",
        "/api/v1/memories/bulk-update/",
        Role.AGENT,
        {"agent": "Creator1", "ids": [1], "dry_run": True, "changes": {"importance": 0.5}},
    ),
    Endpoint(
        "post",
        "/api/v1/memories/bulk-delete/",
        Role.AGENT,
        {"agent": "Creator1", "ids": [1], "dry_run": True},
    ),
    Endpoint(
        "post",
        "/api/v1/memories/search/",
        Role.AGENT,
        {"agent": "Creator1", "query": "private note"},
    ),
    Endpoint("post", "/api/v1/recall/", Role.AGENT, {"agent": "Creator1", "run_id": "r"}),
    Endpoint("post", "/api/v1/reflections/", Role.AGENT, {"agent": "Creator1", "run_id": "r"}),
    Endpoint("get", "/api/v1/kb/documents/", Role.AGENT),
    Endpoint("post", "/api/v1/kb/documents/", Role.REVIEWER, {"title": "T", "body": "B"}),
    Endpoint("get", "/api/v1/kb/documents/{id}/", Role.AGENT, target="kb_document"),
    Endpoint(
        "patch", "/api/v1/kb/documents/{id}/", Role.REVIEWER, {"title": "X"}, target="kb_document"
    ),
    Endpoint("delete", "/api/v1/kb/documents/{id}/", Role.ADMIN, target="kb_document"),
    Endpoint("post", "/api/v1/kb/documents/{id}/publish/", Role.REVIEWER, target="kb_document"),
    Endpoint("post", "/api/v1/kb/documents/{id}/unpublish/", Role.REVIEWER, target="kb_document"),
    Endpoint("get", "/api/v1/kb/documents/{id}/chunks/", Role.AGENT, target="kb_document"),
    Endpoint("post", "/api/v1/kb/search/", Role.AGENT, {"query": "handbook"}),
    Endpoint(
        "post",
        "/api/v1/context/",
        Role.AGENT,
        {"agent": "Creator1", "token_budget": 2000, "query": "private note"},
    ),
    *TRUST_CORE_ENDPOINTS,
    *GOVERNANCE_ENDPOINTS,
    *CONTENT_ENDPOINTS,
]
# Endpoints that name an agent in the body rather than the path.
AGENT_IN_BODY = [e for e in ENDPOINTS if e.body and e.body.get("agent") == "Creator1"]
DETAIL_ENDPOINTS = [endpoint for endpoint in ENDPOINTS if endpoint.target]
ROLE_LIMITED = [
    (endpoint, role)
    for endpoint in ENDPOINTS
    for role in Role.values
    if not Role.allows(role, endpoint.role)
]


def call(client: APIClient, endpoint: Endpoint, ids: dict[str, int]):
    return getattr(client, endpoint.method)(endpoint.url(ids), endpoint.body, format="json")


def state_snapshot() -> tuple:
    return (
        list(Agent.objects.order_by("id").values_list("id", "name", "model")),
        list(ApiKey.objects.order_by("id").values_list("id", "revoked_at"))
        + list(Memory.objects.order_by("id").values_list("id", "content", "importance"))
        + list(KnowledgeDocument.objects.order_by("id").values_list("id", "title", "published_at"))
        + trust_core_snapshot()
        + governance_snapshot()
        + content_snapshot(),
        Event.objects.count(),
    )


@pytest.fixture
def victim(tenant, make_agent, make_key) -> dict[str, int]:
    """Objects of tenant "acme" that other callers try to reach."""
    agent = make_agent(tenant, name="Creator1")
    api_key, _ = make_key(tenant, role=Role.AGENT)
    # Event seqs are numbered per tenant, so the target must lie beyond the intruder's own chain.
    events = append_n(tenant, 30)
    memory = memories_store(agent=agent, drafts=[MemoryDraft(content="private note")], actor="x")[0]
    document = knowledge_document_create(
        tenant=tenant,
        fields=DocumentFields(title="Handbook", body="The handbook of acme."),
        actor="x",
        publish=True,
    )
    return {
        "agent": agent.pk,
        "api_key": api_key.pk,
        "event": events[-1].seq,
        "memory": memory.pk,
        "kb_document": document.pk,
        **trust_core_victims(tenant=tenant, agent=agent),
        **governance_victims(tenant=tenant, agent=agent),
        **content_victims(tenant=tenant, agent=agent),
    }


def test_every_operation_in_the_schema_is_in_the_matrix():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    documented = {
        f"{method} {path}"
        for path, operations in schema["paths"].items()
        if path.startswith("/api/v1/")
        for method in operations
    }

    listed = {str(endpoint) for endpoint in ENDPOINTS}

    assert documented == listed


def test_every_api_view_is_tenant_scoped():
    def views(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from views(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern), pattern.callback

    api_views = [(path, cb) for path, cb in views(get_resolver().url_patterns) if "api/v1/" in path]

    assert api_views
    for path, callback in api_views:
        assert issubclass(callback.cls, TenantScopedViewSet), path


@pytest.mark.parametrize("endpoint", DETAIL_ENDPOINTS, ids=str)
def test_another_tenants_ids_are_not_found(endpoint, victim, other_tenant, api_as):
    intruder = api_as(other_tenant, role=Role.ADMIN)
    before = state_snapshot()

    response = call(intruder, endpoint, victim)

    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": "not_found", "message": "No such object.", "details": {}}
    }
    assert state_snapshot()[:2] == before[:2]


@pytest.mark.parametrize("endpoint", DETAIL_ENDPOINTS, ids=str)
def test_a_foreign_id_answers_exactly_like_a_missing_one(endpoint, victim, other_tenant, api_as):
    intruder = api_as(other_tenant, role=Role.ADMIN)

    foreign = call(intruder, endpoint, victim)
    missing = call(intruder, endpoint, {key: 10**9 for key in victim})

    assert (foreign.status_code, foreign.json()) == (missing.status_code, missing.json())


def test_another_tenants_rows_are_not_listed(victim, other_tenant, api_as):
    intruder = api_as(other_tenant, role=Role.ADMIN)

    agents = intruder.get("/api/v1/agents/").json()["results"]
    keys = intruder.get("/api/v1/api-keys/").json()["results"]

    assert agents == []
    assert {key["id"] for key in keys}.isdisjoint({victim["api_key"]})


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=str)
def test_a_revoked_key_is_refused(endpoint, tenant, victim, make_key):
    api_key, raw_key = make_key(tenant, role=Role.ADMIN)
    api_key_revoke(api_key=api_key, actor="system")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    before = state_snapshot()

    response = call(client, endpoint, victim)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert state_snapshot() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=str)
def test_an_anonymous_caller_is_refused(endpoint, victim):
    before = state_snapshot()

    response = call(APIClient(), endpoint, victim)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert state_snapshot() == before


@pytest.mark.parametrize(("endpoint", "role"), ROLE_LIMITED, ids=lambda v: str(v))
def test_a_key_of_too_low_a_role_is_forbidden(endpoint, role, tenant, victim, api_as):
    client = api_as(tenant, role=role)
    before = state_snapshot()

    response = call(client, endpoint, victim)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert state_snapshot()[:2] == before[:2]


@pytest.mark.parametrize("endpoint", AGENT_IN_BODY, ids=str)
def test_another_tenants_agent_named_in_a_body_is_not_found(endpoint, victim, other_tenant, api_as):
    intruder = api_as(other_tenant, role=Role.ADMIN)

    response = call(intruder, endpoint, victim)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


# Agent-scoped keys against another agent's objects, ids, bodies and query parameters:
# tests/ledger/test_agent_scoped_keys.py.


MEMORY_DETAIL = [e for e in DETAIL_ENDPOINTS if e.target == "memory"]


@pytest.mark.parametrize("endpoint", MEMORY_DETAIL, ids=str)
def test_an_agent_key_never_reaches_another_agents_memory(
    endpoint, tenant, victim, make_agent, api_as
):
    other_agent = make_agent(tenant, name="Reviewer1")
    client = api_as(tenant, role=Role.AGENT, agent=other_agent)

    response = call(client, endpoint, victim)

    assert response.status_code == 404
    assert Memory.objects.filter(pk=victim["memory"]).exists()


def test_an_agent_key_lists_only_its_own_memories(tenant, victim, make_agent, api_as):
    other_agent = make_agent(tenant, name="Reviewer1")
    memories_store(agent=other_agent, drafts=[MemoryDraft(content="mine")], actor="x")
    client = api_as(tenant, role=Role.AGENT, agent=other_agent)

    listed = client.get("/api/v1/memories/").json()["results"]

    assert [m["content"] for m in listed] == ["mine"]


def test_search_never_returns_another_agents_memories_through_any_source(
    tenant, victim, make_agent, api_as
):
    other_agent = make_agent(tenant, name="Reviewer1")
    client = api_as(tenant, role=Role.AGENT, agent=other_agent)

    response = client.post(
        "/api/v1/memories/search/", {"query": "private note", "top_k": 50}, format="json"
    )

    assert response.status_code == 200
    assert all("private note" not in hit["content"] for hit in response.json()["results"])


def test_kb_search_never_returns_another_tenants_knowledge(victim, other_tenant, api_as):
    intruder = api_as(other_tenant, role=Role.ADMIN)

    found = intruder.post("/api/v1/kb/search/", {"query": "handbook acme"}, format="json")
    listed = intruder.get("/api/v1/kb/documents/").json()["results"]

    assert found.status_code == 200
    assert found.json()["results"] == []
    assert listed == []


def test_context_never_holds_another_agents_memories(tenant, victim, make_agent, api_as):
    other_agent = make_agent(tenant, name="Reviewer1")
    client = api_as(tenant, role=Role.AGENT, agent=other_agent)

    response = client.post(
        "/api/v1/context/", {"token_budget": 5000, "query": "private note"}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["memories"] == []
    assert all("private note" not in m["content"] for m in response.json()["messages"])


# --- Private kinds, and what the service makes of them (issue 18, item 5) ----------------------

# Every read through which an agent's key meets ledger text (the MCP tools call these too).
LEDGER_READS = [
    Endpoint("get", "/api/v1/events/", Role.AGENT),
    Endpoint("get", "/api/v1/events/?kind=agent.reflected", Role.AGENT),
    Endpoint("get", "/api/v1/events/{seq}/", Role.AGENT, target="reflection"),
    Endpoint("post", "/api/v1/recall/", Role.AGENT, {"run_id": RUN, "mode": "episodic"}),
    Endpoint(
        "post", "/api/v1/recall/", Role.AGENT, {"run_id": RUN, "mode": "salience", "query": SECRET}
    ),
    Endpoint(
        "post",
        "/api/v1/memories/search/",
        Role.AGENT,
        {"query": SECRET_QUERY, "top_k": 50, "threshold": -1},
    ),
    Endpoint("post", "/api/v1/context/", Role.AGENT, {"token_budget": 5000, "query": SECRET_QUERY}),
]


@pytest.fixture
def private_reflection(tenant, make_agent) -> dict[str, int]:
    return {"reflection": private_reflection_made(make_agent(tenant, name="Alice")).seq}


@pytest.mark.parametrize("endpoint", LEDGER_READS, ids=str)
def test_a_reflection_of_private_thoughts_reaches_no_other_agent(
    endpoint, tenant, private_reflection, make_agent, api_as
):
    bob = api_as(tenant, role=Role.AGENT, agent=make_agent(tenant, name="Bob"))

    response = call(bob, endpoint, private_reflection)

    assert response.status_code in (200, 404)
    assert SECRET_LINE not in response.content.decode()


@pytest.mark.parametrize("endpoint", LEDGER_READS, ids=str)
def test_its_own_agent_still_reads_its_private_reflection(
    endpoint, tenant, private_reflection, api_as
):
    alice = api_as(tenant, role=Role.AGENT, agent=Agent.objects.get(name="Alice"))

    response = call(alice, endpoint, private_reflection)

    assert response.status_code == 200
    assert SECRET_LINE in response.content.decode()
    assert "agent.reflected" in response.content.decode()


def test_a_tenant_wide_key_reads_private_reflections_as_it_reads_private_thoughts(
    tenant, private_reflection, api_as
):
    listed = api_as(tenant, role=Role.REVIEWER).get("/api/v1/events/").json()["results"]

    kinds = {event["kind"] for event in listed if SECRET_LINE in str(event["payload"])}
    assert kinds == {"agent.thought", "agent.reflected"}
