"""The memory app's Celery tasks: thin, they call one service each. Their batching and
resume logic lives in the services (``embeddings_backfill_batches``,
``reflections_due_batches``, the lifecycle sweeps); ``JOB_SPECS`` registers the periodic ones."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task
from django.conf import settings
from django.utils.dateparse import parse_datetime

from ledger.jobs import (
    JOB_TASK_OPTIONS,
    Every,
    JobSpec,
    job_task_run,
)
from ledger.models import Tenant
from memory.consolidation.services import memories_consolidate
from memory.embeddings.backends import EmbeddingUnavailable
from memory.embeddings.services import (
    embeddings_backfill_batches,
    event_embeddings_build,
)
from memory.episodic.lifecycle import (
    memories_decay_sweep,
    memories_enforce_quota_sweep,
    memories_expire_sweep,
)
from memory.episodic.services import memories_mark_retrieved, memories_mark_retrieved_batch
from memory.recall.services import reflections_due_batches

DECAY_JOB = "memory.decay"
TTL_JOB = "memory.ttl"
QUOTA_JOB = "memory.quota"
EMBEDDINGS_BACKFILL_JOB = "memory.embeddings_backfill"
REFLECTIONS_JOB = "memory.reflections"


# Tasks that embed: an embedder that is down is retried with backoff, not lost.
EMBEDDING_TASK_OPTIONS: dict[str, Any] = {
    "autoretry_for": (EmbeddingUnavailable,),
    "retry_backoff": 5,
    "retry_backoff_max": 300,
    "max_retries": 5,
    "acks_late": True,
    "ignore_result": True,
}


@shared_task(name="memory.tasks.event_embeddings_build", **EMBEDDING_TASK_OPTIONS)
def event_embeddings_build_task(event_ids: list[int]) -> int:
    return event_embeddings_build(event_ids=event_ids)


@shared_task(name="memory.tasks.memories_consolidate", **EMBEDDING_TASK_OPTIONS)
def memories_consolidate_task(memory_ids: list[int], actor: str) -> int:
    """A batch's consolidation, deferred by ``memories_store``. A retry is safe: a memory
    superseded already is left alone and a proposal already recorded is recorded again."""
    return memories_consolidate(memory_ids=memory_ids, actor=actor)


@shared_task(name="memory.tasks.memories_mark_retrieved", ignore_result=True)
def memories_mark_retrieved_task(tenant_id: int, memory_ids: list[int], at: str) -> int:
    """Off the search's hot path: the response never waits for this write."""
    moment = parse_datetime(at)
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None or moment is None:
        return 0
    return memories_mark_retrieved(tenant=tenant, memory_ids=memory_ids, at=moment)


@shared_task(name="memory.tasks.memories_mark_retrieved_batch", ignore_result=True)
def memories_mark_retrieved_batch_task(
    tenant_id: int, retrievals: list[tuple[list[int], str]]
) -> int:
    """Several searches' retrievals of one tenant, ``[memory ids, ISO time]`` each."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    moments = [(memory_ids, parse_datetime(at)) for memory_ids, at in retrievals]
    parsed = [(memory_ids, moment) for memory_ids, moment in moments if moment is not None]
    if tenant is None or not parsed:
        return 0
    return memories_mark_retrieved_batch(tenant=tenant, retrievals=parsed)


@shared_task(name="memory.tasks.memories_decay", **JOB_TASK_OPTIONS)
def memories_decay_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self,
        name=DECAY_JOB,
        batches=lambda: memories_decay_sweep(batch_size=settings.JOB_BATCH_SIZE),
    )


@shared_task(name="memory.tasks.memories_expire", **JOB_TASK_OPTIONS)
def memories_expire_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self,
        name=TTL_JOB,
        batches=lambda: memories_expire_sweep(batch_size=settings.JOB_BATCH_SIZE),
    )


@shared_task(name="memory.tasks.memories_enforce_quota", **JOB_TASK_OPTIONS)
def memories_enforce_quota_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self,
        name=QUOTA_JOB,
        batches=lambda: memories_enforce_quota_sweep(batch_size=settings.JOB_BATCH_SIZE),
    )


@shared_task(name="memory.tasks.embeddings_backfill", **JOB_TASK_OPTIONS)
def embeddings_backfill_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(self, name=EMBEDDINGS_BACKFILL_JOB, batches=embeddings_backfill_batches)


@shared_task(name="memory.tasks.reflections_trigger", **JOB_TASK_OPTIONS)
def reflections_trigger_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self, name=REFLECTIONS_JOB, batches=lambda: reflections_due_batches(job=REFLECTIONS_JOB)
    )


# The memory app's periodic jobs, registered with ledger.jobs by MemoryConfig.ready.
JOB_SPECS = (
    JobSpec(
        DECAY_JOB,
        memories_decay_task.name,
        "Archive memories whose effective importance fell below 0.1.",
        Every(minutes=60),
    ),
    JobSpec(
        TTL_JOB,
        memories_expire_task.name,
        "Delete memories past their expiry and shred their content keys.",
        Every(minutes=60),
    ),
    JobSpec(
        QUOTA_JOB,
        memories_enforce_quota_task.name,
        "Archive the least important memories of agents over their quota.",
        Every(minutes=60),
    ),
    JobSpec(
        EMBEDDINGS_BACKFILL_JOB,
        embeddings_backfill_task.name,
        "Embed memories, knowledge chunks and events stored while the embedder was unavailable "
        "or embedded by another model.",
        Every(minutes=10),
    ),
    JobSpec(
        REFLECTIONS_JOB,
        reflections_trigger_task.name,
        "Create the reflections that became due in recently active runs.",
        Every(minutes=15),
    ),
)
