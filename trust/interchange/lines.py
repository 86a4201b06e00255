"""The full export: one agent or a whole tenant as JSON Lines
(docs/integrations.md#export-and-import).

Each line is one JSON object whose ``type`` says what it holds, written in the order an import
needs them: the ``header``; for a tenant, the ``rubric_version`` lines and the
``knowledge_document`` lines (shared by every agent); one ``agent`` line per agent (its trust
record, the per-agent document of ``selectors.agent_export``); then every ``memory`` and every
``content_item``, in the order they were stored (an item's ``related_to`` names earlier items).
A memory line's ``superseded_by`` names its successor by position among the document's memory
lines (0 the first); the import stores the memories, then replays the supersessions.

The document names nothing of the installation it came from: no tenant, no row ids, no time of
export. Agents are named, items keep their own short ids (conversations quote them). Times a
write here would set (a knowledge document's creation, an item's store time) are left out, so
export, import into an empty tenant and export again gives the same bytes
(tests/trust/test_export_lines.py). Vectors are derived and recomputed by the import.

Rows are read with server-side cursors in chunks, so a tenant is never held in memory; in a
transaction of its own (outside a request's), the export reads one REPEATABLE READ snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet

from ledger.models import Agent, Tenant
from memory.content.values import item_value
from memory.models import ContentItem, KnowledgeDocument, Memory
from trust.governance.models import RubricVersion
from trust.interchange.selectors import agent_export, timestamp_text

FORMAT = "agent-memory-export"
VERSION = 1
_CHUNK = 500
# What the per-agent document holds that is computed at the time of export, not recorded.
_AGENT_DERIVED = ("long_term_stats",)


def export_line(value: dict[str, Any]) -> str:
    """One line of the document: keys sorted, UTF-8 as is, no spaces, so bytes compare."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class ExportScope:
    """What an export covers: the whole tenant, or one of its agents (its own rows only: the
    knowledge base and the rubric are the tenant's)."""

    tenant: Tenant
    agent: Agent | None = None

    def agents(self) -> QuerySet[Agent]:
        agents = Agent.objects.filter(tenant=self.tenant)
        if self.agent is not None:
            agents = agents.filter(pk=self.agent.pk)
        return agents.order_by("name", "id")

    def memories(self) -> QuerySet[Memory]:
        memories = Memory.objects.filter(tenant=self.tenant)
        if self.agent is not None:
            memories = memories.filter(agent=self.agent)
        return memories.order_by("id")

    def content_items(self) -> QuerySet[ContentItem]:
        # A cleared item has lost its content: what is left is the audit's, not the agent's.
        items = ContentItem.objects.filter(tenant=self.tenant, cleared_at__isnull=True)
        if self.agent is not None:
            items = items.filter(agent=self.agent)
        return items.order_by("id")

    def rubric_versions(self) -> QuerySet[RubricVersion]:
        if self.agent is not None:
            return RubricVersion.objects.none()
        return RubricVersion.objects.filter(tenant=self.tenant).order_by("number")

    def knowledge_documents(self) -> QuerySet[KnowledgeDocument]:
        if self.agent is not None:
            return KnowledgeDocument.objects.none()
        return KnowledgeDocument.objects.filter(tenant=self.tenant).order_by("id")


def export_line_count(scope: ExportScope) -> int:
    """How many lines ``export_lines`` will write (for a progress bar's total)."""
    return (
        1
        + scope.rubric_versions().count()
        + scope.knowledge_documents().count()
        + scope.agents().count()
        + scope.memories().count()
        + scope.content_items().count()
    )


@contextmanager
def _snapshot() -> Iterator[None]:
    """One consistent view of the tenant for the whole export, when we own the transaction."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def export_lines(scope: ExportScope) -> Iterator[tuple[str, str]]:
    """The document, line by line: each line's type and its text (without a newline)."""
    with _snapshot():
        header: dict[str, Any] = {"type": "header", "format": FORMAT, "version": VERSION}
        header["scope"] = "tenant" if scope.agent is None else "agent"
        yield "header", export_line(header)
        for version in scope.rubric_versions().prefetch_related("criteria"):
            yield "rubric_version", export_line(_rubric_version(version))
        for document in scope.knowledge_documents().iterator(chunk_size=_CHUNK):
            yield "knowledge_document", export_line(_knowledge_document(document))
        names: dict[int, str] = {}
        for agent in scope.agents().iterator(chunk_size=_CHUNK):
            names[agent.pk] = agent.name
            record = agent_export(agent=agent)
            for key in _AGENT_DERIVED:
                record.pop(key)
            yield "agent", export_line({"type": "agent", **record})
        successors = _successor_positions(scope)
        histories = memory_histories(scope)
        history: tuple[int, list[dict[str, Any]]] | None = next(histories, None)
        for memory in scope.memories().iterator(chunk_size=_CHUNK):
            # Both in memory id order: a merge, never a query per memory.
            while history is not None and history[0] < memory.pk:
                history = next(histories, None)
            events = history[1] if history is not None and history[0] == memory.pk else []
            line = _memory(memory, names[memory.agent_id], events)
            successor = memory.superseded_by
            line["superseded_by"] = None if successor is None else successors.get(successor)
            yield "memory", export_line(line)
        for item in scope.content_items().iterator(chunk_size=_CHUNK):
            yield "content_item", export_line(_content_item(item, names[item.agent_id]))


