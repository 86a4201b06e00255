"""An agent-scoped key never acts outside its agent, whatever its role (issue 18).

Every API operation is classified here as tenant-wide (an agent-scoped key is refused with 403
``agent_scoped_key``, even on its own agent's objects, and nothing is written) or agent-bound (the
key reaches its own agent's rows and what the tenant shares with every agent, never another
agent's). The two sets must cover the isolation matrix's ENDPOINTS, which must cover the OpenAPI
schema, so a new operation fails here until it is classified, and a classification the views do
not follow fails its behaviour test. The views declare theirs in ``agent_bound_actions``
(``ledger.permissions``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction

from config.api import ApiError
from ledger.models import Agent, ApiKey, Event, RecallSettings, Role
from ledger.services import api_key_create, event_append
from memory.content.selectors import content_items_visible
from memory.content.services import content_snapshot_create
from memory.models import ContentAttachment, ContentItem, ContentSnapshot, KnowledgeDocument, Memory
from tests.endpoints import Endpoint
from tests.ledger.test_isolation import (  # noqa: F401 (victim is a fixture)
    ENDPOINTS,
    call,
    state_snapshot,
    victim,
)
from trust.models import Dissent, GamingFlag, Override, RubricProposal, RubricVersion

pytestmark = pytest.mark.django_db

TENANT_WIDE = {
    "post /api/v1/agents/",
    "put /api/v1/agents/{id}/",
    "patch /api/v1/agents/{id}/",
    "delete /api/v1/agents/{id}/",
    "get /api/v1/api-keys/",
    "post /api/v1/api-keys/",
    "get /api/v1/api-keys/{id}/",
    "post /api/v1/api-keys/{id}/revoke/",
    "get /api/v1/events/verify/",
    "patch /api/v1/recall-settings/",
    "get /api/v1/jobs/",
    "post /api/v1/kb/documents/",
    "patch /api/v1/kb/documents/{id}/",
    "delete /api/v1/kb/documents/{id}/",
    "post /api/v1/kb/documents/{id}/publish/",
    "post /api/v1/kb/documents/{id}/unpublish/",
    "post /api/v1/rounds/",
    "post /api/v1/rounds/{id}/finalize/",
    "post /api/v1/rounds/{id}/versions/",
    "post /api/v1/dissents/{id}/impact/",
    "post /api/v1/overrides/",
    "post /api/v1/overrides/{id}/revert/",
    "post /api/v1/overrides/{id}/revert/withdraw/",
    "post /api/v1/trust/import/",
    "get /api/v1/export/",
    "post /api/v1/trust/recompute/",
    "post /api/v1/trust/devils-advocate/",
    "get /api/v1/flags/",
    "get /api/v1/flags/{id}/",
    "post /api/v1/flags/{id}/review/",
    "post /api/v1/rubric/",
    "get /api/v1/rubric-proposals/",
    "get /api/v1/rubric-proposals/{id}/",
    "post /api/v1/rubric-proposals/",
    "post /api/v1/rubric-proposals/{id}/accept/",
    "post /api/v1/rubric-proposals/{id}/reject/",
}
AGENT_BOUND = {
    "get /api/v1/agents/",
    "get /api/v1/agents/{id}/",
    "get /api/v1/events/",
    "post /api/v1/events/",
    # Whether history the caller was handed still holds: no other event's contents.
    "post /api/v1/events/verify-receipt/",
    "post /api/v1/events/batch/",
    "get /api/v1/events/{seq}/",
    "get /api/v1/recall-settings/",
    "get /api/v1/memories/",
    "post /api/v1/memories/",
    "post /api/v1/memories/batch/",
    "get /api/v1/memories/{id}/",
    "patch /api/v1/memories/{id}/",
    "delete /api/v1/memories/{id}/",
    "get /api/v1/memories/{id}/history/",
    "post /api/v1/memories/{id}/supersede/",
    "post /api/v1/memories/bulk-update/",
    "post /api/v1/memories/bulk-delete/",
    "post /api/v1/memories/search/",
    "post /api/v1/recall/",
    "post /api/v1/reflections/",
    "get /api/v1/kb/documents/",
    "get /api/v1/kb/documents/{id}/",
    "get /api/v1/kb/documents/{id}/chunks/",
    "post /api/v1/kb/search/",
    "post /api/v1/context/",
    "get /api/v1/rounds/",
    "get /api/v1/rounds/{id}/",
    "get /api/v1/dissents/",
    "post /api/v1/dissents/",
    "get /api/v1/dissents/{id}/",
    "get /api/v1/overrides/",
    "get /api/v1/overrides/{id}/",
    "get /api/v1/trust/",
    "get /api/v1/trust/{id}/",
    "get /api/v1/trust/{id}/export/",
    "get /api/v1/trust/metrics/",
    "get /api/v1/rubric/",
    "get /api/v1/rubric/versions/",
    "get /api/v1/rubric/versions/{number}/",
    "get /api/v1/content/items/",
    "post /api/v1/content/items/",
    "get /api/v1/content/items/{id}/",
    "post /api/v1/content/items/clear/",
    "post /api/v1/content/action-results/",
    "get /api/v1/content/runs/{id}/",
    "post /api/v1/content/snapshots/",
    "get /api/v1/content/snapshots/{id}/",
    "post /api/v1/content/snapshots/{id}/restore/",
}
# What the victim agent "Creator1" owns: another agent's key must find none of it.
OWNED_TARGETS = {
    "agent",
    "memory",
    "dissent",
    "override",
    "content_item",
    "content_run",
}
# (The victim's snapshot names no grantee: its owner shared it with every agent of the tenant,
# docs/content-store.md. A snapshot granted to one agent is tested below.)
# Text only the victim may read: none of it may appear in an answer to another agent's key.
SECRETS = ("private note", "a private critique", "secret page", "secret thought")

TENANT_WIDE_ENDPOINTS = [e for e in ENDPOINTS if str(e) in TENANT_WIDE]
AGENT_BOUND_ENDPOINTS = [e for e in ENDPOINTS if str(e) in AGENT_BOUND]


def test_every_operation_is_classified_once():
    listed = {str(endpoint) for endpoint in ENDPOINTS}

    assert TENANT_WIDE.isdisjoint(AGENT_BOUND)
    assert listed == TENANT_WIDE | AGENT_BOUND


@pytest.fixture
def planted(victim, tenant) -> dict[str, Any]:  # noqa: F811 (the fixture, by its name)
    """The isolation matrix's victim, plus a private thought of its agent in the ledger."""
    event_append(
        tenant=tenant, kind="agent.thought", actor="Creator1", payload={"text": "secret thought"}
    )
    return victim


