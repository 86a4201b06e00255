from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from ledger.models import Role
from memory.models import Memory

pytestmark = pytest.mark.django_db


@pytest.fixture
def creator(tenant, make_agent):
    return make_agent(tenant, name="Creator1")


@pytest.fixture
def client(tenant, creator, api_as, no_embedder):
    return api_as(tenant, role=Role.AGENT, agent=creator)


def test_an_agent_stores_and_reads_back_a_memory(client):
    created = client.post(
        "/api/v1/memories/",
        {"content": "We approved the $4,000 budget.", "session_id": "s1", "tags": ["budget"]},
        format="json",
    )

    assert created.status_code == 201, created.content
    body = created.json()
    assert body["agent"] == "Creator1"
    assert body["memory_type"] == "approval"
    assert body["importance"] >= 0.8
    fetched = client.get(f"/api/v1/memories/{body['id']}/").json()
    assert fetched["content"] == "We approved the $4,000 budget."


def test_the_importance_given_at_store_reads_the_text(client):
    texts = [
        "hi, how are you?",
        "Good morning! Lovely weather today",
        "Deploy version 2.3.1 to production now.",
    ]
    response = client.post(
        "/api/v1/memories/batch/",
        {"memories": [{"content": text, "role": "user"} for text in texts]},
        format="json",
    )

    assert response.status_code == 201, response.content
    small_talk, weather, deploy = (m["importance"] for m in response.json()["memories"])
    assert max(small_talk, weather) < 0.3
    assert deploy >= 0.6


def test_a_batch_is_stored_at_once_and_listed_newest_first(client):
    response = client.post(
        "/api/v1/memories/batch/",
        {"memories": [{"content": "first"}, {"content": "second"}]},
        format="json",
    )
    listed = client.get("/api/v1/memories/").json()["results"]

    assert response.status_code == 201
    assert [m["content"] for m in listed] == ["second", "first"]


def test_listing_filters_and_hides_expired_memories(client, creator):
    client.post("/api/v1/memories/", {"content": "a", "tags": ["x"]}, format="json")
    client.post("/api/v1/memories/", {"content": "b", "session_id": "s2"}, format="json")
    expired = client.post("/api/v1/memories/", {"content": "c"}, format="json").json()
    Memory.objects.filter(pk=expired["id"]).update(expires_at=timezone.now() - timedelta(hours=1))

    tagged = client.get("/api/v1/memories/?tag=x").json()["results"]
    session = client.get("/api/v1/memories/?session_id=s2").json()["results"]
    everything = client.get("/api/v1/memories/?include_expired=true").json()["results"]
    gone = client.get(f"/api/v1/memories/{expired['id']}/")

    assert [m["content"] for m in tagged] == ["a"]
    assert [m["content"] for m in session] == ["b"]
    assert len(everything) == 3
    assert gone.status_code == 404


def test_listing_filters_by_metadata_containment(client, make_agent, tenant, api_as):
    for content, metadata in [
        ("from slack", {"source": "slack", "thread": {"id": "t1", "replies": 3}}),
        ("from slack too", {"source": "slack", "thread": {"id": "t2"}}),
        ("from mail", {"source": "mail"}),
    ]:
        client.post("/api/v1/memories/", {"content": content, "metadata": metadata}, format="json")
    other = api_as(tenant, role=Role.AGENT, agent=make_agent(tenant, name="Other"))
    other.post(
        "/api/v1/memories/", {"content": "theirs", "metadata": {"source": "slack"}}, format="json"
    )

    def listed(metadata: str) -> list[str]:
        response = client.get("/api/v1/memories/", {"metadata": metadata})
        assert response.status_code == 200, response.content
        return [m["content"] for m in response.json()["results"]]

    assert listed('{"source": "slack"}') == ["from slack too", "from slack"]
    assert listed('{"thread": {"id": "t1"}}') == ["from slack"]
    assert listed('{"source": "slack", "thread": {"replies": 3}}') == ["from slack"]
    assert listed('{"source": "fax"}') == []
    assert len(listed("{}")) == 3


@pytest.mark.parametrize("metadata", ["source=slack", "[1, 2]", '"slack"', "{", "null"])
def test_a_metadata_filter_that_is_not_a_json_object_is_refused(client, metadata):
    response = client.get("/api/v1/memories/", {"metadata": metadata})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_filter"


