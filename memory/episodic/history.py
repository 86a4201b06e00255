"""A memory's history with values: what each change made of it, replayed from its ledger events.

The events carry new values only (``memory.stored`` all of them, ``memory.updated`` the changed
ones, the jobs' batch events what they did), so the values before a change come from replaying
the memory's events in order. Content and metadata are sealed with the memory's key
(``sealing``): once the key is destroyed (deletion, TTL expiry, the agent's deletion) they read
as shredded (``None``) in every entry, the "before" of earlier changes included. Nothing here
reads the memory's row, which is gone after a deletion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from ledger.models import Event
from ledger.names import ACTOR_KIND_SEPARATOR, HUMAN_ACTOR_PREFIX, SYSTEM_ACTOR
from memory.episodic.sealing import SealBroken, unseal

SEALED_FIELDS = ("content", "metadata")
# Every field a change can touch, in the order the entries list them; validity only where the
# events carry it.
TRACKED_FIELDS = (
    "content",
    "metadata",
    "memory_type",
    "importance",
    "tags",
    "expires_at",
    "archived_at",
    "valid_from",
    "valid_until",
)
DATETIME_FIELDS = frozenset({"expires_at", "archived_at", "valid_from", "valid_until"})
# Events that end the memory: its row and its key are gone.
ENDING_KINDS = frozenset({"memory.deleted", "memory.expired"})


@dataclass(frozen=True)
class HistoryEntry:
    """One change: the fields it touched with their values before and after it."""

    seq: int
    kind: str
    created_at: datetime
    actor: str
    actor_kind: str
    # The system job that made it ("decay", "quota", "ttl"), for the system's changes.
    job: str | None
    reason: str
    changed: list[str]
    before: dict[str, Any]
    after: dict[str, Any]
    content_shredded: bool


def actor_kind(actor: str) -> str:
    """``agent``, ``person``, ``system`` or the kind an actor is written with (``api_key``)."""
    if actor == SYSTEM_ACTOR:
        return "system"
    if actor.startswith(HUMAN_ACTOR_PREFIX):
        return "person"
    if ACTOR_KIND_SEPARATOR in actor:
        return actor.split(ACTOR_KIND_SEPARATOR, 1)[0]
    return "agent"


def _value(name: str, raw: Any) -> Any:
    if name in DATETIME_FIELDS and isinstance(raw, str):
        return parse_datetime(raw)
    return raw


def _opened(sealed: str | None, key: str | None) -> dict[str, Any] | None:
    """The sealed document, or None when it cannot be read any more (shredded)."""
    if sealed is None or key is None:
        return None
    try:
        return unseal(key=key, sealed=sealed)
    except SealBroken:
        return None


def _clear_values(values: dict[str, Any]) -> dict[str, Any]:
    return {
        name: _value(name, raw)
        for name, raw in values.items()
        if name in TRACKED_FIELDS and name not in SEALED_FIELDS
    }


def _sealed_values(sealed: str | None, key: str | None) -> dict[str, Any]:
    opened = _opened(sealed, key)
    return {name: None if opened is None else opened.get(name) for name in SEALED_FIELDS}


def _next_state(
    state: dict[str, Any], event: Event, key: str | None
) -> tuple[dict[str, Any], list[str]]:
    """The memory's values after ``event`` and the fields it touched."""
    payload = event.payload
    if event.kind == "memory.stored":
        # An imported memory may arrive archived (services.memories_import records it).
        imported = payload.get("imported")
        archived = imported.get("archived_at") if isinstance(imported, dict) else None
        stored = {"archived_at": _value("archived_at", archived), **_clear_values(payload)}
        stored.update(_sealed_values(payload.get("sealed"), key))
        return stored, [name for name in TRACKED_FIELDS if name in stored]
    if event.kind in ENDING_KINDS:
        return {}, [name for name in TRACKED_FIELDS if name in state]
    if event.kind == "memory.archived":
        return {**state, "archived_at": _value("archived_at", payload["archived_at"])}, [
            "archived_at"
        ]
    changes = payload.get("changes")
    # An update names its changes; another kind (a supersession) may carry values at its top.
    clear = _clear_values(changes if isinstance(changes, dict) else payload)
    after = {**state, **clear}
    touched = set(clear)
    sealed = changes.get("sealed") if isinstance(changes, dict) else None
    if sealed is not None:
        opened = _sealed_values(sealed, key)
        after.update(opened)
        named = payload.get("sealed_fields")
        if isinstance(named, list):
            touched.update(name for name in named if name in SEALED_FIELDS)
        elif key is None:
            touched.update(SEALED_FIELDS)  # written before events named them: can't tell
        else:
            touched.update(name for name in SEALED_FIELDS if opened[name] != state.get(name))
    return after, [name for name in TRACKED_FIELDS if name in touched]


def memory_history_replay(*, events: Sequence[Event], key: str | None) -> list[HistoryEntry]:
    """The entries of a memory's events, given in ledger order from its ``memory.stored``.

    ``key`` is the memory's content key, or None when it was destroyed.
    """
    entries = []
    state: dict[str, Any] = {}
    for event in events:
        after, changed = _next_state(state, event, key)
        kind = actor_kind(event.actor)
        reason = event.payload.get("reason")
        entries.append(
            HistoryEntry(
                seq=event.seq,
                kind=event.kind,
                created_at=event.created_at,
                actor=event.actor,
                actor_kind=kind,
                job=reason if kind == "system" and isinstance(reason, str) else None,
                reason=reason if isinstance(reason, str) else "",
                changed=changed,
                before={name: state[name] for name in changed if name in state},
                after={name: after[name] for name in changed if name in after},
                content_shredded=key is None,
            )
        )
        state = after
    return entries
