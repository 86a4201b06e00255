"""The content store, the fourth channel (SPEC 7): large results kept out of the conversation.

Services (writes) and selectors (reads) of ``ContentItem``, ``ContentSnapshot`` and
``ContentAttachment``. Every write appends a ``content.*`` ledger event in the same transaction
as its rows, with ids, hashes and sizes but never the content, so nothing is half-stored and the
audit log never swells with web pages.

Scopes: an item belongs to the agent that stored it, either to one of its runs (``run``) or to
the agent across runs (``agent``). Other agents read it only through a snapshot that holds it,
or after restoring such a snapshot into one of their own scopes.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum
from django.utils import timezone
from rest_framework import status

from config.api import ApiError
from config.patterns import client_pattern_compile
from ledger.models import Agent, Tenant
from ledger.projections import service_kinds_register
from ledger.services import EventDraft, events_append, tenant_write_lock
from memory.content.compaction import (
    Compaction,
    Content,
    compact_with_plugins,
    content_compact,
)
from memory.context.tokens import token_count
from memory.models import (
    ContentAttachment,
    ContentFormat,
    ContentItem,
    ContentItemType,
    ContentScope,
    ContentSnapshot,
)

STORED = "content.stored"
CLEARED = "content.cleared"
SNAPSHOT_CREATED = "content.snapshot_created"
RESTORED = "content.restored"
CONTENT_EVENT_KINDS = (STORED, CLEARED, SNAPSHOT_CREATED, RESTORED)
# Reserved when this module is imported (the API imports it with the URLconf, before any client
# append is checked): a client must not forge an audit record of a store that never happened.
service_kinds_register(*CONTENT_EVENT_KINDS)

TRANSFORMS = ("full", "excerpt", "summary", "first_n", "last_n", "filtered")
UNITS = ("lines", "items", "chars")
DEFAULT_EXCERPT_CONTEXT = 200
MAX_PATTERN_CHARS = 500
# 12 url-safe characters (72 random bits): short enough to quote in a conversation, and a
# collision within one tenant is too unlikely to handle other than by the unique constraint.
_ITEM_KEY_BYTES = 9
_SNAPSHOT_KEY_BYTES = 16
RETRIEVE_URL = "/api/v1/content/items/{key}/"


def _not_found(message: str = "No such object.") -> ApiError:
    return ApiError(code="not_found", message=message, status_code=status.HTTP_404_NOT_FOUND)


def _bad(code: str, message: str, **details: Any) -> ApiError:
    return ApiError(code=code, message=message, details=details)


# --- Content as stored ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedContent:
    format: str
    body: str
    size: int
    content_hash: str


def content_parse(content: Any) -> ParsedContent:
    """Text is kept as sent; any other JSON value as its compact serialisation. Refuses content
    over ``CONTENT_MAX_BYTES`` (413) and NUL characters, which PostgreSQL text cannot hold."""
    if isinstance(content, str):
        fmt, body = ContentFormat.TEXT, content
    else:
        try:
            body = json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise _bad("invalid_content", f"The content is not storable JSON: {exc}") from exc
        fmt = ContentFormat.JSON
    if "\x00" in body:
        raise _bad("invalid_content", "The content contains a NUL character (\\u0000).")
    encoded = body.encode("utf-8")
    if len(encoded) > settings.CONTENT_MAX_BYTES:
        raise ApiError(
            code="content_too_large",
            message=f"The content is {len(encoded)} bytes; the limit is "
            f"{settings.CONTENT_MAX_BYTES} bytes.",
            status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            details={"size": len(encoded), "limit_bytes": settings.CONTENT_MAX_BYTES},
        )
    return ParsedContent(
        format=fmt, body=body, size=len(encoded), content_hash=hashlib.sha256(encoded).hexdigest()
    )


def item_value(item: ContentItem) -> Any:
    return json.loads(item.body) if item.format == ContentFormat.JSON else item.body


def item_content(item: ContentItem) -> Content:
    return Content(
        item_type=item.item_type,
        format=item.format,
        text=item.body,
        value=item_value(item),
        source=item.source,
    )


# --- Store -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemDraft:
    content: Any
    item_type: str = ContentItemType.CUSTOM
    scope: str = ""
    run_id: str = ""
    source: str = ""
    timestamp: datetime | None = None
    tags: Sequence[str] = ()
    related_to: Sequence[str] = ()


def _resolved_scope(draft: ItemDraft) -> str:
    scope = draft.scope or (ContentScope.RUN if draft.run_id else ContentScope.AGENT)
    if scope == ContentScope.RUN and not draft.run_id:
        raise _bad("run_id_required", "An item scoped to a run needs a run_id.")
    return scope


def _check_related(tenant: Tenant, keys: Sequence[str]) -> None:
    known = set(
        ContentItem.objects.filter(tenant=tenant, key__in=keys).values_list("key", flat=True)
    )
    missing = [key for key in keys if key not in known]
    if missing:
        raise _bad(
            "unknown_related_item",
            f"related_to names items that do not exist: {', '.join(missing)}.",
            missing=missing,
        )


def _new_item(
    *, agent: Agent, draft: ItemDraft, parsed: ParsedContent, key: str, now: datetime
) -> ContentItem:
    scope = _resolved_scope(draft)
    return ContentItem(
        tenant_id=agent.tenant_id,
        key=key,
        agent=agent,
        scope=scope,
        run_id=draft.run_id if scope == ContentScope.RUN else "",
        item_type=draft.item_type,
        format=parsed.format,
        body=parsed.body,
        content_hash=parsed.content_hash,
        size=parsed.size,
        source=draft.source,
        tags=list(dict.fromkeys(draft.tags)),
        related_to=list(dict.fromkeys(draft.related_to)),
        timestamp=draft.timestamp or now,
        created_at=now,
    )


def _stored_draft(item: ContentItem, actor: str) -> EventDraft:
    payload: dict[str, Any] = {
        "item_id": item.key,
        "agent_id": item.agent_id,
        "type": item.item_type,
        "format": item.format,
        "scope": item.scope,
        "sha256": item.content_hash,
        "size": item.size,
        "source": item.source,
        "tokens_full": item.tokens_full,
    }
    if item.action_type:
        payload.update(
            action_type=item.action_type,
            rendering=item.rendering,
            compactor=item.compactor,
            tokens_returned=item.tokens_returned,
        )
    return EventDraft(kind=STORED, actor=actor, payload=payload, run_id=item.run_id)


def full_rendering(item: ContentItem) -> str:
    """The content as it would sit in a conversation: text as is, JSON pretty-printed."""
    if item.format == ContentFormat.JSON:
        return json.dumps(item_value(item), ensure_ascii=False, indent=1)
    return item.body


def content_item_store(*, agent: Agent, actor: str, draft: ItemDraft) -> ContentItem:
    """Store one item and log it; returns the item, whose ``key`` is its id."""
    parsed = content_parse(draft.content)
    now = timezone.now()
    item = _new_item(
        agent=agent, draft=draft, parsed=parsed, key=secrets.token_urlsafe(_ITEM_KEY_BYTES), now=now
    )
    item.tokens_full = token_count(full_rendering(item))
    with transaction.atomic():
        tenant_write_lock(agent.tenant)
        _check_related(agent.tenant, item.related_to)
        item.save()
        events_append(tenant=agent.tenant, drafts=[_stored_draft(item, actor)])
    return item


# --- The action-result flow ----------------------------------------------------------------------


@dataclass(frozen=True)
class ActionResultOutcome:
    item: ContentItem
    first_time: bool
    conversation: str
    summary: dict[str, Any] | None


def _first_rendering(item: ContentItem) -> str:
    # One header line: the id, the size and where the content stays retrievable.
    url = RETRIEVE_URL.format(key=item.key)
    return (
        f"[content {item.key} · {item.size:,} bytes, in full · GET {url}]\n{full_rendering(item)}"
    )


def _compacted_rendering(item: ContentItem, compaction: Compaction) -> str:
    # The header says what was compacted and where the full content is; the transforms are named
    # once in the tool description the agent gets, not in every result.
    url = RETRIEVE_URL.format(key=item.key)
    rendering = compaction.rendering
    return (
        f"[content {item.key} · compacted {rendering.description} · full: GET {url}]\n"
        f"{rendering.body}"
    )


def _seen_before(agent: Agent, run_id: str, action_type: str) -> bool:
    # Cleared items count: clearing the store does not take the full result out of the
    # conversation that already holds it.
    return ContentItem.objects.filter(
        tenant_id=agent.tenant_id, agent=agent, run_id=run_id, action_type=action_type
    ).exists()


def action_result_record(
    *,
    agent: Agent,
    actor: str,
    run_id: str,
    action_type: str,
    draft: ItemDraft,
    goal: str = "",
) -> ActionResultOutcome:
    """Store an action's result in the run and answer what goes into the conversation.

    "First time" is per agent, per run, per action type: each agent has its own conversation,
    and the first result of an action shows the agent what that action returns. Later results
    of the same action type in the run are compacted. Both renderings carry the item id and
    how to fetch the full content.
    """
    parsed = content_parse(draft.content)
    now = timezone.now()
    item = _new_item(
        agent=agent,
        draft=replace(draft, scope=ContentScope.RUN, run_id=run_id),
        parsed=parsed,
        key=secrets.token_urlsafe(_ITEM_KEY_BYTES),
        now=now,
    )
    item.action_type = action_type
    full = full_rendering(item)
    item.tokens_full = token_count(full)
    # The compaction (possibly an LLM call) is made before the transaction, so no lock is held
    # while an outside endpoint thinks; the decision itself is re-taken under the lock.
    compaction = (
        content_compact(item_content(item), goal=goal)
        if _seen_before(agent, run_id, action_type)
        else None
    )
    with transaction.atomic():
        # The tenant's write lock serialises two results of one action arriving together, so
        # exactly one of them is the first.
        tenant_write_lock(agent.tenant)
        _check_related(agent.tenant, item.related_to)
        first_time = not _seen_before(agent, run_id, action_type)
        if first_time:
            conversation, summary = _first_rendering(item), None
            item.rendering, item.compactor = "full", ""
        else:
            if compaction is None:  # another request became the first meanwhile
                compaction = compact_with_plugins(item_content(item))
            conversation = _compacted_rendering(item, compaction)
            summary = compaction.summary
            item.rendering, item.compactor = "compacted", compaction.compactor
        item.tokens_returned = token_count(conversation)
        item.save()
        events_append(tenant=agent.tenant, drafts=[_stored_draft(item, actor)])
    return ActionResultOutcome(
        item=item, first_time=first_time, conversation=conversation, summary=summary
    )


# --- Reads ---------------------------------------------------------------------------------------


def content_items_visible(
    *, items: QuerySet[ContentItem], agent: Agent | None
) -> QuerySet[ContentItem]:
    """Of a tenant's ``items``, those a caller may read by id: all for a tenant-wide key; for an
    agent, its own and those restored into one of its scopes. Cleared items are gone."""
    items = items.filter(cleared_at__isnull=True)
    if agent is None:
        return items
    attached = ContentAttachment.objects.filter(item=OuterRef("pk"), agent=agent)
    return items.filter(Q(agent=agent) | Exists(attached))


def content_snapshots_visible(*, tenant: Tenant, agent: Agent | None) -> QuerySet[ContentSnapshot]:
    """Snapshots a caller may read through: its own, those granted to it, and open ones."""
    snapshots = ContentSnapshot.objects.filter(tenant=tenant)
    if agent is None:
        return snapshots
    return snapshots.filter(Q(owner=agent) | Q(grantee=agent) | Q(grantee__isnull=True))


def snapshot_items(snapshot: ContentSnapshot) -> QuerySet[ContentItem]:
    return ContentItem.objects.filter(
        tenant_id=snapshot.tenant_id, snapshots=snapshot, cleared_at__isnull=True
    )


@dataclass(frozen=True)
class ItemCriteria:
    item_type: str = ""
    source: str = ""
    tags: Sequence[str] = ()
    since: datetime | None = None
    until: datetime | None = None
    run_id: str | None = None
    agent_name: str = ""
    scope: str = ""
    limit: int = 50


def content_items_query(
    *, items: QuerySet[ContentItem], criteria: ItemCriteria, caller: Agent | None
) -> list[ContentItem]:
    """Metadata of matching items, newest first; the body is never read."""
    if criteria.item_type:
        items = items.filter(item_type=criteria.item_type)
    if criteria.source:
        items = items.filter(source=criteria.source)
    if criteria.tags:
        items = items.filter(tags__contains=list(criteria.tags))
    if criteria.since is not None:
        items = items.filter(timestamp__gte=criteria.since)
    if criteria.until is not None:
        items = items.filter(timestamp__lte=criteria.until)
    if criteria.scope:
        items = items.filter(scope=criteria.scope)
    if criteria.agent_name:
        items = items.filter(agent__name=criteria.agent_name)
    if criteria.run_id is not None:
        restored = ContentAttachment.objects.filter(item=OuterRef("pk"), run_id=criteria.run_id)
        if caller is not None:
            restored = restored.filter(agent=caller)
        items = items.filter(Q(run_id=criteria.run_id) | Exists(restored))
    return list(
        items.defer("body").select_related("agent").order_by("-timestamp", "-id")[: criteria.limit]
    )


@dataclass(frozen=True)
class RunSavings:
    run_id: str
    action_results: int
    full_renderings: int
    compacted_renderings: int
    tokens_full: int
    tokens_returned: int
    # Set by content_runs_savings only: who acted in the run and its latest result.
    agents: tuple[str, ...] = ()
    last_result_at: datetime | None = None

    @property
    def tokens_saved(self) -> int:
        return self.tokens_full - self.tokens_returned

    @property
    def saved_ratio(self) -> float:
        return self.tokens_saved / self.tokens_full if self.tokens_full else 0.0

    @property
    def returned_ratio(self) -> float:
        return self.tokens_returned / self.tokens_full if self.tokens_full else 0.0


# Per run: how many action results, how many went in full, and the two token counts. Cleared
# items still count; their renderings were returned all the same.
_SAVINGS_TOTALS = {
    "count": Count("id"),
    "full": Count("id", filter=Q(rendering="full")),
    "tokens_full": Sum("tokens_full"),
    "tokens_returned": Sum("tokens_returned"),
}


def _run_savings(run_id: str, totals: Mapping[str, Any], **extra: Any) -> RunSavings:
    return RunSavings(
        run_id=run_id,
        action_results=totals["count"],
        full_renderings=totals["full"],
        compacted_renderings=totals["count"] - totals["full"],
        tokens_full=totals["tokens_full"] or 0,
        tokens_returned=totals["tokens_returned"] or 0,
        **extra,
    )


def _action_results(tenant: Tenant) -> QuerySet[ContentItem]:
    # Only the action-result flow records what the conversation got back.
    return ContentItem.objects.filter(tenant=tenant, tokens_returned__isnull=False)


def content_run_savings(*, tenant: Tenant, agent: Agent | None, run_id: str) -> RunSavings | None:
    """Token counts of the run's action results: in full versus what the conversation got.

    None when the caller has no action result in the run.
    """
    items = _action_results(tenant).filter(run_id=run_id)
    if agent is not None:
        items = items.filter(agent=agent)
    totals = items.aggregate(**_SAVINGS_TOTALS)
    if not totals["count"]:
        return None
    return _run_savings(run_id, totals)


@dataclass(frozen=True)
class SavingsOverview:
    runs: list[RunSavings]
    # Over every run with a result since ``since``, not only the listed ones.
    total: RunSavings
    runs_total: int


# Per run and agent first, then per run: both steps hash-aggregate in memory, where a
# DISTINCT list of agents per run would sort every row (to disk, at 100,000 results). The totals
# come with the runs as window sums over all of them, before the LIMIT: one pass over the rows.
RUNS_SAVINGS_SQL = """
WITH per_agent AS (
    SELECT run_id, agent_id, count(*) AS results,
           count(*) FILTER (WHERE rendering = 'full') AS full_renderings,
           sum(tokens_full) AS tokens_full, sum(tokens_returned) AS tokens_returned,
           max(timestamp) AS last_result_at
    FROM memory_contentitem
    WHERE tenant_id = %(tenant)s AND tokens_returned IS NOT NULL
      AND (%(since)s::timestamptz IS NULL OR timestamp >= %(since)s::timestamptz)
    GROUP BY run_id, agent_id
),
per_run AS (
    SELECT run_id, array_agg(agent_id) AS agent_ids, sum(results) AS results,
           sum(full_renderings) AS full_renderings, sum(tokens_full) AS tokens_full,
           sum(tokens_returned) AS tokens_returned, max(last_result_at) AS last_result_at
    FROM per_agent GROUP BY run_id
)
SELECT run_id, agent_ids, results, full_renderings, tokens_full, tokens_returned,
       last_result_at, count(*) OVER (), sum(results) OVER (), sum(full_renderings) OVER (),
       sum(tokens_full) OVER (), sum(tokens_returned) OVER ()