def scoped_client(api_as, tenant, agent_name: str):
    # Reviewer: the highest role an agent-scoped key can hold.
    agent = Agent.objects.get(tenant=tenant, name=agent_name)
    return api_as(tenant, role=Role.REVIEWER, agent=agent)


def victims_rows(victim_agent: Agent) -> list[Any]:
    """Every row another agent's key must leave as it was: the victim agent's, and the tenant's."""
    mine: dict[str, Any] = {"agent": victim_agent}
    return [
        *Agent.objects.filter(pk=victim_agent.pk).values_list(),
        *Memory.objects.filter(**mine).order_by("id").values_list(),
        *Dissent.objects.filter(**mine).order_by("id").values_list("id", "impact", "text"),
        *Override.objects.filter(**mine).order_by("id").values_list("id", "regret", "reverted_at"),
        *ContentItem.objects.filter(**mine).order_by("id").values_list("id", "cleared_at"),
        *ContentSnapshot.objects.filter(owner=victim_agent).order_by("id").values_list("id"),
        *ContentAttachment.objects.filter(**mine).order_by("id").values_list("id"),
        *GamingFlag.objects.order_by("id").values_list("id", "status"),
        *KnowledgeDocument.objects.order_by("id").values_list("id", "title", "published_at"),
        *RubricVersion.objects.order_by("id").values_list("id"),
        *RubricProposal.objects.order_by("id").values_list("id", "status"),
        *RecallSettings.objects.order_by("id").values_list(),
        *ApiKey.objects.order_by("id").values_list("id", "role", "agent", "revoked_at"),
        *Agent.objects.order_by("id").values_list("id", "name"),
    ]


