"""Retrievals recorded in batches count exactly as if each search were recorded alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ledger.models import Event
from memory.episodic.projection import MemoryProjection
from memory.episodic.services import MemoryDraft, memories_mark_retrieved_batch, memories_store
from memory.models import Memory

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def memories(tenant, make_agent):
    agent = make_agent(tenant, name="Creator1")
    drafts = [MemoryDraft(content=f"note {i}", session_id="s1") for i in range(3)]
    return memories_store(agent=agent, drafts=drafts, actor="system")


def test_each_search_in_a_batch_counts_and_is_logged_once(tenant, memories, no_embedder):
    first, second, third = (memory.pk for memory in memories)
    later = NOON + timedelta(minutes=5)

    marked = memories_mark_retrieved_batch(
        tenant=tenant,
        retrievals=[
            ([first, second, second], NOON),  # a repeated id in one search counts once
            ([second, 999_999_999], later),  # a memory gone since is skipped
            ([third], NOON),
        ],
    )

    assert marked == 4
    counts = dict(Memory.objects.values_list("pk", "retrieval_count"))
    assert counts == {first: 1, second: 2, third: 1}
    assert Memory.objects.get(pk=second).last_retrieved_at == later
    assert Memory.objects.get(pk=first).last_retrieved_at == NOON
    events = Event.objects.filter(tenant=tenant, kind="memory.retrieved").order_by("seq")
    assert [event.payload["memory_ids"] for event in events] == [
        sorted([first, second]),
        [second],
        [third],
    ]


def test_a_rebuild_from_the_ledger_gives_the_same_counts(tenant, memories, no_embedder):
    from ledger.projections import projection_rebuild

    first, second, _ = (memory.pk for memory in memories)
    memories_mark_retrieved_batch(
        tenant=tenant, retrievals=[([first, second], NOON), ([second], NOON)]
    )
    before = dict(Memory.objects.values_list("pk", "retrieval_count"))

    Memory.objects.update(retrieval_count=0, last_retrieved_at=None)
    projection_rebuild(projection=MemoryProjection(), tenant=tenant)

    assert dict(Memory.objects.values_list("pk", "retrieval_count")) == before
