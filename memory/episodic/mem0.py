"""A way in from mem0: the memories its ``get_all`` returns, stored as episodic memories.

mem0 (``mem0/memory/main.py``, ``Memory.get_all`` and ``_get_all_from_vector_store``) answers
``{"results": [...]}`` (output format v1.1, the only one of current releases; with graph memory
also ``"relations"``, which we leave out), or a plain list (v1.0). Each record is a
``MemoryItem`` dump: ``id``, ``memory`` (the text), ``hash``, ``metadata`` (null or an object),
``created_at``, ``updated_at`` (ISO 8601, usually with an offset), plus the keys mem0 promotes out
of its payload when present: ``user_id``, ``agent_id``, ``run_id``, ``actor_id``, ``role``, and,
in the hosted platform's answer, ``app_id``, ``categories``, ``immutable``,
``expiration_date``.

How a record becomes one of our memories (docs/integrations.md#moving-from-mem0):

- agent: the ``agent`` given to the import when there is one, else the record's ``agent_id``
  (an agent of that name is created when missing); a record with neither is refused;
- ``run_id`` is the session; ``role`` is kept when it is one of ours, else ``user``;
- ``created_at`` is when it happened (``occurred_at``); the store time is the import's;
- ``categories`` become tags; type and importance are inferred as for any memory stored without
  them, except that what would be a ``conversation`` is a ``fact`` (mem0 keeps facts it distilled,
  not turns);
- ``expiration_date`` is the expiry (a record already expired is skipped); without one, the
  type's default TTL counts from the import, as for a memory stored today;
- the record's ``metadata`` is kept as ours, and everything else mem0 said of it (its id,
  hash, user, agent, run, actor, app, times, ``immutable``) under ``metadata["mem0"]``.

The import is idempotent: a record whose mem0 id is already in the tenant (``metadata.mem0.id``)
is skipped, so running it again after a partial failure or with a newer dump adds only what is
new. Every record is checked before anything is written, and the writes are one transaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_date

from config.api import ApiError
from config.datetimes import client_datetime_parse
from ledger.models import Agent, Tenant
from ledger.names import agent_name_key
from ledger.services import agent_create, agent_name_clean, tenant_write_lock
from memory.episodic import policies
from memory.episodic.services import MEMORY_BATCH_MAX, MemoryDraft, memories_store
from memory.models import Memory, MemoryRole

# What mem0 says of a record beyond its text and metadata, kept under metadata["mem0"].
_TRACED = (
    "id",
    "hash",
    "user_id",
    "agent_id",
    "run_id",
    "actor_id",
    "app_id",
    "created_at",
    "updated_at",
    "immutable",
)
_TAG_MAX_CHARS = 100
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _invalid(index: int, problem: str) -> ApiError:
    return ApiError(
        code="invalid_mem0_record",
        message=f"record {index}: {problem}",
        details={"index": index, "problem": problem},
    )


def mem0_records(document: Any) -> list[Any]:
    """The records of a ``get_all`` answer in either of mem0's output formats."""
    if isinstance(document, dict) and isinstance(document.get("results"), list):
        return list(document["results"])
    if isinstance(document, list):
        return document
    raise ApiError(
        code="invalid_mem0_document",
        message='Not a mem0 get_all answer: expected {"results": [...]} or a list of memories.',
    )


@dataclass(frozen=True)
class Mem0Memory:
    """One mem0 record read: whose it is, and the memory to store."""

    mem0_id: str
    agent_name: str
    draft: MemoryDraft


def _text(record: dict[str, Any], key: str, index: int) -> str | None:
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise _invalid(index, f"{key} must be a string")
    return str(value)


def _moment(record: dict[str, Any], key: str, index: int) -> datetime | None:
    raw = record.get(key)
    if raw is None or raw == "":
        return None
    moment = client_datetime_parse(raw) if isinstance(raw, str) else None
    if moment is None and isinstance(raw, str):
        # The platform writes expiration_date as a date: the day starts at midnight UTC.
        try:
            day = parse_date(raw.strip()) if _DATE.fullmatch(raw.strip()) else None
        except ValueError:  # a well-formed but impossible date: 2024-02-30
            day = None
        moment = None if day is None else datetime.combine(day, time.min, tzinfo=UTC)
    if moment is None:
        raise _invalid(index, f"{key} is not an ISO 8601 time: {raw!r}")
    return moment


