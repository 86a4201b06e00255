"""The semantic index over ledger events as a projection, registered in ``MemoryConfig.ready``."""

from __future__ import annotations

from collections.abc import Sequence

from ledger.models import Event, Tenant
from memory.embeddings.services import event_embeddings_build, event_embeddings_drop
from memory.models import EventEmbedding


class EventEmbeddingIndex:
    """The semantic index over event text: derived data, dropped and rebuilt at will."""

    name = "event_embeddings"
    owned_kinds: frozenset[str] = frozenset()
    indexes_all_kinds = True

    def snapshot(self, *, tenant: Tenant) -> list[tuple[int, str]]:
        return list(
            EventEmbedding.objects.filter(tenant=tenant)
            .order_by("event_id")
            .values_list("event_id", "model")
        )

    def reset(self, *, tenant: Tenant) -> None:
        event_embeddings_drop(tenant=tenant)

    def apply(self, *, tenant: Tenant, events: Sequence[Event]) -> None:
        event_embeddings_build(event_ids=[event.pk for event in events])

    def finish(self, *, tenant: Tenant) -> None:
        """Each batch was written as it was embedded."""

    def after_append(self, *, event_ids: Sequence[int]) -> None:
        from memory.tasks import event_embeddings_build_task

        event_embeddings_build_task.delay(list(event_ids))