FROM per_run
ORDER BY last_result_at DESC, run_id
LIMIT %(limit)s
"""


def content_runs_savings(
    *, tenant: Tenant, since: datetime | None, limit: int = 50
) -> SavingsOverview:
    """Every run's token savings, the runs with the latest results first, and the totals over
    all runs since ``since``: one pass over the tenant's action results (SQL does the sums),
    and one lookup of the listed runs' agent names."""
    with connection.cursor() as cursor:
        cursor.execute(RUNS_SAVINGS_SQL, {"tenant": tenant.pk, "since": since, "limit": limit})
        rows = cursor.fetchall()
    names = dict(
        Agent.objects.filter(
            tenant=tenant, pk__in={agent for row in rows for agent in row[1]}
        ).values_list("pk", "name")
    )

    def savings(run_id: str, counts: Sequence[Any], **extra: Any) -> RunSavings:
        totals = dict(zip(("count", "full", "tokens_full", "tokens_returned"), counts, strict=True))
        return _run_savings(run_id, {k: int(v or 0) for k, v in totals.items()}, **extra)

    runs = [
        savings(
            row[0],
            row[2:6],
            agents=tuple(sorted(names[agent] for agent in row[1])),
            last_result_at=row[6],
        )
        for row in rows
    ]
    total = savings("", rows[0][8:12] if rows else (0, 0, 0, 0))
    return SavingsOverview(runs=runs, total=total, runs_total=rows[0][7] if rows else 0)