def mem0_memory_read(
    record: Any, *, index: int, agent: str | None, now: datetime
) -> Mem0Memory | None:
    """One record as a memory to store, or None when mem0 says it has expired."""
    if not isinstance(record, dict):
        raise _invalid(index, "must be an object")
    mem0_id = _text(record, "id", index)
    if not mem0_id:
        raise _invalid(index, "has no id")
    content = record.get("memory")
    if not isinstance(content, str) or not content.strip():
        raise _invalid(index, "memory (the text) is missing or empty")
    agent_name = agent or _text(record, "agent_id", index)
    if not agent_name:
        raise _invalid(index, "has no agent_id; name the agent to import it into (--agent)")
    metadata = record.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise _invalid(index, "metadata must be an object or null")
    expires_at = _moment(record, "expiration_date", index)
    if expires_at is not None and expires_at <= now:
        return None
    categories = record.get("categories") or []
    if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
        raise _invalid(index, "categories must be a list of strings")
    role = record.get("role")
    role = role if role in MemoryRole.values else MemoryRole.USER
    traced = {key: record[key] for key in _TRACED if record.get(key) is not None}
    memory_type = policies.memory_type_infer(content=content, role=role, metadata=metadata)
    return Mem0Memory(
        mem0_id=mem0_id,
        agent_name=agent_name,
        draft=MemoryDraft(
            content=content,
            role=role,
            # mem0 keeps facts it distilled from conversations, never the turns themselves.
            memory_type=policies.FACT if memory_type == policies.CONVERSATION else memory_type,
            session_id=_text(record, "run_id", index) or "",
            metadata={**metadata, "mem0": traced},
            tags=list(dict.fromkeys(c[:_TAG_MAX_CHARS] for c in categories if c.strip())),
            occurred_at=_moment(record, "created_at", index),
            expires_at=expires_at,
        ),
    )


@dataclass
class Mem0ImportSummary:
    records: int = 0
    imported: int = 0
    already_imported: int = 0
    expired: int = 0
    agents_created: list[str] = field(default_factory=list)


def _already_imported(tenant: Tenant, ids: Sequence[str]) -> set[str]:
    return {
        str(value)
        for value in Memory.objects.filter(tenant=tenant, metadata__mem0__id__in=list(ids))
        .values_list("metadata__mem0__id", flat=True)
        .iterator()
    }


def mem0_memories_import(
    *,
    tenant: Tenant,
    document: Any,
    actor: str,
    agent: str | None = None,
    on_step: Callable[[int], object] | None = None,
) -> Mem0ImportSummary:
    """Store a mem0 ``get_all`` answer's memories in ``tenant`` (see the module's docstring):
    all that are new, or (when one record is bad, named by its index) none. ``on_step`` hears
    how many records each step settled (a progress bar's steps)."""
    step = on_step or (lambda _: None)
    now = timezone.now()
    records = mem0_records(document)
    summary = Mem0ImportSummary(records=len(records))
    default_agent = agent_name_clean(agent) if agent else None
    read: list[Mem0Memory] = []
    seen: set[str] = set()
    for index, record in enumerate(records):
        memory = mem0_memory_read(record, index=index, agent=default_agent, now=now)
        if memory is None:
            summary.expired += 1
        elif memory.mem0_id in seen:
            summary.already_imported += 1
        else:
            seen.add(memory.mem0_id)
            read.append(memory)
    with transaction.atomic():
        tenant_write_lock(tenant)
        known = _already_imported(tenant, [m.mem0_id for m in read])
        fresh = [m for m in read if m.mem0_id not in known]
        summary.already_imported += len(read) - len(fresh)
        step(len(records) - len(fresh))
        agents = _agents(tenant, {m.agent_name for m in fresh}, actor, summary)
        for name in sorted(agents):
            drafts = [m.draft for m in fresh if m.agent_name == name]
            for start in range(0, len(drafts), MEMORY_BATCH_MAX):
                batch = drafts[start : start + MEMORY_BATCH_MAX]
                memories_store(agent=agents[name], drafts=batch, actor=actor)
                step(len(batch))
            summary.imported += len(drafts)
    return summary


def _agents(
    tenant: Tenant, names: set[str], actor: str, summary: Mem0ImportSummary
) -> dict[str, Agent]:
    """The agents the memories go to, created when missing (their names cleaned as any)."""
    agents: dict[str, Agent] = {}
    for name in sorted(names):
        clean = agent_name_clean(name)
        agent = Agent.objects.filter(tenant=tenant, name_key=agent_name_key(clean)).first()
        if agent is None:
            agent = agent_create(tenant=tenant, name=clean, actor=actor)
            summary.agents_created.append(clean)
        agents[name] = agent
    return agents
