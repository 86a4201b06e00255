"""Memory's projections of the ledger, registered with ``ledger.projections``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils.dateparse import parse_datetime

from ledger.models import Event, Tenant
from ledger.projections import AGENT_DELETED
from ledger.services import tenant_write_lock
from memory.consolidation.services import SUPERSEDED
from memory.episodic.sealing import unseal
from memory.episodic.services import MEMORY_EVENT_KINDS, memories_speakers_refresh
from memory.models import Memory, MemoryKey
from memory.search.keyword_index import search_documents_refresh

# What a rebuild compares and repairs; vectors are derived and left to the backfill.
_COMPARED_FIELDS = (
    "agent_id",
    "session_id",
    "role",
    "content",
    "memory_type",
    "importance",
    "archived_at",
    "last_retrieved_at",
    "retrieval_count",
    "valid_from",
    "valid_until",
    "superseded_by",
)


def _when(value: str | None) -> datetime | None:
    return None if value is None else parse_datetime(value)


def _imported_fields(recorded: dict[str, Any]) -> dict[str, Any]:
    """What an imported memory's event recorded of its life before (services.memories_import)."""
    return {
        "created_at": _when(recorded["created_at"]),
        "updated_at": _when(recorded["updated_at"]),
        "last_retrieved_at": _when(recorded["last_retrieved_at"]),
        "retrieval_count": int(recorded["retrieval_count"]),
        "archived_at": _when(recorded["archived_at"]),
    }


