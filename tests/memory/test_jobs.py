"""The memory app's background jobs, run in-process as the worker runs them (``task.apply()``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import Event, JobRun, RecallSettings
from ledger.services import event_append
from memory.embeddings.backends import embedder_reset
from memory.embeddings.local_embedder import DIMENSIONS
from memory.episodic.lifecycle import memories_enforce_quota_sweep, memories_expire
from memory.episodic.services import MemoryDraft, memories_store
from memory.models import EventEmbedding, Memory
from memory.tasks import embeddings_backfill_task, reflections_trigger_task
from tests.memory.test_search import lexemes
from tests.standins import openai_standin

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(tenant, make_agent, no_embedder):
    return make_agent(tenant, name="Creator1")


def last_run(name: str) -> JobRun:
    run = JobRun.objects.filter(job=name).order_by("pk").last()
    assert run is not None
    return run


def test_what_was_stored_during_an_outage_is_embedded_by_the_backfill_job(tenant, agent, settings):
    (memory,) = memories_store(
        agent=agent, drafts=[MemoryDraft(content="during outage")], actor="x"
    )
    event = event_append(
        tenant=tenant, kind="agent.spoke", actor="Creator1", payload={"text": "said then"}
    )
    embeddings_backfill_task.apply()  # still down: nothing done, nothing failed
    assert last_run("memory.embeddings_backfill").status == "succeeded"
    assert Memory.objects.get(pk=memory.pk).embedding is None

    with openai_standin(dimensions=DIMENSIONS) as standin:
        settings.EMBEDDING_URL = standin.url
        settings.EMBEDDING_DIMENSIONS = DIMENSIONS
        embedder_reset()
        embeddings_backfill_task.apply()
        first = last_run("memory.embeddings_backfill").rows_touched
        embeddings_backfill_task.apply()
        second = last_run("memory.embeddings_backfill").rows_touched

    assert (first, second) == (2, 0)
    assert len(Memory.objects.get(pk=memory.pk).embedding) == DIMENSIONS
    assert EventEmbedding.objects.filter(event=event).exists()


def test_the_reflection_trigger_creates_a_due_reflection_once(tenant, agent):
    RecallSettings.objects.create(tenant=tenant, reflection_threshold=3)
    event_append(tenant=tenant, kind="agent.spoke", actor="Creator1", payload={"text": "old"})
    reflections_trigger_task.apply()  # the first run starts at the newest event
    assert last_run("memory.reflections").rows_touched == 0

    for number in range(3):
        event_append(
            tenant=tenant,
            kind="agent.spoke",
            actor="Creator1",
            payload={"text": f"point {number}"},
            run_id="r1",
        )
    reflections_trigger_task.apply()
    created = last_run("memory.reflections").rows_touched
    reflections_trigger_task.apply()
    again = last_run("memory.reflections").rows_touched

    assert (created, again) == (1, 0)
    assert Event.objects.filter(kind="agent.reflected", run_id="r1").count() == 1
    assert last_run("memory.reflections").details == {
        "after_event_id": Event.objects.order_by("-pk").values_list("pk", flat=True).first()
    }


def test_expiry_recomputes_the_windows_of_the_neighbours_left_in_the_session(agent):
    first, gone, third = memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(
                content=word,
                session_id="s1",
                occurred_at=timezone.now() - timedelta(minutes=10 - minute),
            )
            for minute, word in enumerate(["alpha", "bravo", "charlie"])
        ],
        actor="x",
    )
    assert "bravo" in lexemes(first)
    Memory.objects.filter(pk=gone.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert memories_expire() == 1
    assert "bravo" not in lexemes(first)
    assert "bravo" not in lexemes(third)


def test_the_quota_sweep_groups_agents_and_archives_each_excess_once(tenant, make_agent, agent):
    agents = [agent, *(make_agent(tenant, name=f"Extra{n}") for n in range(3))]
    for each in agents:
        memories_store(
            agent=each,
            drafts=[MemoryDraft(content=f"{each.name} {n}", importance=n / 10) for n in range(6)],
            actor="x",
        )

    batches = list(memories_enforce_quota_sweep(limit=2, batch_size=8))

    assert sum(batch.rows for batch in batches) == 4 * 4
    assert [batch.more for batch in batches][-1] is False
    for each in agents:
        kept = Memory.objects.filter(agent=each, archived_at__isnull=True)
        assert sorted(kept.values_list("importance", flat=True)) == [0.4, 0.5]
    archived_ids = [
        memory_id
        for payload in Event.objects.filter(kind="memory.archived").values_list(
            "payload", flat=True
        )
        for memory_id in payload["memory_ids"]
    ]
    assert len(archived_ids) == len(set(archived_ids)) == 16
    assert list(memories_enforce_quota_sweep(limit=2, batch_size=8)) == [(0, False, None)]
