from __future__ import annotations

from celery import shared_task

from memory.embeddings import EmbeddingUnavailable
from memory.services import event_embeddings_build


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
