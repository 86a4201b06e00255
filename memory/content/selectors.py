"""Reads of the content store (SPEC 7): the items and snapshots a caller may see, a stored item
rendered by a transform, and the token savings per run."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum

from config.patterns import client_pattern_compile
from config.sql import rows_named
from ledger.models import Agent, Tenant
from memory.content.compaction import (
    compact_with_plugins,
)
from memory.content.values import bad_request, item_content, item_value
from memory.models import (
    ContentAttachment,
    ContentItem,
    ContentSnapshot,
)

TRANSFORMS = ("full", "excerpt", "summary", "first_n", "last_n", "filtered")
UNITS = ("lines", "items", "chars")
DEFAULT_EXCERPT_CONTEXT = 200
MAX_PATTERN_CHARS = 500


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


# The period's results come from the daily sums of its whole days (``ContentSavingsDay``) and,
# for the part of its first day after ``since``, from the items themselves: a few thousand rows
# at 100,000 results a month, read by index and hash-aggregated per run. The totals come with
# the runs as window sums over all of them, before the LIMIT. Only the listed runs look up
# their agents, by index: an agent acted in the run in the period if one of its sums there
# ends at or after ``since`` (the sums of the first day end after it only if a result does).
# One query in all: under load, each round trip to the database waits for a CPU.
RUNS_SAVINGS_SQL = """
WITH parts AS (
    SELECT run_id, results, full_renderings, tokens_full, tokens_returned, last_result_at
    FROM memory_contentsavingsday
    WHERE tenant_id = %(tenant)s AND (%(first_day)s::date IS NULL OR day >= %(first_day)s::date)
    UNION ALL
    SELECT run_id, 1, (rendering = 'full')::int, tokens_full, tokens_returned, timestamp
    FROM memory_contentitem
    WHERE %(since)s::timestamptz IS NOT NULL
      AND tenant_id = %(tenant)s AND tokens_returned IS NOT NULL
      AND timestamp >= %(since)s::timestamptz AND timestamp < %(first_day_at)s::timestamptz
),
per_run AS (
    SELECT run_id, sum(results) AS results, sum(full_renderings) AS full_renderings,
           sum(tokens_full) AS tokens_full, sum(tokens_returned) AS tokens_returned,
           max(last_result_at) AS last_result_at
    FROM parts GROUP BY run_id
),
listed AS (
    SELECT run_id, results, full_renderings, tokens_full, tokens_returned, last_result_at,
           count(*) OVER () AS runs_total, sum(results) OVER () AS all_results,
           sum(full_renderings) OVER () AS all_full_renderings,
           sum(tokens_full) OVER () AS all_tokens_full,
           sum(tokens_returned) OVER () AS all_tokens_returned
    FROM per_run
    ORDER BY last_result_at DESC, run_id
    LIMIT %(limit)s
)
SELECT listed.*, ARRAY(
           SELECT name FROM ledger_agent WHERE tenant_id = %(tenant)s AND id IN (
               SELECT agent_id FROM memory_contentsavingsday
               WHERE tenant_id = %(tenant)s AND run_id = listed.run_id
                 AND (%(since)s::timestamptz IS NULL
                      OR (day >= (%(since)s::timestamptz AT TIME ZONE 'UTC')::date
                          AND last_result_at >= %(since)s::timestamptz)))
       ) AS agent_names
FROM listed
ORDER BY last_result_at DESC, run_id
"""


def _first_whole_day(since: datetime | None) -> datetime | None:
    """The first UTC midnight at or after ``since``: the daily sums count from that day on."""
    if since is None:
        return None
    midnight = since.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight if midnight == since else midnight + timedelta(days=1)


def content_runs_savings(
    *, tenant: Tenant, since: datetime | None, limit: int = 50
) -> SavingsOverview:
    """Every run's token savings, the runs with the latest results first, and the totals over
    all runs since ``since``, with the listed runs' agent names: one query over the period's
    daily sums (SQL does the sums)."""
    first_day_at = _first_whole_day(since)
    params = {
        "tenant": tenant.pk,
        "since": since,
        "first_day": first_day_at.date() if first_day_at else None,
        "first_day_at": first_day_at,
    }
    with connection.cursor() as cursor:
        cursor.execute(RUNS_SAVINGS_SQL, {**params, "limit": limit})
        rows = rows_named(cursor)

    def savings(run_id: str, counts: Sequence[Any], **extra: Any) -> RunSavings:
        totals = dict(zip(("count", "full", "tokens_full", "tokens_returned"), counts, strict=True))
        return _run_savings(run_id, {k: int(v or 0) for k, v in totals.items()}, **extra)

    runs = [
        savings(
            row.run_id,
            (row.results, row.full_renderings, row.tokens_full, row.tokens_returned),
            agents=tuple(sorted(row.agent_names)),
            last_result_at=row.last_result_at,
        )
        for row in rows
    ]
    first = rows[0] if rows else None
    total = savings(
        "",
        (
            first.all_results,
            first.all_full_renderings,
            first.all_tokens_full,
            first.all_tokens_returned,
        )
        if first
        else (0, 0, 0, 0),
    )
    return SavingsOverview(runs=runs, total=total, runs_total=first.runs_total if first else 0)


@dataclass(frozen=True)
class Rendered:
    transform: str
    content: Any
    details: dict[str, Any]


def _int_param(params: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise bad_request(
                "missing_parameter", f"The {name!r} parameter is required.", name=name
            )
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise bad_request(
            "invalid_parameter", f"{name!r} must be an integer, got {raw!r}.", name=name
        ) from exc
    if value < 0:
        raise bad_request("invalid_parameter", f"{name!r} must be zero or positive.", name=name)
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
                raise bad_request("phrase_not_found", f"The phrase {phrase!r} is not in this item.")
            at, length = found.start(), found.end() - found.start()
        start, end = max(0, at - context), min(len(text), at + length + context)
    else:
        start = _int_param(params, "start", 0)
        end = _int_param(params, "end", min(len(text), start + 2000))
        if start > len(text) or end > len(text):
            raise bad_request(
                "excerpt_out_of_range",
                f"The item has {len(text)} characters; the excerpt {start}-{end} runs past "
                "its end.",
                length=len(text),
            )
        if end < start:
            raise bad_request("excerpt_out_of_range", "The excerpt's end comes before its start.")
    return Rendered("excerpt", text[start:end], {"start": start, "end": end, "length": len(text)})


def _unit(item: ContentItem, params: Mapping[str, str]) -> str:
    value = item_value(item)
    default = "items" if isinstance(value, list | dict) else "lines"
    unit = params.get("unit") or default
    if unit not in UNITS:
        raise bad_request("invalid_unit", f"unit must be one of {', '.join(UNITS)}.")
    if unit == "items" and not isinstance(value, list | dict):
        raise bad_request("invalid_unit", "unit 'items' applies to JSON arrays and objects only.")
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
        raise bad_request(
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
        raise bad_request("invalid_filter", "'keys' applies to a JSON object or a list of objects.")
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
    raise bad_request(
        "unknown_transform",
        f"Unknown transform {transform!r}; use one of {', '.join(TRANSFORMS)}.",
        transforms=list(TRANSFORMS),
    )