@pytest.mark.parametrize("endpoint", TENANT_WIDE_ENDPOINTS, ids=str)
def test_a_tenant_wide_operation_refuses_an_agent_scoped_key(endpoint, tenant, planted, api_as):
    # Scoped to the very agent whose objects are the targets: not even its own agent's.
    client = scoped_client(api_as, tenant, "Creator1")
    before = state_snapshot()

    response = call(client, endpoint, planted)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "agent_scoped_key"
    assert state_snapshot() == before


def expected_refusal(endpoint: Endpoint) -> bool:
    names_the_victim = bool(endpoint.body) and endpoint.body.get("agent") == "Creator1"
    return endpoint.target in OWNED_TARGETS or names_the_victim


@pytest.mark.parametrize("endpoint", AGENT_BOUND_ENDPOINTS, ids=str)
def test_an_agent_bound_operation_never_reaches_another_agent(
    endpoint, tenant, planted, make_agent, api_as
):
    make_agent(tenant, name="Reviewer1")
    client = scoped_client(api_as, tenant, "Reviewer1")
    victim_agent = Agent.objects.get(tenant=tenant, name="Creator1")
    before, last_seq = victims_rows(victim_agent), Event.objects.order_by("-seq").first().seq

    response = call(client, endpoint, planted)

    body = response.content.decode()
    assert response.status_code < 500
    if expected_refusal(endpoint):
        assert response.status_code == 404
    if response.status_code >= 400:
        assert response.json()["error"]["code"] != "agent_scoped_key", "declared agent-bound?"
    assert not [secret for secret in SECRETS if secret in body]
    assert victims_rows(victim_agent) == before
    # Whatever it wrote, it wrote as itself.
    appended = Event.objects.filter(tenant=tenant, seq__gt=last_seq)
    assert set(appended.values_list("actor", flat=True)) <= {"Reviewer1"}


# Query parameters that name another agent or its objects on agent-bound reads.
QUERY_PROBES = [
    "/api/v1/agents/?name=Creator1",
    "/api/v1/events/?actor=Creator1&kind=agent.thought",
    "/api/v1/memories/?agent=Creator1",
    "/api/v1/dissents/?agent=Creator1",
    "/api/v1/overrides/?agent=Creator1",
    "/api/v1/content/items/?agent=Creator1",
    "/api/v1/content/items/?agent=Creator1&scope=agent",
    "/api/v1/content/items/?run_id=victim-run",
    "/api/v1/trust/metrics/?agent=Creator1",
]


@pytest.mark.parametrize("path", QUERY_PROBES)
def test_a_query_parameter_never_reaches_another_agent(path, tenant, planted, make_agent, api_as):
    make_agent(tenant, name="Reviewer1")
    client = scoped_client(api_as, tenant, "Reviewer1")

    response = client.get(path)

    assert response.status_code < 500
    if response.status_code == 200:
        body = response.json()
        listed = body if isinstance(body, list) else body.get("results")
        if listed is not None:
            assert listed == []
    assert not [secret for secret in SECRETS if secret in response.content.decode()]


def test_a_snapshot_granted_to_another_agent_reaches_no_one_else(
    tenant, planted, make_agent, api_as
):
    owner = Agent.objects.get(tenant=tenant, name="Creator1")
    granted = content_snapshot_create(
        owner=owner,
        actor="x",
        items=content_items_visible(items=ContentItem.objects.filter(tenant=tenant), agent=owner),
        item_keys=[planted["content_item"]],
        run_id=None,
        grantee=make_agent(tenant, name="Grantee1"),
    )
    make_agent(tenant, name="Reviewer1")
    client = scoped_client(api_as, tenant, "Reviewer1")
    item = planted["content_item"]

    read = client.get(f"/api/v1/content/items/{item}/", {"snapshot": granted.key})
    shown = client.get(f"/api/v1/content/snapshots/{granted.key}/")
    restored = client.post(
        f"/api/v1/content/snapshots/{granted.key}/restore/", {"run_id": "r"}, format="json"
    )

    assert (read.status_code, shown.status_code, restored.status_code) == (404, 404, 404)
    assert not ContentAttachment.objects.filter(agent__name="Reviewer1").exists()