def test_a_metadata_filter_postgres_cannot_compare_is_refused(client):
    response = client.get("/api/v1/memories/", {"metadata": '{"source": "a\\u0000b"}'})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_value"


def test_a_memory_says_when_it_was_last_changed(client):
    stored = client.post("/api/v1/memories/", {"content": "draft"}, format="json").json()

    changed = client.patch(f"/api/v1/memories/{stored['id']}/", {"content": "final"}, format="json")

    def moment(value: str) -> datetime:
        return datetime.fromisoformat(value)

    assert moment(stored["updated_at"]) == moment(stored["created_at"])
    assert moment(changed.json()["updated_at"]) > moment(stored["updated_at"])
    assert changed.json()["created_at"] == stored["created_at"]


def test_deleting_leaves_a_history_without_content(client):
    memory = client.post("/api/v1/memories/", {"content": "delete me"}, format="json").json()

    history_before = client.get(f"/api/v1/memories/{memory['id']}/history/").json()["results"]
    deleted = client.delete(f"/api/v1/memories/{memory['id']}/")

    assert [h["kind"] for h in history_before] == ["memory.stored"]
    assert deleted.status_code == 204
    assert client.get(f"/api/v1/memories/{memory['id']}/").status_code == 404


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"content": "  "}, "empty_content"),
        ({"content": "x", "memory_type": "gossip"}, "invalid_memory_type"),
        ({"content": "x", "importance": -0.1}, "invalid_importance"),
        ({"content": "x", "expires_at": "2001-01-01T00:00:00Z"}, "expires_in_past"),
        ({"content": "x", "embedding": [1.0, 2.0]}, "invalid_embedding"),
        ({"content": "x", "role": "robot"}, "validation_error"),
    ],
)
def test_bad_memories_are_refused_with_a_code(client, body, code):
    response = client.post("/api/v1/memories/", body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert not Memory.objects.exists()


def test_a_retried_store_with_the_same_key_stores_once(client):
    first = client.post(
        "/api/v1/memories/", {"content": "once"}, format="json", HTTP_IDEMPOTENCY_KEY="m-1"
    )
    retry = client.post(
        "/api/v1/memories/", {"content": "once"}, format="json", HTTP_IDEMPOTENCY_KEY="m-1"
    )

    assert first.json() == retry.json()
    assert Memory.objects.count() == 1


def test_a_tenant_key_must_name_the_agent(tenant, api_as, creator):
    response = api_as(tenant).post("/api/v1/memories/", {"content": "x"}, format="json")

    assert response.status_code == 400
    assert "agent" in response.json()["error"]["details"]


def test_updating_a_memory_is_logged_sealed_and_survives_a_rebuild(tenant, client):
    from ledger.models import Event
    from ledger.projections import projection_rebuild, registered_projections

    memory = client.post("/api/v1/memories/", {"content": "draft plan"}, format="json").json()

    updated = client.patch(
        f"/api/v1/memories/{memory['id']}/",
        {"content": "final plan: launch Monday", "importance": 0.9, "tags": ["launch"]},
        format="json",
    )
    invalid = client.patch(f"/api/v1/memories/{memory['id']}/", {"importance": 3}, format="json")
    history = client.get(f"/api/v1/memories/{memory['id']}/history/").json()["results"]

    assert updated.status_code == 200
    assert updated.json()["content"] == "final plan: launch Monday"
    assert invalid.status_code == 400
    assert invalid.json()["error"]["code"] == "invalid_importance"
    assert [h["kind"] for h in history] == ["memory.stored", "memory.updated"]
    event = Event.objects.get(tenant=tenant, kind="memory.updated")
    assert "launch Monday" not in str(event.payload)
    assert event.payload["changes"]["importance"] == 0.9
    projection = next(p for p in registered_projections() if p.name == "memories")
    assert projection_rebuild(projection=projection, tenant=tenant) is True
    assert Memory.objects.get(pk=memory["id"]).content == "final plan: launch Monday"


def test_a_batch_over_the_cap_is_refused_and_stores_nothing(client):
    response = client.post(
        "/api/v1/memories/batch/",
        {"memories": [{"content": f"memory {i}"} for i in range(1001)]},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "validation_error",
        "message": "Some fields are missing or invalid; see details.",
        "details": {"memories": ["A batch holds at most 1000 memories."]},
    }
    assert not Memory.objects.exists()
