"""Reads of the memory app."""

from __future__ import annotations

from datetime import datetime

from django.contrib.postgres.search import SearchQuery
from django.db.models import Q
from django.utils import timezone

from ledger.models import Agent
from memory.models import Memory

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