# --- Transforms -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    transform: str
    content: Any
    details: dict[str, Any]


def _int_param(params: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise _bad("missing_parameter", f"The {name!r} parameter is required.", name=name)
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise _bad(
            "invalid_parameter", f"{name!r} must be an integer, got {raw!r}.", name=name
        ) from exc
    if value < 0:
        raise _bad("invalid_parameter", f"{name!r} must be zero or positive.", name=name)
    return value


def _excerpt(item: ContentItem, params: Mapping[str, str]) -> Rendered:
    text = item.body
    phrase = params.get("phrase")
    if phrase:
        context = _int_param(params, "context", DEFAULT_EXCERPT_CONTEXT)
        at = text.find(phrase)
        length = len(phrase)
        if at < 0:
            found = re.search(re.escape(phrase), text, re.IGNORECASE)
            if found is None:
                raise _bad("phrase_not_found", f"The phrase {phrase!r} is not in this item.")
            at, length = found.start(), found.end() - found.start()
        start, end = max(0, at - context), min(len(text), at + length + context)
    else:
        start = _int_param(params, "start", 0)
        end = _int_param(params, "end", min(len(text), start + 2000))
        if start > len(text) or end > len(text):
            raise _bad(
                "excerpt_out_of_range",
                f"The item has {len(text)} characters; the excerpt {start}-{end} runs past "
                "its end.",
                length=len(text),
            )
        if end < start:
            raise _bad("excerpt_out_of_range", "The excerpt's end comes before its start.")
    return Rendered("excerpt", text[start:end], {"start": start, "end": end, "length": len(text)})


def _unit(item: ContentItem, params: Mapping[str, str]) -> str:
    value = item_value(item)
    default = "items" if isinstance(value, list | dict) else "lines"
    unit = params.get("unit") or default
    if unit not in UNITS:
        raise _bad("invalid_unit", f"unit must be one of {', '.join(UNITS)}.")
    if unit == "items" and not isinstance(value, list | dict):
        raise _bad("invalid_unit", "unit 'items' applies to JSON arrays and objects only.")
    return unit


def _first_or_last(item: ContentItem, params: Mapping[str, str], *, last: bool) -> Rendered:
    n = _int_param(params, "n")
    unit = _unit(item, params)
    name = "last_n" if last else "first_n"
    if unit == "items":
        value = item_value(item)
        entries = list(value.items()) if isinstance(value, dict) else value
        kept = entries[-n:] if last and n else ([] if last else entries[:n])
        content: Any = dict(kept) if isinstance(value, dict) else kept
        total = len(entries)
    elif unit == "lines":
        lines = item.body.splitlines(keepends=True)
        chosen = lines[-n:] if last and n else ([] if last else lines[:n])
        content, total = "".join(chosen), len(lines)
    else:
        text = item.body
        content = text[-n:] if last and n else ("" if last else text[:n])
        total = len(text)
    return Rendered(name, content, {"n": n, "unit": unit, "total": total})


def _filtered(item: ContentItem, params: Mapping[str, str]) -> Rendered:
    keys = [key for key in (params.get("keys") or "").split(",") if key]
    match, pattern = params.get("match"), params.get("pattern")
    if sum(bool(x) for x in (keys, match, pattern)) != 1:
        raise _bad(
            "invalid_filter",
            "Give exactly one of 'keys' (JSON), 'match' (a substring) or 'pattern' (a regex).",
        )
    if keys:
        value = item_value(item)
        if isinstance(value, dict):
            return Rendered("filtered", {k: value[k] for k in keys if k in value}, {"keys": keys})
        if isinstance(value, list) and all(isinstance(entry, dict) for entry in value):
            kept = [{k: entry[k] for k in keys if k in entry} for entry in value]
            return Rendered("filtered", kept, {"keys": keys})
        raise _bad("invalid_filter", "'keys' applies to a JSON object or a list of objects.")
    if pattern:
        regex = client_pattern_compile(pattern, max_chars=MAX_PATTERN_CHARS, text_bytes=item.size)
        lines = [line for line in item.body.splitlines() if regex.search(line)]
    else:
        assert match is not None
        lines = [line for line in item.body.splitlines() if match in line]
    return Rendered("filtered", "\n".join(lines), {"lines": len(lines)})


def content_transform(item: ContentItem, transform: str, params: Mapping[str, str]) -> Rendered:
    """The item rendered by one transform; bad parameters are a 400 with a stable code."""
    if transform == "full":
        return Rendered("full", item_value(item), {})
    if transform == "excerpt":
        return _excerpt(item, params)
    if transform == "summary":
        compaction = compact_with_plugins(item_content(item))
        return Rendered("summary", compaction.summary, {"compactor": compaction.compactor})
    if transform in ("first_n", "last_n"):
        return _first_or_last(item, params, last=transform == "last_n")
    if transform == "filtered":
        return _filtered(item, params)
    raise _bad(
        "unknown_transform",
        f"Unknown transform {transform!r}; use one of {', '.join(TRANSFORMS)}.",
        transforms=list(TRANSFORMS),
    )


# --- Clear, snapshot, restore --------------------------------------------------------------------


def content_scope_clear(*, agent: Agent, actor: str, scope: str, run_id: str = "") -> int:
    """Clear one of the agent's scopes: its items lose their content (reads then answer 404) and
    items restored into the scope are detached (their owners keep them). Returns the count."""
    if scope == ContentScope.RUN and not run_id:
        raise _bad("run_id_required", "Clearing a run scope needs its run_id.")
    target_run = run_id if scope == ContentScope.RUN else ""
    with transaction.atomic():
        tenant_write_lock(agent.tenant)
        # One UPDATE: the body goes, the row (hash, size, token counts) stays for the audit.
        cleared = ContentItem.objects.filter(
            tenant_id=agent.tenant_id,
            agent=agent,
            scope=scope,
            run_id=target_run,
            cleared_at__isnull=True,
        ).update(body="", cleared_at=timezone.now())
        detached, _ = ContentAttachment.objects.filter(
            tenant_id=agent.tenant_id, agent=agent, run_id=target_run
        ).delete()
        events_append(
            tenant=agent.tenant,
            drafts=[
                EventDraft(
                    kind=CLEARED,
                    actor=actor,
                    run_id=target_run,
                    payload={
                        "agent_id": agent.pk,
                        "scope": scope,
                        "items": cleared,
                        "detached": detached,
                    },
                )
            ],
        )
    return cleared


def content_snapshot_create(
    *,
    owner: Agent,
    actor: str,
    items: QuerySet[ContentItem],
    item_keys: Sequence[str],
    run_id: str | None,
    grantee: Agent | None,
    label: str = "",
) -> ContentSnapshot:
    """A read-only view of items the owner can read: the named ones, or all of a run's.

    ``items`` is what the owner may read; a key outside it is a 404, whether it belongs to
    another agent, another tenant or nobody.
    """
    with transaction.atomic():
        tenant_write_lock(owner.tenant)
        chosen = list(items.filter(key__in=item_keys)) if item_keys else []
        missing = sorted(set(item_keys) - {item.key for item in chosen})
        if missing:
            raise _not_found(f"No content item {missing[0]} in your scope.")
        if run_id is not None:
            in_run = items.filter(agent=owner, scope=ContentScope.RUN, run_id=run_id)
            known = {item.pk for item in chosen}
            chosen.extend(item for item in in_run.defer("body") if item.pk not in known)
        if not chosen:
            raise _bad("empty_snapshot", "A snapshot needs at least one item (item_ids or run_id).")
        snapshot = ContentSnapshot.objects.create(
            tenant=owner.tenant,
            key=secrets.token_urlsafe(_SNAPSHOT_KEY_BYTES),
            owner=owner,
            grantee=grantee,
            label=label,
            created_at=timezone.now(),
        )
        snapshot.items.set(chosen)
        events_append(
            tenant=owner.tenant,
            drafts=[
                EventDraft(
                    kind=SNAPSHOT_CREATED,
                    actor=actor,
                    run_id=run_id or "",
                    payload={
                        "snapshot_id": snapshot.key,
                        "owner_id": owner.pk,
                        "grantee_id": grantee.pk if grantee else None,
                        "item_ids": sorted(item.key for item in chosen),
                    },
                )
            ],
        )
    return snapshot


def content_snapshot_restore(
    *, snapshot: ContentSnapshot, agent: Agent, actor: str, run_id: str = ""
) -> int:
    """Attach the snapshot's items to one of the agent's scopes (a run, or the agent's own scope
    when ``run_id`` is empty), by reference. Restoring twice attaches once. Returns how many
    items are attached there now."""
    with transaction.atomic():
        tenant_write_lock(agent.tenant)
        now = timezone.now()
        items = list(snapshot_items(snapshot).only("pk", "agent_id", "run_id"))
        attachments = [
            ContentAttachment(
                tenant_id=agent.tenant_id,
                item=item,
                agent=agent,
                run_id=run_id,
                snapshot_key=snapshot.key,
                created_at=now,
            )
            for item in items
            if not (item.agent_id == agent.pk and item.run_id == run_id)
        ]
        ContentAttachment.objects.bulk_create(attachments, ignore_conflicts=True)
        events_append(
            tenant=agent.tenant,
            drafts=[
                EventDraft(
                    kind=RESTORED,
                    actor=actor,
                    run_id=run_id,
                    payload={
                        "snapshot_id": snapshot.key,
                        "agent_id": agent.pk,
                        "items": len(items),
                    },
                )
            ],
        )
    return len(items)
