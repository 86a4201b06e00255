"""Import of the full export (``trust.interchange.lines``): the document, line by line, through
the services that write each kind of row, so every row has the ledger events a rebuild replays.

The whole import is one transaction holding the tenant's write lock: a malformed line (named by
its number) or a refused write leaves nothing behind. Lines are read one at a time and memories
stored in batches, so a large document is never held in memory (the transaction is, by
PostgreSQL, not by us). A superseded memory's successor may come after it: its supersession is
kept (a few numbers) and applied through the supersession service once every memory is stored,
with the recorded end of validity, so the rebuild replays it as any other.

An import is refused into a tenant that already holds agents, memories, knowledge, content or a
rubric (``import_target_not_empty``), unless ``merge`` is asked for: then the lines are added to
what is there, an agent already known gets its memories and items (and its trust record if it
has none yet: two trust histories are never merged), and the rubric lines are skipped when the
tenant has a rubric of its own.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from config.api import ApiError
from ledger.models import Agent, Tenant
from ledger.services import tenant_write_lock
from memory.consolidation.services import (
    EXPLICIT,
    Consolidation,
    SupersessionCandidate,
    supersessions_apply,
)
from memory.content.services import ActionRecord, ItemDraft, content_item_import
from memory.episodic.services import MEMORY_BATCH_MAX, MemoryRecord, memories_import
from memory.knowledge.services import DocumentFields, knowledge_document_create
from memory.models import ContentItem, KnowledgeDocument, Memory
from trust.governance.models import RubricVersion
from trust.governance.services import CriterionDraft, rubric_version_create
from trust.interchange.lines import FORMAT, VERSION
from trust.interchange.selectors import timestamp_text
from trust.interchange.services import DocumentReader, agent_import


class ExportLineInvalid(ApiError):
    """A line of the document that cannot be imported: its number and what is wrong."""

    def __init__(self, *, line: int, problem: str) -> None:
        super().__init__(
            code="invalid_export_line",
            message=f"line {line}: {problem}",
            details={"line": line, "problem": problem},
        )
        self.line = line


@dataclass(frozen=True)
class _Supersession:
    """A memory line's supersession, applied once every memory is stored."""

    line: int
    position: int
    successor: int
    valid_until: datetime
    updated_at: datetime


@dataclass
class ImportSummary:
    lines: int = 0
    imported: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)


def tenant_is_empty(tenant: Tenant) -> bool:
    return not any(
        model.objects.filter(tenant=tenant).exists()
        for model in (Agent, Memory, KnowledgeDocument, ContentItem, RubricVersion)
    )


