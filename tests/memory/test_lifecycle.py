from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import Event
from ledger.projections import projection_rebuild, registered_projections
from memory.episodic.lifecycle import memories_decay, memories_enforce_quota, memories_expire
from memory.episodic.services import MemoryDraft, memories_store
from memory.models import Memory, MemoryKey

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(tenant, make_agent, no_embedder):
    return make_agent(tenant, name="Creator1")


def store(agent, *importances: float) -> list[Memory]:
    return memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(content=f"memory {i}", importance=value, memory_type="explicit")
            for i, value in enumerate(importances)
        ],
        actor="x",
    )


def rebuild_is_clean(tenant) -> bool:
    projection = next(p for p in registered_projections() if p.name == "memories")
    return bool(projection_rebuild(projection=projection, tenant=tenant))


def test_decay_archives_only_what_fell_below_the_threshold(tenant, agent):
    # 0.5 * 0.95^w < 0.1 needs w > 31.4 weeks; 0.9 * 0.95^w needs w > 42.8 weeks.
    weak, strong = store(agent, 0.5, 0.9)
    later = timezone.now() + timedelta(weeks=35)

    first = memories_decay(now=later)
    again = memories_decay(now=later)

    assert (first, again) == (1, 0)
    assert Memory.objects.get(pk=weak.pk).archived_at is not None
    assert Memory.objects.get(pk=strong.pk).archived_at is None
    event = Event.objects.get(tenant=tenant, kind="memory.archived")
    assert event.payload["memory_ids"] == [weak.pk]
    assert event.payload["reason"] == "decay"
    assert rebuild_is_clean(tenant)


def test_being_retrieved_resets_the_decay_clock(agent):
    (memory,) = store(agent, 0.5)
    later = timezone.now() + timedelta(weeks=35)
    Memory.objects.filter(pk=memory.pk).update(last_retrieved_at=later - timedelta(weeks=1))

    assert memories_decay(now=later) == 0


def test_decay_boundary_just_before_and_after(agent):
    (memory,) = store(agent, 0.5)
    created = Memory.objects.get(pk=memory.pk).created_at
    # 0.5 * 0.95^w = 0.1 at w = ln(0.2) / ln(0.95) = 31.3771 weeks
    boundary = created + timedelta(weeks=31.3771)

    assert memories_decay(now=boundary - timedelta(hours=1)) == 0
    assert memories_decay(now=boundary + timedelta(hours=1)) == 1


def test_expiry_deletes_content_and_key_exactly_at_the_deadline(tenant, agent):
    memory = memories_store(
        agent=agent, drafts=[MemoryDraft(content="hello", memory_type="conversation")], actor="x"
    )[0]
    deadline = Memory.objects.get(pk=memory.pk).expires_at
    assert deadline is not None

    before = memories_expire(now=deadline - timedelta(microseconds=1))
    at = memories_expire(now=deadline)
    again = memories_expire(now=deadline)

    assert (before, at, again) == (0, 1, 0)
    assert not Memory.objects.filter(pk=memory.pk).exists()
    assert not MemoryKey.objects.filter(memory_id=memory.pk).exists()
    assert Event.objects.get(tenant=tenant, kind="memory.expired").payload["memory_ids"] == [
        memory.pk
    ]
    assert rebuild_is_clean(tenant)


def test_the_quota_archives_the_least_important_first(tenant, agent):
    memories = store(agent, 0.9, 0.1, 0.5, 0.3, 0.8)

    archived = memories_enforce_quota(limit=3)
    again = memories_enforce_quota(limit=3)

    assert (archived, again) == (2, 0)
    kept = set(Memory.objects.active().values_list("importance", flat=True))
    assert kept == {0.9, 0.5, 0.8}
    assert {m.pk for m in memories} >= set(
        Event.objects.get(tenant=tenant, kind="memory.archived").payload["memory_ids"]
    )
    assert rebuild_is_clean(tenant)


def test_the_quota_is_per_agent(tenant, agent, make_agent):
    other = make_agent(tenant, name="Reviewer1")
    store(agent, 0.5, 0.6)
    store(other, 0.5)

    assert memories_enforce_quota(limit=1) == 1
    assert Memory.objects.active().filter(agent=other).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_runs_archive_each_memory_once(tenant, agent):
    from tests.concurrency import run_concurrently

    store(agent, *[0.05 + i * 0.01 for i in range(20)])
    later = timezone.now() + timedelta(weeks=60)

    counts = run_concurrently(lambda _: memories_decay(now=later, batch_size=7), 3)
    while memories_decay(now=later, batch_size=7):
        pass

    assert Memory.objects.filter(archived_at__isnull=False).count() == 20
    archived_ids = [
        memory_id
        for event in Event.objects.filter(tenant=tenant, kind="memory.archived")
        for memory_id in event.payload["memory_ids"]
    ]
    assert sorted(archived_ids) == sorted(set(archived_ids))
    assert sum(counts) <= 20
