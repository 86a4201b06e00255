from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from config.api import ApiError
from ledger.models import Event
from ledger.projections import projection_rebuild, registered_projections
from memory.episodic.sealing import SealBroken, unseal
from memory.episodic.services import (
    MEMORY_BATCH_MAX,
    MemoryDraft,
    memories_store,
    memory_delete,
)
from memory.models import Memory, MemoryKey

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Creator1")


def memories_projection():
    return next(p for p in registered_projections() if p.name == "memories")


def test_storing_applies_the_type_importance_and_ttl_policies(agent, no_embedder):
    remembered, chatter = memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(content="Remember this: the vault code is in the blue folder."),
            MemoryDraft(content="ok thanks!"),
        ],
        actor="Creator1",
    )

    assert remembered.memory_type == "explicit"
    assert remembered.importance == 1.0
    assert remembered.expires_at is None
    assert chatter.importance < 0.2
    assert chatter.expires_at is not None
    assert chatter.expires_at - chatter.created_at == timedelta(days=7)


def test_a_memory_is_embedded_by_the_local_model_when_stored(agent):
    memory = memories_store(
        agent=agent, drafts=[MemoryDraft(content="We decided to ship on Friday.")], actor="x"
    )[0]

    memory.refresh_from_db()
    assert memory.embedding is not None
    assert len(memory.embedding) == 384
    assert memory.embedding_model == "local:all-MiniLM-L6-v2-int8-dynamic"


def test_the_ledger_holds_the_content_only_sealed(tenant, agent, no_embedder):
    memory = memories_store(
        agent=agent, drafts=[MemoryDraft(content="My passport number is X1234567")], actor="x"
    )[0]

    event = Event.objects.get(tenant=tenant, kind="memory.stored")
    assert "X1234567" not in str(event.payload)
    key = MemoryKey.objects.get(memory_id=memory.pk).key
    assert unseal(key=key, sealed=event.payload["sealed"])["content"] == memory.content


def test_deleting_a_memory_shreds_its_content_in_the_ledger(tenant, agent, no_embedder):
    memory = memories_store(agent=agent, drafts=[MemoryDraft(content="secret plan")], actor="x")[0]
    memory_id = memory.pk
    sealed = Event.objects.get(tenant=tenant, kind="memory.stored").payload["sealed"]
    key = MemoryKey.objects.get(memory_id=memory.pk).key

    memory_delete(memory=memory, actor="human:alice", reason="data-subject request")

    assert not Memory.objects.filter(pk=memory_id).exists()
    assert not MemoryKey.objects.filter(memory_id=memory_id).exists()
    deleted = Event.objects.get(tenant=tenant, kind="memory.deleted")
    assert deleted.payload == {
        "memory_id": memory_id,
        "agent_id": agent.pk,
        "reason": "data-subject request",
    }
    assert unseal(key=key, sealed=sealed)["content"] == "secret plan"  # only with the lost key
    with pytest.raises(SealBroken):
        unseal(key=MemoryKey(memory_id=0, tenant=tenant, key=_any_key()).key, sealed=sealed)


def _any_key() -> str:
    from memory.episodic.sealing import key_new

    return key_new()


@pytest.mark.parametrize(
    ("draft", "code"),
    [
        (MemoryDraft(content="   \n"), "empty_content"),
        (MemoryDraft(content="x", memory_type="gossip"), "invalid_memory_type"),
        (MemoryDraft(content="x", importance=1.5), "invalid_importance"),
        (
            MemoryDraft(content="x", expires_at=timezone.now() - timedelta(days=1)),
            "expires_in_past",
        ),
        (MemoryDraft(content="x", embedding=[0.1] * 3), "invalid_embedding"),
        (MemoryDraft(content="x", embedding=[float("nan")] * 384), "invalid_embedding"),
    ],
)
def test_a_batch_with_one_bad_memory_stores_nothing(tenant, agent, draft, code, no_embedder):
    with pytest.raises(ApiError) as raised:
        memories_store(agent=agent, drafts=[MemoryDraft(content="fine"), draft], actor="x")

    assert raised.value.error_code == code
    assert raised.value.details == {"index": 1}
    assert not Memory.objects.exists()
    assert not Event.objects.filter(tenant=tenant, kind="memory.stored").exists()


def test_content_over_the_limit_is_refused(agent, settings, no_embedder):
    settings.MEMORY_MAX_CONTENT_CHARS = 10

    with pytest.raises(ApiError) as raised:
        memories_store(agent=agent, drafts=[MemoryDraft(content="x" * 11)], actor="x")

    assert raised.value.error_code == "content_too_long"


def test_expired_and_archived_memories_are_never_active(agent, no_embedder):
    kept, expired, archived = memories_store(
        agent=agent,
        drafts=[MemoryDraft(content=f"memory {i}") for i in range(3)],
        actor="x",
    )
    Memory.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    Memory.objects.filter(pk=archived.pk).update(archived_at=timezone.now())

    assert list(Memory.objects.active().values_list("pk", flat=True)) == [kept.pk]


def test_the_memories_table_rebuilds_from_the_ledger(tenant, agent, no_embedder):
    first, second, third = memories_store(
        agent=agent,
        drafts=[MemoryDraft(content=f"fact number {i}", session_id="s1") for i in range(3)],
        actor="x",
    )
    memory_delete(memory=second, actor="x")
    Memory.objects.filter(pk=first.pk).update(content="tampered")
    Memory.objects.filter(pk=third.pk).delete()

    unchanged = projection_rebuild(projection=memories_projection(), tenant=tenant)

    assert unchanged is False
    assert sorted(Memory.objects.values_list("pk", "content")) == [
        (first.pk, "fact number 0"),
        (third.pk, "fact number 2"),
    ]
    assert projection_rebuild(projection=memories_projection(), tenant=tenant) is True


def test_memories_stored_during_an_outage_are_embedded_later(agent, settings):
    from memory.embeddings.backends import embedder_reset
    from memory.episodic.services import memory_embeddings_backfill

    settings.EMBEDDING_BACKEND = "openai"
    settings.EMBEDDING_URL = "http://127.0.0.1:9/v1"
    embedder_reset()
    memory = memories_store(agent=agent, drafts=[MemoryDraft(content="during outage")], actor="x")[
        0
    ]
    assert Memory.objects.get(pk=memory.pk).embedding is None

    settings.EMBEDDING_BACKEND = "local"
    embedder_reset()
    try:
        filled = memory_embeddings_backfill()
        again = memory_embeddings_backfill()
    finally:
        embedder_reset()

    assert (filled, again) == (1, 0)
    assert len(Memory.objects.get(pk=memory.pk).embedding) == 384


def test_the_store_service_refuses_more_than_a_batch_whoever_calls_it(agent, no_embedder):
    drafts = [MemoryDraft(content=f"memory {i}") for i in range(MEMORY_BATCH_MAX + 1)]

    with pytest.raises(ApiError) as raised:
        memories_store(agent=agent, drafts=drafts, actor="x")

    assert raised.value.error_code == "validation_error"
    assert not Memory.objects.exists()
    assert len(memories_store(agent=agent, drafts=drafts[:MEMORY_BATCH_MAX], actor="x")) == 1000