def test_an_agent_scoped_key_lists_only_its_own_agent(tenant, planted, make_agent, api_as):
    own = make_agent(tenant, name="Reviewer1")
    client = scoped_client(api_as, tenant, "Reviewer1")

    agents = client.get("/api/v1/agents/").json()["results"]
    trust = client.get("/api/v1/trust/").json()["results"]
    other = client.get(f"/api/v1/agents/{planted['agent']}/")

    assert [agent["id"] for agent in agents] == [own.pk]
    assert [agent["id"] for agent in trust] == [own.pk]
    assert other.status_code == 404


# --- The reported instances ------------------------------------------------------------------


def test_an_agent_scoped_key_cannot_delete_another_agent(tenant, make_agent, api_as):
    alpha, beta = make_agent(tenant, name="alpha"), make_agent(tenant, name="beta")
    client = api_as(tenant, role=Role.REVIEWER, agent=alpha)

    response = client.delete(f"/api/v1/agents/{beta.pk}/")

    assert (response.status_code, response.json()["error"]["code"]) == (403, "agent_scoped_key")
    assert Agent.objects.filter(pk=beta.pk).exists()


def test_an_agent_scoped_key_cannot_mint_a_key_nor_import_nor_change_the_rubric(
    tenant, make_agent, api_as
):
    alpha = make_agent(tenant, name="alpha")
    make_agent(tenant, name="beta")
    client = api_as(tenant, role=Role.REVIEWER, agent=alpha)
    keys, events = ApiKey.objects.count(), Event.objects.count()

    minted = client.post("/api/v1/api-keys/", {"name": "k", "role": "admin"}, format="json")
    imported = client.post("/api/v1/trust/import/", {"agent_name": "beta"}, format="json")
    rubric = client.post("/api/v1/rubric/", {"criteria": [{"name": "Mine"}]}, format="json")

    for response in (minted, imported, rubric):
        assert (response.status_code, response.json()["error"]["code"]) == (
            403,
            "agent_scoped_key",
        )
    assert (ApiKey.objects.count(), Event.objects.count()) == (keys, events)


# --- Admin keys are always tenant-wide ---------------------------------------------------------


def test_the_service_refuses_an_agent_scoped_admin_key(tenant, make_agent):
    alpha = make_agent(tenant, name="alpha")
    keys, events = ApiKey.objects.count(), Event.objects.count()

    with pytest.raises(ApiError) as refused:
        api_key_create(tenant=tenant, name="k", role=Role.ADMIN, agent=alpha, actor="system")

    assert refused.value.error_code == "agent_scoped_admin_key"
    assert refused.value.status_code == 400
    assert (ApiKey.objects.count(), Event.objects.count()) == (keys, events)


def test_the_api_refuses_an_agent_scoped_admin_key(tenant, make_agent, api_as):
    make_agent(tenant, name="alpha")
    admin = api_as(tenant, role=Role.ADMIN)
    keys = ApiKey.objects.count()

    response = admin.post(
        "/api/v1/api-keys/", {"name": "k", "role": "admin", "agent": "alpha"}, format="json"
    )
    reviewer = admin.post(
        "/api/v1/api-keys/", {"name": "k", "role": "reviewer", "agent": "alpha"}, format="json"
    )

    assert (response.status_code, response.json()["error"]["code"]) == (
        400,
        "agent_scoped_admin_key",
    )
    assert reviewer.status_code == 201
    assert ApiKey.objects.count() == keys + 1


def test_the_database_refuses_an_agent_scoped_admin_key(tenant, make_agent, make_key):
    alpha = make_agent(tenant, name="alpha")
    api_key, _ = make_key(tenant, role=Role.REVIEWER, agent=alpha)

    with pytest.raises(IntegrityError), transaction.atomic():
        ApiKey.objects.filter(pk=api_key.pk).update(role=Role.ADMIN)


def test_the_django_admin_refuses_an_admin_role_on_an_agent_scoped_key(
    tenant, make_agent, make_key, admin_client
):
    alpha = make_agent(tenant, name="alpha")
    api_key, _ = make_key(tenant, role=Role.REVIEWER, agent=alpha)

    response = admin_client.post(
        f"/admin/ledger/apikey/{api_key.pk}/change/",
        {"name": api_key.name, "role": Role.ADMIN, "revoked_at_0": "", "revoked_at_1": ""},
    )

    assert response.status_code == 200  # the form again, with its error
    assert "always tenant-wide" in response.content.decode()
    api_key.refresh_from_db()
    assert api_key.role == Role.REVIEWER
