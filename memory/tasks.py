from __future__ import annotations

from celery import shared_task
from django.utils.dateparse import parse_datetime

from ledger.models import Tenant
from memory.embeddings import EmbeddingUnavailable
from memory.services import event_embeddings_build, memories_mark_retrieved


@shared_task(
    name="memory.tasks.event_embeddings_build",
    autoretry_for=(EmbeddingUnavailable,),
    retry_backoff=5,
    retry_backoff_max=300,
    max_retries=5,
    acks_late=True,
    ignore_result=True,
)
def event_embeddings_build_task(event_ids: list[int]) -> int:
    return event_embeddings_build(event_ids=event_ids)


@shared_task(name="memory.tasks.memories_mark_retrieved", ignore_result=True)
def memories_mark_retrieved_task(tenant_id: int, memory_ids: list[int], at: str) -> int:
    """Off the search's hot path: the response never waits for this write."""
    moment = parse_datetime(at)
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None or moment is None:
        return 0
    return memories_mark_retrieved(tenant=tenant, memory_ids=memory_ids, at=moment)
