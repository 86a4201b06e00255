"""Bulk writes of episodic memories (issue 22 item 4): update or delete one agent's memories
chosen by ids, by a filter (``memory.search.filters``) or all of them (optionally one session's),
with a dry run that counts.

Each memory goes through the single-memory services, ``memory_update`` and ``memory_delete``:
one ledger event per memory, deletes shred the memory's key, and a rebuild replays them like any
other. A request handles at most ``BULK_MAX_MEMORIES``, in id order; when more match, the answer
says how many remain and the id to continue after (``after``), so a request stays short and a
client pages through a large selection. Bulk operations see every stored memory of the agent,
archived and expired ones included, as a single delete does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from config.api import ApiError
from ledger.models import Agent
from memory.episodic.services import memory_delete, memory_update
from memory.models import Memory
from memory.search.filters import MemoryFilter

# Memories one request updates or deletes: each is a service call with its own ledger event
# (about 4 ms each on this machine, bench-free: tests/memory/test_bulk.py keeps it honest).
BULK_MAX_MEMORIES = 500
# Ids a dry run shows of what it would change.
BULK_SAMPLE_IDS = 20


@dataclass(frozen=True)
class BulkSelection:
    """Which of an agent's memories: ``ids``, a ``filter``, or ``everything`` (optionally of one
    ``session_id``), which needs ``confirm``; ``after`` continues an earlier request."""

    ids: tuple[int, ...] = ()
    filter: MemoryFilter = field(default_factory=MemoryFilter)
    everything: bool = False
    session_id: str | None = None
    confirm: bool = False
    after: int | None = None
    limit: int = BULK_MAX_MEMORIES

    def checked(self) -> BulkSelection:
        narrowed = bool(self.ids) or self.filter.root is not None
        if self.everything and narrowed:
            raise ApiError(
                code="bulk_selection_conflict",
                message="Give ids, a filter or all, not several.",
            )
        if self.session_id is not None and not self.everything:
            raise ApiError(
                code="bulk_selection_conflict",
                message='session_id goes with all; otherwise filter by {"session_id": ...}.',
            )
        if not self.everything and not narrowed:
            raise ApiError(
                code="bulk_selection_required",
                message="Say which memories: ids, a non-empty filter, or all with confirm.",
            )
        if self.everything and not self.confirm:
            raise ApiError(
                code="confirmation_required",
                message="all acts on every memory of the agent"
                + (" in this session" if self.session_id is not None else "")
                + ": send confirm: true to go ahead.",
            )
        if len(self.ids) > BULK_MAX_MEMORIES or not 1 <= self.limit <= BULK_MAX_MEMORIES:
            raise ApiError(
                code="bulk_too_many",
                message=f"A request handles at most {BULK_MAX_MEMORIES} memories: send fewer "
                "ids, or a filter and page with limit and after.",
                details={"limit": BULK_MAX_MEMORIES},
            )
        return self


@dataclass(frozen=True)
class BulkChanges:
    """What a bulk update does to each memory; unset parts leave it as it is."""

    importance: float | None = None
    tags_add: tuple[str, ...] = ()
    tags_remove: tuple[str, ...] = ()
    metadata_merge: dict[str, Any] = field(default_factory=dict)
    metadata_remove: tuple[str, ...] = ()
    expires_at: datetime | None = None
    set_expires_at: bool = False  # expires_at given, None meaning "never"

    def for_memory(self, memory: Memory) -> dict[str, Any]:
        """The changes ``memory_update`` makes to this memory: only what differs."""
        wanted: dict[str, Any] = {}
        if self.importance is not None:
            wanted["importance"] = self.importance
        if self.tags_add or self.tags_remove:
            tags = [tag for tag in memory.tags if tag not in self.tags_remove]
            tags += [t for t in dict.fromkeys(self.tags_add) if t not in tags]
            wanted["tags"] = tags
        if self.metadata_merge or self.metadata_remove:
            metadata = {**memory.metadata, **self.metadata_merge}
            for key in self.metadata_remove:
                metadata.pop(key, None)
            wanted["metadata"] = metadata
        if self.set_expires_at:
            wanted["expires_at"] = self.expires_at
        return {name: v for name, v in wanted.items() if getattr(memory, name) != v}

    @property
    def empty(self) -> bool:
        return self == BulkChanges()


@dataclass(frozen=True)
class BulkOutcome:
    dry_run: bool
    matched: int  # memories the selection holds now (after ``after``)
    done: int  # memories updated or deleted (0 in a dry run)
    ids: list[int]  # those changed; in a dry run, a sample of those that would be
    not_found: list[int]  # ids asked for that are not this agent's memories
    remaining: int  # matched but left for a next request (in a dry run: would be)
    continue_after: int | None  # send as ``after`` to go on; None when nothing remains


def _selected(agent: Agent, selection: BulkSelection) -> QuerySet[Memory]:
    memories = Memory.objects.filter(tenant_id=agent.tenant_id, agent=agent)
    if selection.ids:
        memories = memories.filter(pk__in=selection.ids)
    if selection.session_id is not None:
        memories = memories.filter(session_id=selection.session_id)
    memories = memories.filter(selection.filter.q())
    if selection.after is not None:
        memories = memories.filter(pk__gt=selection.after)
    return memories.select_related("tenant").order_by("pk")


def _bulk_apply(
    *, agent: Agent, selection: BulkSelection, dry_run: bool, each: Callable[[Memory], bool]
) -> BulkOutcome:
    selection = selection.checked()
    selected = _selected(agent, selection)
    matched = selected.count()
    not_found: list[int] = []
    if selection.ids:
        found = set(
            Memory.objects.filter(agent=agent, pk__in=selection.ids).values_list("pk", flat=True)
        )
        not_found = sorted(set(selection.ids) - found)
    if dry_run:
        # What the same request would do: handle min(matched, limit), leave the rest.
        sample = list(selected.values_list("pk", flat=True)[:BULK_SAMPLE_IDS])
        remaining = max(0, matched - selection.limit)
        return BulkOutcome(True, matched, 0, sample, not_found, remaining, None)
    batch = list(selected[: selection.limit])
    last = batch[-1].pk if batch else None  # read first: a deleted memory loses its pk
    done: list[int] = []
    with transaction.atomic():
        for memory in batch:
            memory_id = memory.pk
            if each(memory):
                done.append(memory_id)
    remaining = matched - len(batch)
    return BulkOutcome(
        dry_run=False,
        matched=matched,
        done=len(done),
        ids=done,
        not_found=not_found,
        remaining=remaining,
        continue_after=last if remaining else None,
    )


def memories_bulk_update(
    *,
    agent: Agent,
    selection: BulkSelection,
    changes: BulkChanges,
    actor: str,
    dry_run: bool = False,
) -> BulkOutcome:
    """Update the selected memories of ``agent``, each through ``memory_update`` (one
    ``memory.updated`` event per memory that changes; one that would not is left alone)."""
    if changes.empty:
        raise ApiError(code="bulk_changes_required", message="Say what to change.")

    def update(memory: Memory) -> bool:
        wanted = changes.for_memory(memory)
        if wanted:
            memory_update(memory=memory, actor=actor, changes=wanted)
        return bool(wanted)

    return _bulk_apply(agent=agent, selection=selection, dry_run=dry_run, each=update)


def memories_bulk_delete(
    *,
    agent: Agent,
    selection: BulkSelection,
    actor: str,
    reason: str = "",
    dry_run: bool = False,
) -> BulkOutcome:
    """Delete the selected memories of ``agent`` for good, each through ``memory_delete`` (its
    key shredded, one ``memory.deleted`` event)."""

    def delete(memory: Memory) -> bool:
        memory_delete(memory=memory, actor=actor, reason=reason)
        return True

    return _bulk_apply(agent=agent, selection=selection, dry_run=dry_run, each=delete)
