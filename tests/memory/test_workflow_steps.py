"""Workflow steps as design note 001 has them: every agent of the tenant finds completed steps'
outputs in search and recall, whatever the tenant's visible kinds; private kinds stay private."""

from __future__ import annotations

import pytest

from ledger.models import Event, RecallSettings, Role, displayable_text

pytestmark = pytest.mark.django_db

STEP = "workflow.step_completed"
OUTPUT = "Vendor contract with Initech renewed for 24 months at 18,000 EUR a year."


@pytest.fixture
def atlas(tenant, make_agent):
    return make_agent(tenant, name="Atlas")


@pytest.fixture
def binky(tenant, make_agent):
    return make_agent(tenant, name="Binky")


@pytest.fixture
def as_atlas(tenant, atlas, api_as):
    return api_as(tenant, role=Role.AGENT, agent=atlas)


@pytest.fixture
def as_binky(tenant, binky, api_as):
    return api_as(tenant, role=Role.AGENT, agent=binky)


def append(client, kind, payload, run_id="wf-1"):
    response = client.post(
        "/api/v1/events/", {"kind": kind, "run_id": run_id, "payload": payload}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def search(client, query):
    response = client.post("/api/v1/memories/search/", {"query": query, "top_k": 10}, format="json")
    assert response.status_code == 200, response.content
    return [(hit["source"], hit["content"]) for hit in response.json()["results"]]


def test_a_peers_step_output_is_found_by_every_agent_of_the_tenant(as_atlas, as_binky):
    append(as_binky, STEP, {"step": "vendor_review", "output": OUTPUT, "token": "sk-hidden"})
    # A private kind of the same peer, with the same words, stays the peer's.
    append(as_binky, "agent.thought", {"text": "Initech vendor contract private musing"})

    hits = search(as_atlas, "Initech vendor contract")

    assert ("workflow_steps", OUTPUT) in hits
    assert not any("musing" in content or "sk-hidden" in content for _, content in hits)


def test_steps_stay_visible_when_the_tenant_narrows_its_visible_kinds(tenant, as_atlas, as_binky):
    settings = RecallSettings.for_tenant(tenant)
    settings.globally_visible_kinds = []
    settings.save()
    append(as_binky, STEP, {"step": "vendor_review", "output": OUTPUT})
    append(as_binky, "agent.spoke", {"text": "Initech vendor contract spoken aloud"})

    hits = search(as_atlas, "Initech vendor contract")

    assert ("workflow_steps", OUTPUT) in hits
    assert not any("spoken aloud" in content for _, content in hits)


def test_a_peers_step_output_reaches_recall(as_atlas, as_binky):
    append(as_binky, STEP, {"step": "vendor_review", "output": OUTPUT}, run_id="wf-9")
    append(as_binky, "agent.thought", {"text": "A thought of Binky"}, run_id="wf-9")

    response = as_atlas.post(
        "/api/v1/recall/", {"run_id": "wf-9", "mode": "episodic"}, format="json"
    )

    assert response.status_code == 200, response.content
    assert [item["text"] for item in response.json()["items"]] == [OUTPUT]


def test_output_is_indexed_and_shown_for_steps_only(tenant, as_atlas, as_binky):
    append(as_binky, STEP, {"step": "vendor_review", "output": OUTPUT})
    append(as_binky, "tool.called", {"output": "Initech vendor API token sk-123"})

    step = Event.objects.get(tenant=tenant, kind=STEP)
    tool = Event.objects.get(tenant=tenant, kind="tool.called")
    assert {"initech", "renewed", "24"} <= set(step.search_words)
    assert tool.search_words == []
    assert displayable_text(tool.payload, kind=tool.kind) == ""
    # A peer listing the events reads the step's output and nothing else of its payload.
    listed = as_atlas.get("/api/v1/events/", {"kind": STEP}).json()["results"]
    assert [event["payload"] for event in listed] == [{"text": OUTPUT}]


def test_a_step_with_text_shows_its_text_before_its_output(tenant, as_binky):
    append(as_binky, STEP, {"text": "Step done.", "output": OUTPUT})

    step = Event.objects.get(tenant=tenant, kind=STEP)

    assert step.text == "Step done."
    assert "initech" not in step.search_words