class MemoryProjection:
    """The memories table, replayed from ``memory.*`` events.

    Content comes back by opening each event's sealed document with the memory's key; a memory
    whose key was destroyed (a data-subject deletion) stays gone. An ``agent.deleted`` removes
    every memory of the agent replayed so far. Vectors are derived data and are left for the
    embedding backfill to recompute.
    """

    name = "memories"
    owned_kinds = MEMORY_EVENT_KINDS
    indexes_all_kinds = False

    def __init__(self) -> None:
        self._replayed: dict[int, dict[str, Any]] = {}
        # The ids each agent stored, so a deletion costs its own memories, not the tenant's.
        self._stored_by: dict[int, list[int]] = {}

    def snapshot(self, *, tenant: Tenant) -> list[tuple[Any, ...]]:
        return list(
            Memory.objects.filter(tenant=tenant).order_by("id").values_list("id", *_COMPARED_FIELDS)
        )

    def reset(self, *, tenant: Tenant) -> None:
        self._replayed = {}
        self._stored_by = {}

    def apply(self, *, tenant: Tenant, events: Sequence[Event]) -> None:
        ids = [int(e.payload["memory_id"]) for e in events if "memory_id" in e.payload]
        keys = dict(
            MemoryKey.objects.filter(tenant=tenant, memory_id__in=ids).values_list(
                "memory_id", "key"
            )
        )
        for event in events:
            if event.kind in ("memory.archived", "memory.expired", "memory.retrieved"):
                self._apply_batch(event)
                continue
            if event.kind == AGENT_DELETED:
                for memory_id in self._stored_by.pop(int(event.payload["agent_id"]), []):
                    self._replayed.pop(memory_id, None)
                continue
            memory_id = int(event.payload["memory_id"])
            if event.kind == "memory.deleted":
                self._replayed.pop(memory_id, None)
            elif event.kind == SUPERSEDED and memory_id in self._replayed:
                self._replayed[memory_id].update(
                    valid_until=parse_datetime(event.payload["valid_until"]),
                    superseded_by=int(event.payload["superseded_by"]),
                    # Recorded since the import restores supersessions with their own times.
                    updated_at=_when(event.payload.get("updated_at")) or event.created_at,
                )
            elif event.kind == "memory.updated" and memory_id in self._replayed:
                self._apply_update(self._replayed[memory_id], event, keys.get(memory_id))
            elif event.kind == "memory.stored" and memory_id in keys:
                sealed = unseal(key=keys[memory_id], sealed=event.payload["sealed"])
                occurred_at = parse_datetime(event.payload["occurred_at"])
                self._stored_by.setdefault(int(event.payload["agent_id"]), []).append(memory_id)
                self._replayed[memory_id] = {
                    "agent_id": event.payload["agent_id"],
                    "session_id": event.payload["session_id"],
                    "role": event.payload["role"],
                    "content": sealed["content"],
                    "metadata": sealed["metadata"],
                    "content_hash": sealed["content_hash"],
                    "memory_type": event.payload["memory_type"],
                    "importance": event.payload["importance"],
                    "tags": event.payload["tags"],
                    "occurred_at": occurred_at,
                    # Events from before issue 22 carry no interval: valid since it occurred.
                    "valid_from": _when(event.payload.get("valid_from")) or occurred_at,
                    "valid_until": _when(event.payload.get("valid_until")),
                    "superseded_by": None,
                    "expires_at": parse_datetime(event.payload["expires_at"] or "")
                    if event.payload["expires_at"]
                    else None,
                    "created_at": event.created_at,
                    "updated_at": event.created_at,
                    "archived_at": None,
                    "last_retrieved_at": None,
                    "retrieval_count": 0,
                }
                if "imported" in event.payload:
                    self._replayed[memory_id].update(_imported_fields(event.payload["imported"]))

    def _apply_batch(self, event: Event) -> None:
        """Decay, quota, TTL and retrieval act on many memories at once, logged in one event."""
        for memory_id in event.payload["memory_ids"]:
            if event.kind == "memory.expired":
                self._replayed.pop(int(memory_id), None)
            elif event.kind == "memory.retrieved" and int(memory_id) in self._replayed:
                values = self._replayed[int(memory_id)]
                at = parse_datetime(event.payload["retrieved_at"])
                previous = values["last_retrieved_at"]
                values["last_retrieved_at"] = at if previous is None or at > previous else previous
                values["retrieval_count"] += 1
            elif int(memory_id) in self._replayed:
                self._replayed[int(memory_id)]["archived_at"] = parse_datetime(
                    event.payload["archived_at"]
                )

    @staticmethod
    def _apply_update(values: dict[str, Any], event: Event, key: str | None) -> None:
        changes = dict(event.payload["changes"])
        sealed = changes.pop("sealed", None)
        if sealed is not None and key is not None:
            opened = unseal(key=key, sealed=sealed)
            values.update(
                content=opened["content"],
                metadata=opened["metadata"],
                content_hash=opened["content_hash"],
            )
        if "expires_at" in changes:
            raw = changes.pop("expires_at")
            values["expires_at"] = parse_datetime(raw) if raw else None
        values.update(changes)
        values["updated_at"] = event.created_at

    def finish(self, *, tenant: Tenant) -> None:
        with transaction.atomic():
            tenant_write_lock(tenant)
            existing = {m.pk: m for m in Memory.objects.filter(tenant=tenant)}
            Memory.objects.filter(tenant=tenant).exclude(pk__in=self._replayed).delete()
            rewritten = []
            for memory_id, values in self._replayed.items():
                memory = existing.get(memory_id)
                if memory is None:
                    Memory.objects.create(id=memory_id, tenant=tenant, **values)
                    rewritten.append(memory_id)
                elif any(getattr(memory, name) != values[name] for name in _COMPARED_FIELDS):
                    Memory.objects.filter(pk=memory_id).update(**values)
                    rewritten.append(memory_id)
            # Derived like the documents below, from the rows as written.
            memories_speakers_refresh(rewritten)
            # Keyword documents are derived from the rows just written; unchanged ones leave the
            # BM25 statistics as they were.
            search_documents_refresh(list(self._replayed))
        self._replayed = {}
        self._stored_by = {}

    def after_append(self, *, event_ids: Sequence[int]) -> None:
        """Memories are written by their services, not after the fact."""
