from __future__ import annotations

import pytest

from ledger.models import Agent, Event, Role

pytestmark = pytest.mark.django_db


def test_it_creates_and_lists_agents(tenant, api_as):
    client = api_as(tenant, role=Role.ADMIN)

    created = client.post(
        "/api/v1/agents/", {"name": "Creator1", "model": "gpt-x", "primary_role": "creator"},
        format="json",
    )
    listed = client.get("/api/v1/agents/")

    assert created.status_code == 201, created.content
    assert created.json()["trust_score"] == 0.6
    assert [a["name"] for a in listed.json()["results"]] == ["Creator1"]
    assert Event.objects.filter(tenant=tenant, kind="agent.registered").count() == 1