class _Importer:
    def __init__(self, *, tenant: Tenant, actor: str, merge: bool) -> None:
        self.tenant = tenant
        self.actor = actor
        self.merge = merge
        self.summary = ImportSummary()
        self.agents: dict[str, Agent] = {}
        self.rubric_skipped = merge and RubricVersion.objects.filter(tenant=tenant).exists()
        # Memories wait here until the batch is full or another agent's come: the store embeds
        # and inserts a batch at once. Each keeps its line number for the error of a bad batch.
        self.pending: list[tuple[int, MemoryRecord]] = []
        self.pending_agent: Agent | None = None
        # The stored memories' ids by their position among the document's memory lines.
        self.memory_ids: list[int] = []
        self.memory_count = 0
        self.supersessions: list[_Supersession] = []
        self.writers: dict[str, Callable[[DocumentReader], None]] = {
            "rubric_version": self._rubric_version,
            "knowledge_document": self._knowledge_document,
            "agent": self._agent,
            "content_item": self._content_item,
        }

    def line(self, number: int, value: Any) -> None:
        reader = DocumentReader(value, "")
        kind = reader.text("type")
        if number == 1:
            if kind != "header":
                raise ExportLineInvalid(line=1, problem="the first line must be the header")
            self._header(reader)
        elif kind == "memory":
            # Counted when its batch is stored.
            self._memory(number, reader)
        elif kind == "rubric_version" and self.rubric_skipped:
            self.summary.skipped[kind] += 1
        elif kind in self.writers:
            self._flush()
            self.writers[kind](reader)
            self.summary.imported[kind] += 1
        else:
            raise ExportLineInvalid(line=number, problem=f"unknown type {kind!r}")

    def _header(self, reader: DocumentReader) -> None:
        if reader.value.get("format") != FORMAT:
            raise ExportLineInvalid(line=1, problem=f"format must be {FORMAT!r}")
        if reader.value.get("version") != VERSION:
            raise ExportLineInvalid(
                line=1, problem=f"version {reader.value.get('version')!r} is not {VERSION}"
            )

    def _rubric_version(self, reader: DocumentReader) -> None:
        rubric_version_create(
            tenant=self.tenant,
            criteria=[
                CriterionDraft(name=c.text("name", limit=100), description=c.text("description"))
                for c in reader.items("criteria")
            ],
            actor=reader.text("created_by"),
            note=reader.text("note", default="", limit=10_000),
            now=self._when(reader, "created_at"),
        )

    def _knowledge_document(self, reader: DocumentReader) -> None:
        knowledge_document_create(
            tenant=self.tenant,
            fields=DocumentFields(
                title=reader.text("title", limit=10_000),
                body=reader.text("body", limit=10**9),
                kind=reader.text("kind"),
                category=reader.text("category", default="", limit=10_000),
                applies_to=tuple(reader.names("applies_to")),
            ),
            actor=self.actor,
            publish=bool(reader.flag("published", nullable=False)),
        )

    def _agent(self, reader: DocumentReader) -> None:
        document = {k: v for k, v in reader.value.items() if k != "type"}
        agent = agent_import(tenant=self.tenant, document=document, actor=self.actor)
        self.agents[agent.name] = agent

    def _agent_named(self, reader: DocumentReader) -> Agent:
        name = reader.text("agent")
        agent = self.agents.get(name)
        if agent is None:
            raise reader.invalid("agent", f"names no agent line before it: {name!r}")
        return agent

    @staticmethod
    def _when(reader: DocumentReader, key: str) -> datetime:
        moment = reader.when(key)
        assert moment is not None
        return moment

    def _memory(self, number: int, reader: DocumentReader) -> None:
        agent = self._agent_named(reader)
        count = reader.value.get("retrieval_count", 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise reader.invalid("retrieval_count", "must be a whole number, 0 or more")
        record = MemoryRecord(
            content=reader.text("content", limit=settings.MEMORY_MAX_CONTENT_CHARS),
            role=reader.text("role"),
            session_id=reader.text("session_id", default=""),
            memory_type=reader.text("memory_type", limit=32),
            importance=reader.number("importance", low=0.0, high=1.0),
            metadata=reader.mapping("metadata"),
            tags=reader.names("tags"),
            occurred_at=self._when(reader, "occurred_at"),
            created_at=self._when(reader, "created_at"),
            updated_at=self._when(reader, "updated_at"),
            expires_at=reader.when("expires_at", required=False),
            last_retrieved_at=reader.when("last_retrieved_at", required=False),
            retrieval_count=count,
            archived_at=reader.when("archived_at", required=False),
            history=[_history_entry(entry) for entry in reader.items("history")],
            # Exports from before supersession carry no interval: valid since it occurred.
            valid_from=reader.when("valid_from", required=False),
        )
        valid_until = reader.when("valid_until", required=False)
        successor = reader.value.get("superseded_by")
        if successor is None:
            record = replace(record, valid_until=valid_until)
        else:
            if isinstance(successor, bool) or not isinstance(successor, int) or successor < 0:
                raise reader.invalid("superseded_by", "must be a memory line's position or null")
            if successor == self.memory_count:
                raise reader.invalid("superseded_by", "names its own line")
            if valid_until is None:
                raise reader.invalid("valid_until", "is needed with superseded_by")
            self.supersessions.append(
                _Supersession(number, self.memory_count, successor, valid_until, record.updated_at)
            )
        self.memory_count += 1
        if self.pending_agent is not None and self.pending_agent.pk != agent.pk:
            self._flush()
        self.pending_agent = agent
        self.pending.append((number, record))
        if len(self.pending) >= MEMORY_BATCH_MAX:
            self._flush()

    def _flush(self) -> None:
        if not self.pending or self.pending_agent is None:
            return
        try:
            stored = memories_import(
                agent=self.pending_agent, records=[r for _, r in self.pending], actor=self.actor
            )
        except ApiError as exc:
            index = int((exc.details or {}).get("index", 0))
            raise ExportLineInvalid(line=self.pending[index][0], problem=str(exc.detail)) from exc
        self.memory_ids.extend(memory.pk for memory in stored)
        self.summary.imported["memory"] += len(self.pending)
        self.pending = []

    def finish(self) -> None:
        """Store what waits, then replay the supersessions the memory lines recorded."""
        self._flush()
        for supersession in self.supersessions:
            self._supersede(supersession)

    def _supersede(self, supersession: _Supersession) -> None:
        if supersession.successor >= len(self.memory_ids):
            raise ExportLineInvalid(
                line=supersession.line,
                problem=f"superseded_by: names no memory line ({supersession.successor})",
            )
        successor = Memory.objects.select_related("tenant", "agent").get(
            pk=self.memory_ids[supersession.successor]
        )
        old = self.memory_ids[supersession.position]
        plan = Consolidation(
            mode="off",
            decision="supersede",
            decided_by=EXPLICIT,
            candidates=(SupersessionCandidate(old, "", None, EXPLICIT),),
        )
        try:
            # An explicit candidate the service cannot close (itself, another agent's) is refused.
            supersessions_apply(
                memory=successor,
                plan=plan,
                actor=self.actor,
                now=supersession.updated_at,
                valid_until=supersession.valid_until,
            )
        except ApiError as exc:
            raise ExportLineInvalid(line=supersession.line, problem=str(exc.detail)) from exc

    def _content_item(self, reader: DocumentReader) -> None:
        action = None
        if reader.value.get("action") is not None:
            recorded = DocumentReader(reader.value["action"], "action")
            returned = recorded.value.get("tokens_returned")
            if returned is not None and (
                isinstance(returned, bool) or not isinstance(returned, int)
            ):
                raise recorded.invalid("tokens_returned", "must be a whole number or null")
            action = ActionRecord(
                action_type=recorded.text("action_type"),
                rendering=recorded.text("rendering", default="", limit=16),
                compactor=recorded.text("compactor", default="", limit=100),
                tokens_returned=returned,
            )
        if "content" not in reader.value:
            raise reader.invalid("content", "is missing")
        content_item_import(
            agent=self._agent_named(reader),
            actor=self.actor,
            key=reader.text("id", limit=16),
            action=action,
            draft=ItemDraft(
                content=reader.value["content"],
                item_type=reader.text("item_type", limit=32),
                scope=reader.text("scope", limit=8),
                run_id=reader.text("run_id", default=""),
                source=reader.text("source", default=""),
                timestamp=self._when(reader, "timestamp"),
                tags=reader.names("tags"),
                related_to=reader.names("related_to"),
            ),
        )


def _history_entry(entry: DocumentReader) -> dict[str, Any]:
    at = entry.when("at")
    assert at is not None
    return {
        "kind": entry.text("kind", limit=100),
        "actor": entry.text("actor"),
        "at": timestamp_text(at),
    }


def tenant_import_lines(
    *,
    tenant: Tenant,
    lines: Iterable[str],
    actor: str,
    merge: bool = False,
    on_line: Callable[[int], object] | None = None,
) -> ImportSummary:
    """Import the document into ``tenant``: all of it, or (on the first bad line) nothing.

    ``on_line`` is called with each line's number once it is read (a progress bar's step).
    """
    with transaction.atomic():
        tenant_write_lock(tenant)
        if not merge and not tenant_is_empty(tenant):
            raise ApiError(
                code="import_target_not_empty",
                message=f"Tenant {tenant.slug!r} already holds data; import into an empty "
                "tenant, or merge into this one on purpose (import_jsonl --merge).",
                status_code=409,
            )
        importer = _Importer(tenant=tenant, actor=actor, merge=merge)
        number = 0
        for number, raw in enumerate(lines, start=1):
            importer.summary.lines = number
            if on_line is not None:
                on_line(number)
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except ValueError as exc:
                raise ExportLineInvalid(line=number, problem=f"is not JSON: {exc}") from exc
            try:
                importer.line(number, value)
            except ExportLineInvalid:
                raise
            except ApiError as exc:
                raise ExportLineInvalid(line=number, problem=str(exc.detail)) from exc
        if number == 0:
            raise ExportLineInvalid(line=1, problem="the document is empty")
        importer.finish()
    return importer.summary