def _successor_positions(scope: ExportScope) -> dict[int, int]:
    """Each successor's position among the exported memories (id order), by its id: one query,
    answering only for the memories that superseded another. A successor since deleted has
    none, and its predecessors' ``superseded_by`` is null (their ``valid_until`` stays)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT id, position FROM (
                SELECT id, row_number() OVER (ORDER BY id) - 1 AS position
                FROM memory_memory
                WHERE tenant_id = %(tenant)s AND (%(agent)s::bigint IS NULL OR agent_id = %(agent)s)
            ) AS exported
            WHERE id IN (
                SELECT superseded_by FROM memory_memory
                WHERE tenant_id = %(tenant)s AND superseded_by IS NOT NULL
            )
            """,
            {"tenant": scope.tenant.pk, "agent": scope.agent.pk if scope.agent else None},
        )
        return {int(pk): int(position) for pk, position in cursor.fetchall()}


def memory_histories(scope: ExportScope) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """Each memory's history, in memory id order: its ``memory.stored`` and ``memory.updated``
    events (kind, actor, time), as ``GET memories/{id}/history/`` lists them. An imported memory's
    store event holds the history its export recorded, which stands in for that event.

    One pass over the tenant's memory events, sorted by PostgreSQL and read in chunks through a
    server-side cursor.
    """
    with connection.chunked_cursor() as cursor:
        cursor.execute(
            """
            SELECT (payload->>'memory_id')::bigint AS memory_id, kind, actor, created_at,
                   payload->'imported'->'history' AS recorded
            FROM ledger_event
            WHERE tenant_id = %(tenant)s AND kind IN ('memory.stored', 'memory.updated')
              AND (%(agent)s::text IS NULL OR payload->>'agent_id' = %(agent)s)
            ORDER BY memory_id, seq
            """,
            {"tenant": scope.tenant.pk, "agent": str(scope.agent.pk) if scope.agent else None},
        )
        current: int | None = None
        entries: list[dict[str, Any]] = []
        while rows := cursor.fetchmany(_CHUNK):
            for memory_id, kind, actor, at, recorded in rows:
                if memory_id != current:
                    if current is not None:
                        yield current, entries
                    current, entries = memory_id, []
                if recorded is not None:
                    # Django has psycopg hand jsonb over as text, for its JSONField to decode.
                    entries.extend(json.loads(recorded) if isinstance(recorded, str) else recorded)
                else:
                    entries.append({"kind": kind, "actor": actor, "at": timestamp_text(at)})
        if current is not None:
            yield current, entries


def _rubric_version(version: RubricVersion) -> dict[str, Any]:
    return {
        "type": "rubric_version",
        "number": version.number,
        "created_at": timestamp_text(version.created_at),
        "created_by": version.created_by,
        "note": version.note,
        "criteria": [
            {"name": c.name, "description": c.description}
            for c in sorted(version.criteria.all(), key=lambda c: c.pk)
        ],
    }


def _knowledge_document(document: KnowledgeDocument) -> dict[str, Any]:
    return {
        "type": "knowledge_document",
        "title": document.title,
        "category": document.category,
        "kind": document.kind,
        "body": document.body,
        "applies_to": list(document.applies_to),
        "published": document.published,
    }


def _memory(memory: Memory, agent: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "memory",
        "agent": agent,
        "session_id": memory.session_id,
        "role": memory.role,
        "content": memory.content,
        "memory_type": memory.memory_type,
        "importance": memory.importance,
        "metadata": memory.metadata,
        "tags": list(memory.tags),
        "occurred_at": timestamp_text(memory.occurred_at),
        # Its history: when it was stored and last changed, how often and when last retrieved,
        # when it expires and whether decay or the quota archived it.
        "created_at": timestamp_text(memory.created_at),
        "updated_at": timestamp_text(memory.updated_at),
        "expires_at": timestamp_text(memory.expires_at),
        "last_retrieved_at": timestamp_text(memory.last_retrieved_at),
        "retrieval_count": memory.retrieval_count,
        "archived_at": timestamp_text(memory.archived_at),
        # Its validity interval (superseded_by, its successor's position, is set by the caller).
        "valid_from": timestamp_text(memory.valid_from),
        "valid_until": timestamp_text(memory.valid_until),
        "history": history,
    }


def _content_item(item: ContentItem, agent: str) -> dict[str, Any]:
    line: dict[str, Any] = {
        "type": "content_item",
        "agent": agent,
        "id": item.key,
        "item_type": item.item_type,
        "scope": item.scope,
        "run_id": item.run_id,
        "content": item_value(item),
        "source": item.source,
        "tags": list(item.tags),
        "related_to": list(item.related_to),
        "timestamp": timestamp_text(item.timestamp),
    }
    if item.action_type:
        line["action"] = {
            "action_type": item.action_type,
            "rendering": item.rendering,
            "compactor": item.compactor,
            "tokens_returned": item.tokens_returned,
        }
    return line
