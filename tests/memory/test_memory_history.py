"""A memory's history with values (issue 22 item 2): before and after of every change, who made
it and why, replayed from the ledger; a deleted memory's content never shows in the clear."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import Event, Role
from memory.episodic.lifecycle import memories_decay, memories_expire
from memory.episodic.services import MemoryDraft, memories_store, memory_update

pytestmark = pytest.mark.django_db


@pytest.fixture
def creator(tenant, make_agent):
    return make_agent(tenant, name="Creator1")


@pytest.fixture
def client(tenant, creator, api_as, no_embedder):
    return api_as(tenant, role=Role.AGENT, agent=creator)


def _store(client, **fields):
    body = {"content": "Invoices go out in EUR.", "importance": 0.5, **fields}
    response = client.post("/api/v1/memories/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _patch(client, memory_id, **body):
    response = client.patch(f"/api/v1/memories/{memory_id}/", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def _history(client, memory_id, **params):
    response = client.get(f"/api/v1/memories/{memory_id}/history/", params)
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_the_history_shows_before_and_after_of_each_field_changed(client):
    memory = _store(client, tags=["billing"], metadata={"source": "call"}, memory_type="decision")
    _patch(client, memory["id"], content="Invoices go out in GBP.", reason="moved to the UK")
    _patch(
        client,
        memory["id"],
        importance=0.9,
        tags=["billing", "uk"],
        metadata={"source": "email"},
    )
    _patch(client, memory["id"], expires_at="2099-01-01T00:00:00Z", memory_type="fact")

    stored, content, values, expiry = _history(client, memory["id"])

    assert stored["kind"] == "memory.stored"
    assert stored["before"] == {}
    assert stored["after"]["content"] == "Invoices go out in EUR."
    assert stored["after"]["tags"] == ["billing"]
    assert stored["after"]["metadata"] == {"source": "call"}
    assert content["changed"] == ["content"]
    assert content["before"] == {"content": "Invoices go out in EUR."}
    assert content["after"] == {"content": "Invoices go out in GBP."}
    assert content["reason"] == "moved to the UK"
    assert values["changed"] == ["metadata", "importance", "tags"]
    assert values["before"] == {
        "metadata": {"source": "call"},
        "importance": 0.5,
        "tags": ["billing"],
    }
    assert values["after"] == {
        "metadata": {"source": "email"},
        "importance": 0.9,
        "tags": ["billing", "uk"],
    }
    assert values["reason"] == ""
    assert expiry["changed"] == ["memory_type", "expires_at"]
    assert expiry["before"]["memory_type"] == stored["after"]["memory_type"]
    assert expiry["before"]["expires_at"] == stored["after"]["expires_at"]
    assert expiry["after"] == {"memory_type": "fact", "expires_at": "2099-01-01T00:00:00Z"}
    assert not any(entry["content_shredded"] for entry in (stored, content, values, expiry))


def test_a_deleted_memory_keeps_its_history_with_its_content_shredded(tenant, client):
    memory = _store(client, content="The door code is 4711.", metadata={"room": "server room"})
    _patch(client, memory["id"], content="The door code is 9924.", importance=0.8)
    deleted = client.delete(
        f"/api/v1/memories/{memory['id']}/", QUERY_STRING="reason=rotated%20codes"
    )

    response = client.get(f"/api/v1/memories/{memory['id']}/history/")

    assert deleted.status_code == 204
    assert response.status_code == 200
    text = response.content.decode()
    assert "4711" not in text
    assert "9924" not in text
    assert "server room" not in text
    stored, updated, removed = response.json()["results"]
    assert all(entry["content_shredded"] for entry in (stored, updated, removed))
    assert stored["after"]["content"] is None
    assert stored["after"]["metadata"] is None
    assert updated["changed"] == ["content", "importance"]
    assert updated["before"] == {"content": None, "importance": 0.5}
    assert updated["after"] == {"content": None, "importance": 0.8}
    assert removed["kind"] == "memory.deleted"
    assert removed["reason"] == "rotated codes"
    assert removed["before"]["content"] is None
    assert removed["before"]["importance"] == 0.8
    assert removed["after"] == {}
    assert "4711" not in json.dumps(list(Event.objects.filter(tenant=tenant).values("payload")))


def test_the_history_names_who_made_each_change(tenant, creator, client, api_as):
    memory = _store(client)
    admin = api_as(tenant, role=Role.ADMIN)
    admin.patch(f"/api/v1/memories/{memory['id']}/", {"importance": 0.05}, format="json")
    (stored_memory,) = memories_store(
        agent=creator, drafts=[MemoryDraft(content="A person's note.")], actor="human:alice"
    )
    memory_update(memory=stored_memory, actor="human:alice", changes={"tags": ["x"]}, reason="tidy")

    memories_decay(now=timezone.now() + timedelta(weeks=60))

    stored, by_key, archived = _history(admin, memory["id"])
    _, by_person = _history(admin, stored_memory.pk)[:2]
    assert (stored["actor"], stored["actor_kind"], stored["job"]) == ("Creator1", "agent", None)
    assert by_key["actor_kind"] == "api_key"
    assert by_key["actor"].startswith("api_key:")
    assert (by_person["actor"], by_person["actor_kind"]) == ("human:alice", "person")
    assert by_person["reason"] == "tidy"
    assert (archived["kind"], archived["actor_kind"], archived["job"]) == (
        "memory.archived",
        "system",
        "decay",
    )
    assert archived["before"] == {"archived_at": None}
    assert archived["after"]["archived_at"] is not None


def test_a_ttl_expiry_is_the_system_job_and_shreds_the_content(client):
    memory = _store(client, content="Temporary token abc123", expires_at="2099-01-01T00:00:00Z")

    memories_expire(now=timezone.now() + timedelta(days=365 * 80))

    history = _history(client, memory["id"])
    assert [entry["kind"] for entry in history] == ["memory.stored", "memory.expired"]
    expired = history[1]
    assert (expired["actor_kind"], expired["job"]) == ("system", "ttl")
    assert expired["after"] == {}
    assert all(entry["content_shredded"] for entry in history)
    assert "abc123" not in json.dumps(history)


def test_a_search_is_not_a_change(tenant, client):
    from memory.episodic.services import memories_mark_retrieved

    memory = _store(client)
    memories_mark_retrieved(tenant=tenant, memory_ids=[memory["id"]], at=timezone.now())

    assert [entry["kind"] for entry in _history(client, memory["id"])] == ["memory.stored"]


def test_the_history_is_paged_in_ledger_order_with_values_from_earlier_pages(client):
    memory = _store(client, importance=0.1)
    for step in range(2, 7):
        _patch(client, memory["id"], importance=step / 10)

    first = client.get(f"/api/v1/memories/{memory['id']}/history/", {"page_size": 4}).json()
    second = client.get(first["next"]).json()

    entries = first["results"] + second["results"]
    assert len(first["results"]) == 4
    assert second["next"] is None
    assert [entry["seq"] for entry in entries] == sorted(entry["seq"] for entry in entries)
    assert second["results"][0]["before"] == {"importance": 0.4}
    assert second["results"][0]["after"] == {"importance": 0.5}
    assert [e["after"]["importance"] for e in entries] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]


def test_an_agent_key_cannot_read_another_agents_history(tenant, client, make_agent, api_as):
    memory = _store(client)
    other = api_as(tenant, role=Role.AGENT, agent=make_agent(tenant, name="Other1"))
    client.delete(f"/api/v1/memories/{memory['id']}/")

    response = other.get(f"/api/v1/memories/{memory['id']}/history/")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_another_tenant_cannot_read_the_history(client, other_tenant, make_agent, api_as):
    memory = _store(client)
    outsider = api_as(other_tenant, role=Role.ADMIN)

    assert outsider.get(f"/api/v1/memories/{memory['id']}/history/").status_code == 404
    assert outsider.get("/api/v1/memories/99999999999999999999999/history/").status_code == 404


def test_a_reason_longer_than_the_limit_is_refused_and_nothing_changes(client):
    memory = _store(client)

    patched = client.patch(
        f"/api/v1/memories/{memory['id']}/", {"importance": 1, "reason": "x" * 501}, format="json"
    )
    deleted = client.delete(f"/api/v1/memories/{memory['id']}/", QUERY_STRING="reason=" + "y" * 501)

    assert patched.status_code == 400
    assert deleted.status_code == 400
    assert deleted.json()["error"]["code"] == "invalid_parameter"
    assert [e["kind"] for e in _history(client, memory["id"])] == ["memory.stored"]


def test_the_reason_does_not_disturb_a_rebuild(tenant, client):
    from ledger.projections import projection_rebuild, registered_projections
    from memory.models import Memory

    memory = _store(client)
    _patch(client, memory["id"], content="Invoices go out in GBP.", reason="moved")
    projection = next(p for p in registered_projections() if p.name == "memories")
    Memory.objects.filter(pk=memory["id"]).update(content="tampered", importance=0.2)

    assert projection_rebuild(projection=projection, tenant=tenant) is False
    restored = Memory.objects.get(pk=memory["id"])
    assert (restored.content, restored.importance) == ("Invoices go out in GBP.", 0.5)


def test_an_imported_archived_memory_starts_archived(creator, client):
    from datetime import UTC, datetime

    from memory.episodic.services import MemoryRecord, memories_import

    when = datetime(2025, 3, 1, tzinfo=UTC)
    (imported,) = memories_import(
        agent=creator,
        records=[
            MemoryRecord(
                content="An old fact.",
                role="user",
                session_id="",
                memory_type="fact",
                importance=0.4,
                metadata={},
                tags=[],
                occurred_at=when,
                created_at=when,
                updated_at=when,
                expires_at=None,
                last_retrieved_at=None,
                retrieval_count=0,
                archived_at=when,
            )
        ],
        actor="human:alice",
    )

    (stored,) = _history(client, imported.pk)
    assert stored["after"]["archived_at"] == "2025-03-01T00:00:00Z"
    assert stored["after"]["content"] == "An old fact."
