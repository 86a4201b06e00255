"""Writes of episodic memories: store, update, delete (shredding their keys), the embedding
backfill of memories, and the retrieval statistics search records."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Protocol

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.api import ApiError
from config.sql import rows_named
from ledger.models import Agent, Tenant
from ledger.services import (
    SYSTEM_ACTOR,
    EventDraft,
    event_append,
    events_append,
    tenant_write_lock,
)
from memory.consolidation.services import (
    DEFERRED,
    PROPOSED,
    SUPERSEDED,
    consolidation_plan,
    content_embeddings_keep_planned,
    supersedes_check,
    supersessions_apply,
)
from memory.embeddings.backends import (
    EmbeddingUnavailable,
    embed_texts,
    embedder_name,
    embedding_problem,
    unit_vector,
)
from memory.embeddings.backfill import (
    EMBEDDING_BACKFILL_BATCH,
    Embedded,
    vector_pending,
    vectors_backfill,
)
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS
from memory.episodic import policies
from memory.episodic.models import speaker_of
from memory.episodic.sealing import key_new, seal
from memory.episodic.speakers import sessions_speakers
from memory.models import Memory, MemoryKey, MemoryRole
from memory.search.keyword_index import (
    SessionPosition,
    search_documents_for_new,
    search_documents_refresh_after_insert,
    search_documents_refresh_around,
)

logger = logging.getLogger(__name__)


# --- Episodic memories -------------------------------------------------------------------------

MEMORY_EVENT_KINDS = frozenset(
    {
        "memory.stored",
        "memory.updated",
        "memory.deleted",
        "memory.archived",
        "memory.expired",
        "memory.retrieved",
        SUPERSEDED,
        PROPOSED,
    }
)


@dataclass(frozen=True)
class MemoryDraft:
    """A memory as a client asks to store it; unset fields take the store-time policies."""

    content: str
    role: str = "user"
    session_id: str = ""
    memory_type: str | None = None
    importance: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    expires_at: datetime | None = None
    occurred_at: datetime | None = None
    embedding: list[float] | None = None
    # The validity interval; valid_from defaults to occurred_at (memory.episodic.validity).
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    # Ids of the agent's older memories this one supersedes.
    supersedes: tuple[int, ...] = ()


def _memory_problem(draft: MemoryDraft, now: datetime) -> tuple[str, str] | None:
    if not draft.content.strip():
        return "empty_content", "Content is empty or only whitespace."
    if len(draft.content) > settings.MEMORY_MAX_CONTENT_CHARS:
        return (
            "content_too_long",
            f"Content has {len(draft.content)} characters; the limit is "
            f"{settings.MEMORY_MAX_CONTENT_CHARS}.",
        )
    if draft.memory_type is not None and draft.memory_type not in policies.MEMORY_TYPES:
        return (
            "invalid_memory_type",
            f"Unknown memory type {draft.memory_type!r}; use one of "
            f"{', '.join(policies.MEMORY_TYPES)}.",
        )
    if draft.importance is not None and not 0.0 <= draft.importance <= 1.0:
        return "invalid_importance", "Importance must be between 0 and 1."
    if draft.expires_at is not None and draft.expires_at <= now:
        return "expires_in_past", "expires_at must be in the future."
    if draft.embedding is not None:
        return embedding_problem(draft.embedding)
    valid_from = draft.valid_from or draft.occurred_at or now
    if draft.valid_until is not None and draft.valid_until <= valid_from:
        return "invalid_range", "valid_until must be after valid_from (occurred_at by default)."
    return None


def memory_embedding_text(
    *, content: str, role: str, metadata: dict[str, Any], when: datetime, speaker: str | None = None
) -> str:
    """What the embedder sees: "[8 May 2023] speaker: content" (measured on LoCoMo: the date and
    the speaker add as much recall as the model itself, docs/retrieval-research.md; a date in
    words beats an ISO date, R@10 0.787 -> 0.802 through the service). The speaker is the
    metadata's, else ``speaker`` (inferred from the session, memory.episodic.speakers), else
    the role."""
    named = speaker_of(role=role, metadata=metadata, inferred=speaker or "")
    return f"[{when.day} {when:%B %Y}] {named}: {content}"


class EmbeddingSource(Protocol):
    """What a memory's embedding text is made of: a stored row or a draft (no time: now)."""

    @property
    def session_id(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def metadata(self) -> dict[str, Any]: ...
    @property
    def occurred_at(self) -> datetime | None: ...


# Of each session a store touches, the most recent memories read for who speaks in it.
SPEAKER_CONTEXT_MEMORIES = 100

# The stored memories of the given sessions of one agent (the most recent
# SPEAKER_CONTEXT_MEMORIES of each, leaving out the given ids), in session order.
SESSION_TURNS_SQL = """
SELECT id, session_id, occurred_at, content, metadata ->> 'speaker' AS speaker FROM (
    SELECT m.*, row_number() OVER (
        PARTITION BY m.session_id ORDER BY m.occurred_at DESC, m.id DESC) AS recent
    FROM memory_memory AS m
    WHERE m.tenant_id = %(tenant)s AND m.agent_id = %(agent)s
      AND m.session_id = ANY(%(sessions)s) AND NOT m.id = ANY(%(ids)s)
) AS turns
WHERE recent <= %(most)s
ORDER BY session_id, occurred_at, id
"""


def memories_speakers(
    *, tenant_id: int, agent_id: int, memories: Sequence[EmbeddingSource], ids: Sequence[int]
) -> list[str | None]:
    """Who speaks each of these memories of one agent: the metadata's speaker, else the one
    their sessions' turns show (memory.episodic.speakers), else None. ``ids``: the stored ids
    among them (0 for a memory not stored yet), which are read as given, not from the table.

    Each session is read as stored with these memories in their places: after the stored ones
    of the same time (a new memory gets a larger id)."""
    given = [_given_speaker(m) for m in memories]
    sessions = sorted(
        {
            m.session_id
            for m, known in zip(memories, given, strict=True)
            if m.session_id and not known
        }
    )
    if not sessions:
        return given
    with connection.cursor() as cursor:
        cursor.execute(
            SESSION_TURNS_SQL,
            {
                "tenant": tenant_id,
                "agent": agent_id,
                "sessions": sessions,
                "ids": [pk for pk in ids if pk],
                "most": SPEAKER_CONTEXT_MEMORIES,
            },
        )
        stored = rows_named(cursor)
    now = timezone.now()
    last_id = max([int(row.id) for row in stored] + list(ids) + [0])
    # (session, time, id, position among the memories given or None, speaker, content)
    turns = [
        (row.session_id, row.occurred_at, int(row.id), None, row.speaker, row.content)
        for row in stored
    ] + [
        (m.session_id, m.occurred_at or now, pk or last_id + 1 + n, n, given[n], m.content)
        for n, (m, pk) in enumerate(zip(memories, ids, strict=True))
        if m.session_id in sessions
    ]
    turns.sort(key=lambda turn: (turn[0], turn[1], turn[2]))
    grouped: dict[str, list[tuple[int | None, str | None, str]]] = {}
    for session, _, _, position, speaker, content in turns:
        grouped.setdefault(session, []).append((position, speaker, content))
    order = list(grouped.values())
    named = sessions_speakers([[(speaker, content) for _, speaker, content in t] for t in order])
    out = list(given)
    for session_turns, speakers in zip(order, named, strict=True):
        for (position, _, _), speaker in zip(session_turns, speakers, strict=True):
            if position is not None:
                out[position] = speaker
    return out


def _given_speaker(memory: EmbeddingSource) -> str | None:
    return str(memory.metadata.get("speaker") or "") or None


def memory_embedding_texts(
    *, tenant_id: int, agent_id: int, memories: Sequence[EmbeddingSource], ids: Sequence[int]
) -> list[str]:
    """The embedding texts of these memories of one agent, the speakers their sessions show
    filled in where the client gave none (``memories_speakers``)."""
    speakers = memories_speakers(tenant_id=tenant_id, agent_id=agent_id, memories=memories, ids=ids)
    now = timezone.now()
    return [
        memory_embedding_text(
            content=m.content,
            role=m.role,
            metadata=m.metadata,
            when=m.occurred_at or now,
            speaker=speaker,
        )
        for m, speaker in zip(memories, speakers, strict=True)
    ]


# Memories one store call takes: the batch is embedded, written and logged in one go.
MEMORY_BATCH_MAX = 1000


def memories_store(
    *,
    agent: Agent,
    drafts: Sequence[MemoryDraft],
    actor: str,
    defer_consolidation: bool | None = None,
) -> list[Memory]:
    """Store memories for an agent: all of them or, if one is invalid, none (its index is named).
    At most ``MEMORY_BATCH_MAX`` at once.

    Each memory is embedded before the transaction (searchable when this returns); if the
    embedder is down the memory is stored without a vector for the backfill job to fill.
    ``defer_consolidation``: explicit ``supersedes`` are applied now, the neighbours are judged
    after the commit by a Celery task (``memories_consolidate``), off the caller's time; by
    default (None) a batch of more than one is, under ``CONSOLIDATION_DEFER_BATCHES``.
    """
    if defer_consolidation is None:
        defer_consolidation = settings.CONSOLIDATION_DEFER_BATCHES and len(drafts) > 1
    if len(drafts) > MEMORY_BATCH_MAX:
        # The answer the API gave while this rule lived in its serializer, kept for clients.
        raise ApiError(
            code="validation_error",
            message="Some fields are missing or invalid; see details.",
            details={"memories": [f"A batch holds at most {MEMORY_BATCH_MAX} memories."]},
        )
    now = timezone.now()
    for index, draft in enumerate(drafts):
        problem = _memory_problem(draft, now)
        if problem is not None:
            code, message = problem
            prefix = f"Memory {index}: " if len(drafts) > 1 else ""
            raise ApiError(code=code, message=prefix + message, details={"index": index})
    explicit = [pk for draft in drafts for pk in draft.supersedes]
    if explicit:
        supersedes_check(agent=agent, ids=explicit)
    rows = []
    for draft in drafts:
        memory_type = draft.memory_type or policies.memory_type_infer(
            content=draft.content, role=draft.role, metadata=draft.metadata
        )
        importance = (
            draft.importance
            if draft.importance is not None
            else policies.importance_estimate(
                content=draft.content,
                role=draft.role,
                memory_type=memory_type,
                metadata=draft.metadata,
            )
        )
        occurred_at = draft.occurred_at or now
        rows.append(
            Memory(
                tenant_id=agent.tenant_id,
                agent=agent,
                session_id=draft.session_id,
                role=draft.role,
                content=draft.content,
                memory_type=memory_type,
                importance=importance,
                # Checked by _memory_problem: a unit vector, like the embedder's.
                embedding=None if draft.embedding is None else unit_vector(draft.embedding),
                content_hash=policies.content_hash(draft.content),
                metadata=draft.metadata,
                tags=draft.tags,
                occurred_at=occurred_at,
                valid_from=draft.valid_from or occurred_at,
                valid_until=draft.valid_until,
                created_at=now,
                updated_at=now,
                expires_at=draft.expires_at
                or policies.expires_at_default(memory_type=memory_type, created_at=now),
            )
        )
    _speakers_fill(rows)
    _embed_missing(rows)
    # Neighbours (and the model, when configured) are read before the tenant's lock is taken.
    plans = [
        consolidation_plan(
            agent=agent,
            memory=row,
            explicit=draft.supersedes,
            use_model=len(drafts) == 1,
            deferred=defer_consolidation,
        )
        for row, draft in zip(rows, drafts, strict=True)
    ]
    # No savepoint inside a caller's transaction, as in _memories_write: a supersession refused
    # here refuses the whole store.
    with transaction.atomic(savepoint=False):
        stored = _memories_write(agent=agent, rows=rows, actor=actor, histories=None)
        for memory, plan in zip(stored, plans, strict=True):
            memory.consolidation = supersessions_apply(
                memory=memory, plan=plan, actor=actor, now=now
            )
        content_embeddings_keep_planned(list(zip(stored, plans, strict=True)))
        if any(plan.decision == DEFERRED for plan in plans):
            ids = [memory.pk for memory in stored]
            transaction.on_commit(partial(_consolidation_publish, ids, actor), robust=True)
    return stored


def _consolidation_publish(memory_ids: list[int], actor: str) -> None:
    """After the commit; a broker that is down loses the judgement, never the memories
    (``robust``: the failure is logged, the store answers)."""
    from memory.tasks import memories_consolidate_task  # the tasks module imports this one

    memories_consolidate_task.delay(memory_ids, actor)


def _memories_write(
    *, agent: Agent, rows: list[Memory], actor: str, histories: Sequence[Any] | None
) -> list[Memory]:
    """Insert the rows (embedded by the caller, as far as the embedder could), their keys and
    their events. ``histories``: the rows are imported, and these are their recorded histories."""
    # No savepoint inside a caller's transaction: rows without their events must never commit.
    with transaction.atomic(savepoint=False):
        tenant_write_lock(agent.tenant)
        search_documents_for_new(rows)
        stored = Memory.objects.bulk_create(rows)
        search_documents_refresh_after_insert([_session_position(memory) for memory in stored])
        keys = [MemoryKey(memory_id=m.pk, tenant_id=m.tenant_id, key=key_new()) for m in stored]
        MemoryKey.objects.bulk_create(keys)
        events_append(
            tenant=agent.tenant,
            drafts=[
                EventDraft(
                    kind="memory.stored",
                    actor=actor,
                    payload=_stored_payload(
                        memory, key.key, history=None if histories is None else histories[n]
                    ),
                )
                for n, (memory, key) in enumerate(zip(stored, keys, strict=True))
            ],
        )
    return stored


@dataclass(frozen=True)
class MemoryRecord:
    """A memory as an export recorded it: every field, its lifecycle's times included."""

    content: str
    role: str
    session_id: str
    memory_type: str
    importance: float
    metadata: dict[str, Any]
    tags: list[str]
    occurred_at: datetime
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    last_retrieved_at: datetime | None
    retrieval_count: int
    archived_at: datetime | None
    # Its validity interval: valid_from defaults to occurred_at; valid_until only when it
    # ended without a successor (a supersession is replayed after the store, by its service).
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    # Its events where it was recorded (kind, actor, time): kept, as the ledger here cannot be.
    history: list[dict[str, Any]] = field(default_factory=list)


def memory_record_problem(record: MemoryRecord) -> tuple[str, str] | None:
    """What is wrong with a recorded memory, as ``(code, message)``; None when it can be kept.

    The store's rules except the one about time: an export may hold memories that have expired
    since (the TTL job removes them after the import as it would have before).
    """
    problem = _memory_problem(
        MemoryDraft(
            content=record.content,
            role=record.role,
            memory_type=record.memory_type,
            importance=record.importance,
        ),
        timezone.now(),
    )
    if problem is None and record.role not in MemoryRole.values:
        return "invalid_role", f"Unknown role {record.role!r}; use one of {', '.join(MemoryRole)}."
    if problem is None and record.retrieval_count < 0:
        return "invalid_retrieval_count", "retrieval_count must be 0 or more."
    valid_from = record.valid_from or record.occurred_at
    if problem is None and record.valid_until is not None and record.valid_until <= valid_from:
        return "invalid_range", "valid_until must be after valid_from (occurred_at by default)."
    return problem


def memories_import(*, agent: Agent, records: Sequence[MemoryRecord], actor: str) -> list[Memory]:
    """Store memories exactly as an export recorded them (at most ``MEMORY_BATCH_MAX``):
    their store, update, retrieval and archive times and counts are kept, not reset to now.

    Each is a ``memory.stored`` event like any store, whose payload also carries those recorded
    fields (``imported``), so a rebuild replays them too. Vectors are recomputed, not imported.
    """
    for index, record in enumerate(records):
        problem = memory_record_problem(record)
        if problem is not None:
            code, message = problem
            raise ApiError(code=code, message=message, details={"index": index})
    rows = [
        Memory(
            tenant_id=agent.tenant_id,
            agent=agent,
            session_id=r.session_id,
            role=r.role,
            content=r.content,
            memory_type=r.memory_type,
            importance=r.importance,
            content_hash=policies.content_hash(r.content),
            metadata=r.metadata,
            tags=r.tags,
            occurred_at=r.occurred_at,
            valid_from=r.valid_from or r.occurred_at,
            valid_until=r.valid_until,
            created_at=r.created_at,
            updated_at=r.updated_at,
            expires_at=r.expires_at,
            last_retrieved_at=r.last_retrieved_at,
            retrieval_count=r.retrieval_count,
            archived_at=r.archived_at,
        )
        for r in records
    ]
    _speakers_fill(rows)
    _embed_missing(rows)
    return _memories_write(
        agent=agent, rows=rows, actor=actor, histories=[r.history for r in records]
    )


def _session_position(memory: Memory) -> SessionPosition:
    return (memory.tenant_id, memory.agent_id, memory.session_id, memory.occurred_at, memory.pk)


def _speakers_fill(rows: Sequence[Memory]) -> None:
    """Set each row's ``speaker`` (memories_speakers), one read of its agent's sessions."""
    by_agent: dict[tuple[int, int], list[Memory]] = {}
    for memory in rows:
        by_agent.setdefault((memory.tenant_id, memory.agent_id), []).append(memory)
    for (tenant_id, agent_id), agent_rows in by_agent.items():
        speakers = memories_speakers(
            tenant_id=tenant_id,
            agent_id=agent_id,
            memories=agent_rows,
            ids=[memory.pk or 0 for memory in agent_rows],
        )
        for memory, speaker in zip(agent_rows, speakers, strict=True):
            memory.speaker = speaker or ""


def memories_speakers_refresh(memory_ids: Sequence[int]) -> None:
    """Infer the ``speaker`` of these memories again from their sessions as stored (a rebuild
    wrote them without one) and save it where it changed."""
    rows = list(
        Memory.objects.filter(pk__in=memory_ids)
        .order_by("id")
        .only("id", "tenant_id", "agent_id", "session_id", "occurred_at", "content", "metadata")
    )
    before = {memory.pk: memory.speaker for memory in rows}
    _speakers_fill(rows)
    Memory.objects.bulk_update(
        [memory for memory in rows if memory.speaker != before[memory.pk]], ["speaker"]
    )


def _embed_missing(rows: Sequence[Memory]) -> None:
    """Embed the rows without a vector, their ``speaker`` set (``_speakers_fill``)."""
    missing = [memory for memory in rows if memory.embedding is None]
    if not missing:
        return
    try:
        vectors = embed_texts(
            [
                memory_embedding_text(
                    content=m.content,
                    role=m.role,
                    metadata=m.metadata,
                    when=m.occurred_at,
                    speaker=m.speaker,
                )
                for m in missing
            ]
        )
        model = embedder_name()
    except EmbeddingUnavailable as exc:
        logger.warning("storing %d memories without vectors for now: %s", len(missing), exc)
        return
    for memory, vector in zip(missing, vectors, strict=True):
        if len(vector) == LOCAL_DIMENSIONS:
            memory.embedding = vector
            memory.embedding_model = model


def _stored_payload(
    memory: Memory, key: str, *, history: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The ledger's copy: searchable facts in the clear, the content and metadata sealed. An
    imported memory's (``history`` given) adds the times, counts and history its export
    recorded."""
    payload = {
        "memory_id": memory.pk,
        "agent_id": memory.agent_id,
        "session_id": memory.session_id,
        "role": memory.role,
        "memory_type": memory.memory_type,
        "importance": memory.importance,
        "tags": list(memory.tags),
        "occurred_at": memory.occurred_at.isoformat(),
        "valid_from": memory.valid_from.isoformat(),
        "valid_until": memory.valid_until.isoformat() if memory.valid_until else None,
        "expires_at": memory.expires_at.isoformat() if memory.expires_at else None,
        "sealed": seal(
            key=key,
            document={
                "content": memory.content,
                "metadata": memory.metadata,
                "content_hash": memory.content_hash,
            },
        ),
    }
    if history is not None:
        payload["imported"] = {
            "created_at": memory.created_at.isoformat(),
            "updated_at": memory.updated_at.isoformat(),
            "last_retrieved_at": _iso(memory.last_retrieved_at),
            "retrieval_count": memory.retrieval_count,
            "archived_at": _iso(memory.archived_at),
            "history": history,
        }
    return payload


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def memory_delete(*, memory: Memory, actor: str, reason: str = "") -> None:
    """Delete a memory for good: the row, and the key that opens its content in the ledger.

    The ``memory.deleted`` event records that it happened, never what it said.
    """
    with transaction.atomic():
        tenant_write_lock(memory.tenant)
        event_append(
            tenant=memory.tenant,
            kind="memory.deleted",
            actor=actor,
            payload={"memory_id": memory.pk, "agent_id": memory.agent_id, "reason": reason},
        )
        MemoryKey.objects.filter(memory_id=memory.pk).delete()
        position = _session_position(memory)
        memory.delete()
        search_documents_refresh_around([position])


def agent_memory_keys_shred(*, agent: Agent) -> dict[str, int]:
    """Destroy the keys of the agent's memories, as its deletion begins (registered with
    ``ledger.projections`` as an agent deletion step).

    A key is linked to its memory by id only, so the cascade that takes the memories would leave
    the keys, and with them the content sealed in the ledger readable. The memories themselves
    go with the agent.
    """
    shredded, _ = MemoryKey.objects.filter(
        tenant_id=agent.tenant_id,
        memory_id__in=Memory.objects.filter(agent=agent).values("pk"),
    ).delete()
    return {MemoryKey._meta.label: shredded}


MEMORY_EDITABLE_FIELDS = frozenset(
    {"content", "memory_type", "importance", "tags", "metadata", "expires_at"}
)


# A reason or note a write carries, kept in the clear in its event (it survives a deletion).
MEMORY_REASON_MAX_CHARS = 500


def memory_update(
    *, memory: Memory, actor: str, changes: dict[str, Any], reason: str = ""
) -> Memory:
    """Change a memory; the ``memory.updated`` event carries the new values (content sealed),
    which of the sealed fields changed, and the writer's ``reason``."""
    unknown = set(changes) - MEMORY_EDITABLE_FIELDS
    if unknown:
        raise ApiError(
            code="field_not_editable", message=f"Cannot change: {', '.join(sorted(unknown))}."
        )
    merged = MemoryDraft(
        content=changes.get("content", memory.content),
        role=memory.role,
        memory_type=changes.get("memory_type", memory.memory_type),
        importance=changes.get("importance", memory.importance),
        expires_at=changes.get("expires_at"),
    )
    problem = _memory_problem(merged, timezone.now())
    if problem is not None:
        code, message = problem
        raise ApiError(code=code, message=message)
    for name, value in changes.items():
        setattr(memory, name, value)
    if "content" in changes:
        memory.content_hash = policies.content_hash(memory.content)
        memory.embedding = None
        _speakers_fill([memory])
        _embed_missing([memory])
    memory.updated_at = timezone.now()
    key = MemoryKey.objects.get(memory_id=memory.pk).key
    clear = {
        name: (value.isoformat() if isinstance(value, datetime) else value)
        for name, value in changes.items()
        if name not in ("content", "metadata")
    }
    sealed_fields = sorted({"content", "metadata"}.intersection(changes))
    if sealed_fields:
        clear["sealed"] = seal(
            key=key,
            document={
                "content": memory.content,
                "metadata": memory.metadata,
                "content_hash": memory.content_hash,
            },
        )
    with transaction.atomic():
        tenant_write_lock(memory.tenant)
        memory.save()
        if sealed_fields:
            search_documents_refresh_around([_session_position(memory)])
        event_append(
            tenant=memory.tenant,
            kind="memory.updated",
            actor=actor,
            payload={
                "memory_id": memory.pk,
                "agent_id": memory.agent_id,
                "changes": clear,
                # The history names what changed even once the sealed values are shredded.
                "sealed_fields": sealed_fields,
                "reason": reason,
            },
        )
    return memory


def memory_embeddings_backfill(*, batch_size: int = EMBEDDING_BACKFILL_BATCH) -> int:
    """Embed active memories stored while the embedder was unavailable, or embedded by another
    model. Returns rows filled."""
    return vectors_backfill(
        pending=Memory.objects.active()
        .filter(vector_pending())
        .only("id", "content", "role", "metadata", "speaker", "occurred_at"),
        vectors=_memory_vectors,
        batch_size=batch_size,
    )


def _memory_vectors(memories: list[Memory]) -> dict[int, Embedded]:
    for memory in memories:
        memory.embedding = None  # pending: none yet, or another model's
    _embed_missing(memories)
    return {
        memory.pk: (memory.embedding, memory.embedding_model)
        for memory in memories
        if memory.embedding is not None
    }


def memories_mark_retrieved(*, tenant: Tenant, memory_ids: Sequence[int], at: datetime) -> int:
    """Record that a search returned these memories: it resets their decay clock (SPEC 4).

    Logged as one ``memory.retrieved`` event so a rebuild keeps the statistics. Returns how many
    memories still existed to be marked.
    """
    return memories_mark_retrieved_batch(tenant=tenant, retrievals=[(memory_ids, at)])


def memories_mark_retrieved_batch(
    *, tenant: Tenant, retrievals: Sequence[tuple[Sequence[int], datetime]]
) -> int:
    """Several searches' retrievals at once, exactly as if each were recorded alone (a memory
    returned by three searches counts three), in one transaction, one UPDATE and one chain
    append of one ``memory.retrieved`` event per search. The search's recorder sends what piled
    up while it was queueing: one task per tenant instead of one per search. Returns how many
    (memory, search) pairs were marked.
    """
    ids = [memory_id for memory_ids, _ in retrievals for memory_id in set(memory_ids)]
    ats = [at for memory_ids, at in retrievals for _ in set(memory_ids)]
    with transaction.atomic(), connection.cursor() as cursor:
        tenant_write_lock(tenant)
        cursor.execute(
            """
            UPDATE memory_memory AS m
            SET last_retrieved_at = greatest(coalesce(m.last_retrieved_at, r.at), r.at),
                retrieval_count = m.retrieval_count + r.times
            FROM (
                SELECT id, count(*) AS times, max(at) AS at
                FROM unnest(%(ids)s::bigint[], %(ats)s::timestamptz[]) AS r (id, at)
                GROUP BY id
            ) AS r
            WHERE m.tenant_id = %(tenant)s AND m.id = r.id
            RETURNING m.id
            """,
            {"tenant": tenant.pk, "ids": ids, "ats": ats},
        )
        existing = {int(row.id) for row in rows_named(cursor)}
        drafts = [
            EventDraft(
                kind="memory.retrieved",
                actor=SYSTEM_ACTOR,
                payload={"memory_ids": marked, "retrieved_at": at.isoformat()},
            )
            for memory_ids, at in retrievals
            if (marked := sorted(existing.intersection(int(i) for i in memory_ids)))
        ]
        events_append(tenant=tenant, drafts=drafts)
    return sum(len(draft.payload["memory_ids"]) for draft in drafts)
