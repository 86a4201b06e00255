"""Reads of the memory app."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.contrib.postgres.search import SearchQuery
from django.db.models import Q, QuerySet
from django.utils import timezone

from ledger.models import Agent, Event, Tenant
from memory.episodic.history import HistoryEntry, memory_history_replay
from memory.episodic.services import MEMORY_EVENT_KINDS
from memory.models import Memory, MemoryKey

INACTIVE_LISTED = 50


def memories_inactive(
    *,
    agent: Agent,
    query: str = "",
    memory_type: str = "",
    limit: int = INACTIVE_LISTED,
    now: datetime | None = None,
) -> list[Memory]:
    """The agent's archived or expired memories, newest first: the ones search never returns.

    Read through the (tenant, agent, created_at) index; the rows skipped on the way are the
    agent's active memories, which the quota keeps bounded. ``query`` matches words the way the
    keyword leg of search does (the memory and its session neighbours).
    """
    moment = now or timezone.now()
    memories = Memory.objects.filter(tenant_id=agent.tenant_id, agent=agent).filter(
        Q(archived_at__isnull=False) | Q(expires_at__lte=moment)
    )
    if memory_type:
        memories = memories.filter(memory_type=memory_type)
    if query.strip():
        memories = memories.filter(
            search_vector=SearchQuery(query, config="english", search_type="websearch")
        )
    return list(memories.defer("embedding", "search_vector").order_by("-created_at", "-id")[:limit])


# --- History --------------------------------------------------------------------------------

# The jobs log what they did to many memories in one event (``memory_ids``). A retrieval is not
# a change of the memory's values, and every search writes one: it stays out of the history.
BATCH_HISTORY_KINDS = ("memory.archived", "memory.expired")
HISTORY_KINDS = sorted(MEMORY_EVENT_KINDS - {"memory.retrieved", *BATCH_HISTORY_KINDS})


def memory_stored_event(
    *, tenant: Tenant, memory_id: int, agent: Agent | None = None
) -> Event | None:
    """The event that stored a memory of the tenant, deleted or not; with ``agent``, only one
    of that agent's memories (an agent-scoped key reads its own agent's history only)."""
    stored = Event.objects.filter(
        tenant=tenant, kind="memory.stored", payload__has_key="memory_id"
    ).filter(payload__memory_id=memory_id)
    if agent is not None:
        stored = stored.filter(payload__agent_id=agent.pk)
    return stored.first()


def memory_events(*, stored: Event) -> QuerySet[Event]:
    """The events that changed the memory ``stored`` stored, in ledger order (a queryset to
    paginate; ``memory_history`` turns a page of it into entries)."""
    memory_id = int(stored.payload["memory_id"])
    return Event.objects.filter(tenant_id=stored.tenant_id, seq__gte=stored.seq).filter(
        # payload ? 'memory_id' is the condition of the index ledger_event_memory_history.
        Q(kind__in=HISTORY_KINDS, payload__has_key="memory_id", payload__memory_id=memory_id)
        | Q(kind__in=BATCH_HISTORY_KINDS, payload__memory_ids__contains=[memory_id])
    )


def memory_history(*, stored: Event, page: Sequence[Event]) -> list[HistoryEntry]:
    """The entries of ``page``, events of ``memory_events(stored=stored)``: the values before
    each change come from replaying every earlier event of the memory."""
    if not page:
        return []
    key = (
        MemoryKey.objects.filter(
            tenant_id=stored.tenant_id, memory_id=int(stored.payload["memory_id"])
        )
        .values_list("key", flat=True)
        .first()
    )
    last = max(event.seq for event in page)
    replayed = memory_history_replay(
        events=list(memory_events(stored=stored).filter(seq__lte=last).order_by("seq")), key=key
    )
    wanted = {event.seq for event in page}
    by_seq = {entry.seq: entry for entry in replayed if entry.seq in wanted}
    return [by_seq[event.seq] for event in page]
