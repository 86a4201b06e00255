from __future__ import annotations

import pytest
from django.test import override_settings

from ledger.models import Agent, Event, Role

pytestmark = pytest.mark.django_db


def test_it_creates_and_lists_agents(tenant, api_as):
    client = api_as(tenant, role=Role.ADMIN)

    created = client.post(
        "/api/v1/agents/",
        {"name": "Creator1", "model": "gpt-x", "primary_role": "creator"},
        format="json",
    )
    listed = client.get("/api/v1/agents/")

    assert created.status_code == 201, created.content
    assert created.json()["trust_score"] == 0.6
    assert [a["name"] for a in listed.json()["results"]] == ["Creator1"]
    event = Event.objects.get(tenant=tenant, kind="agent.registered")
    assert event.payload["name"] == "Creator1"
    assert event.actor.startswith("api_key:amk_")


def test_it_paginates_agents_with_a_cursor(tenant, make_agent, api_as):
    for index in range(5):
        make_agent(tenant, name=f"Agent{index}")
    client = api_as(tenant, role=Role.AGENT)

    first = client.get("/api/v1/agents/?page_size=2").json()
    second = client.get(first["next"]).json()
    third = client.get(second["next"]).json()

    names = [a["name"] for page in (first, second, third) for a in page["results"]]
    assert names == [f"Agent{index}" for index in range(5)]
    assert third["next"] is None


def test_it_filters_agents_by_name(tenant, make_agent, api_as):
    make_agent(tenant, name="Creator1")
    make_agent(tenant, name="Reviewer1", primary_role="reviewer")

    body = api_as(tenant).get("/api/v1/agents/?primary_role=reviewer").json()

    assert [a["name"] for a in body["results"]] == ["Reviewer1"]


def test_it_updates_and_deletes_an_agent_with_events(tenant, make_agent, api_as):
    agent = make_agent(tenant, name="Creator1")
    client = api_as(tenant, role=Role.ADMIN)

    patched = client.patch(f"/api/v1/agents/{agent.pk}/", {"model": "gpt-y"}, format="json")
    deleted = client.delete(f"/api/v1/agents/{agent.pk}/")

    assert patched.status_code == 200
    assert patched.json()["model"] == "gpt-y"
    assert deleted.status_code == 204
    assert not Agent.objects.filter(pk=agent.pk).exists()
    kinds = list(Event.objects.filter(tenant=tenant).values_list("kind", flat=True))
    assert kinds[-2:] == ["agent.updated", "agent.deleted"]


def test_a_duplicate_agent_name_is_a_conflict_and_writes_nothing(tenant, make_agent, api_as):
    make_agent(tenant, name="Creator1")
    events_before = Event.objects.filter(tenant=tenant).count()

    response = api_as(tenant).post("/api/v1/agents/", {"name": "Creator1"}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "agent_name_taken"
    assert Agent.objects.filter(tenant=tenant).count() == 1
    # The key creation in api_as wrote one event; the refused create wrote none.
    assert Event.objects.filter(tenant=tenant).count() == events_before + 1


def test_renaming_onto_an_existing_name_is_a_conflict(tenant, make_agent, api_as):
    make_agent(tenant, name="Creator1")
    second = make_agent(tenant, name="Creator2")

    response = api_as(tenant).patch(
        f"/api/v1/agents/{second.pk}/", {"name": "Creator1"}, format="json"
    )

    assert response.status_code == 409
    second.refresh_from_db()
    assert second.name == "Creator2"


def test_the_same_agent_name_is_fine_in_another_tenant(tenant, other_tenant, make_agent, api_as):
    make_agent(tenant, name="Creator1")

    response = api_as(other_tenant).post("/api/v1/agents/", {"name": "Creator1"}, format="json")

    assert response.status_code == 201


def test_malformed_json_is_a_400_with_the_error_format(tenant, api_as):
    response = api_as(tenant).post(
        "/api/v1/agents/", data='{"name": ', content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"
    assert Agent.objects.count() == 0


def test_a_missing_field_is_a_validation_error_naming_it(tenant, api_as):
    response = api_as(tenant).post("/api/v1/agents/", {"model": "x"}, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert "name" in error["details"]


def test_a_body_over_the_limit_is_a_413_and_writes_nothing(tenant, api_as):
    client = api_as(tenant)
    with override_settings(API_MAX_BODY_BYTES=1000):
        response = client.post("/api/v1/agents/", {"name": "x" * 2000}, format="json")

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert Agent.objects.count() == 0


def test_an_unknown_api_path_answers_json(tenant, api_as):
    response = api_as(tenant).get("/api/v1/nothing-here/")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
