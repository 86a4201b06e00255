"""Memory lifecycle services: importance decay, TTL expiry and the per-agent quota (SPEC 4).

Each is set-based SQL over a bounded batch, safe to run twice or concurrently (the batch's
tenants are locked first, and the conditions are re-checked by the UPDATE/DELETE itself),
and records what it did as one ledger event per tenant per batch, in the same transaction.
The ``*_sweep`` generators run them over the whole table batch by batch for the background jobs
(memory/tasks.py, ledger/jobs.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.sql import rows_named
from ledger.jobs import Batch
from ledger.models import Tenant
from ledger.services import event_append, tenant_write_lock_id
from memory.models import MemoryKey
from memory.search.keyword_index import search_documents_refresh_around

DECAY_BASE = 0.95  # effective importance loses 5 % a week without retrieval
ARCHIVE_BELOW = 0.1
SECONDS_PER_WEEK = 7 * 24 * 3600

# Effective importance = importance * 0.95^(weeks since last retrieval, or since creation).
EFFECTIVE_IMPORTANCE_SQL = (
    "importance * power(%(decay_base)s::float8, "
    "extract(epoch FROM (%(now)s::timestamptz - coalesce(last_retrieved_at, created_at)))"
    " / %(week)s::float8)"
)


def _log_per_tenant(
    rows: list[tuple[int, int]], *, kind: str, payload_extra: dict[str, object]
) -> None:
    by_tenant: dict[int, list[int]] = defaultdict(list)
    for memory_id, tenant_id in rows:
        by_tenant[tenant_id].append(memory_id)
    for tenant in Tenant.objects.filter(pk__in=by_tenant):
        event_append(
            tenant=tenant,
            kind=kind,
            actor="system",
            payload={"memory_ids": sorted(by_tenant[tenant.pk]), **payload_extra},
        )


def _claim(cursor: Any, select_sql: str, params: dict[str, Any]) -> list[int]:
    """Pick a batch of candidate ids, then take their tenants' ledger locks in tenant order.

    Every memory writer takes its tenant's ledger lock before it touches rows (the rule that keeps
    the search statistics and the ledger free of deadlocks), so the jobs do too; the UPDATE or
    DELETE that follows re-checks its condition, which makes concurrent runs act on a row once.
    """
    cursor.execute(select_sql, params)
    rows = rows_named(cursor)
    for tenant_id in sorted({int(row.tenant_id) for row in rows}):
        tenant_write_lock_id(tenant_id)
    return [int(row.id) for row in rows]


def memories_decay(*, now: datetime | None = None, batch_size: int = 5000) -> int:
    """Archive active memories whose effective importance fell below 0.1. Returns rows archived."""
    return _decay_batch(now or timezone.now(), 0, batch_size)[0]


def memories_decay_sweep(*, now: datetime | None = None, batch_size: int = 5000) -> Iterator[Batch]:
    """``memories_decay`` over the whole table, batch after batch, for the background job.

    Keyset-paginated by id: each batch scans on from where the last one stopped instead of from
    the start again past the rows it archived, so a sweep reads the table once.
    """
    return _keyset_sweep(_decay_batch, now or timezone.now(), batch_size)


def _keyset_sweep(
    batch: Callable[[datetime, int, int], tuple[int, list[int]]],
    moment: datetime,
    batch_size: int,
) -> Iterator[Batch]:
    """Batches after the last id the previous batch claimed, until one claims fewer than a batch."""
    after = 0
    while True:
        touched, claimed = batch(moment, after, batch_size)
        yield Batch(rows=touched, more=len(claimed) == batch_size)
        if len(claimed) < batch_size:
            return
        after = claimed[-1]


def _decay_batch(moment: datetime, after: int, batch_size: int) -> tuple[int, list[int]]:
    params: dict[str, Any] = {
        "now": moment,
        "decay_base": DECAY_BASE,
        "week": SECONDS_PER_WEEK,
        "threshold": ARCHIVE_BELOW,
        "batch": batch_size,
        "after": after,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        ids = _claim(
            cursor,
            f"""
            SELECT id, tenant_id FROM memory_memory
            WHERE id > %(after)s AND archived_at IS NULL
              AND {EFFECTIVE_IMPORTANCE_SQL} < %(threshold)s
            ORDER BY id LIMIT %(batch)s
            """,  # noqa: S608 (a constant expression; every value is a parameter)
            params,
        )
        cursor.execute(
            f"""
            UPDATE memory_memory SET archived_at = %(now)s
            WHERE id = ANY(%(ids)s) AND archived_at IS NULL
              AND {EFFECTIVE_IMPORTANCE_SQL} < %(threshold)s
            RETURNING id, tenant_id
            """,  # noqa: S608 (a constant expression; every value is a parameter)
            {**params, "ids": ids},
        )
        rows = [(int(row.id), int(row.tenant_id)) for row in rows_named(cursor)]
        _log_per_tenant(
            rows,
            kind="memory.archived",
            payload_extra={"reason": "decay", "archived_at": moment.isoformat()},
        )
    return len(rows), ids


def memories_expire(*, now: datetime | None = None, batch_size: int = 5000) -> int:
    """Delete memories past their ``expires_at`` (and their content keys). Returns rows deleted.

    Search already hides them from the moment they expire; this reclaims the space and shreds the
    content sealed in the ledger.
    """
    return _expire_batch(now or timezone.now(), 0, batch_size)[0]


def memories_expire_sweep(
    *, now: datetime | None = None, batch_size: int = 5000
) -> Iterator[Batch]:
    """``memories_expire`` over the whole table, keyset-paginated by id like the decay sweep."""
    return _keyset_sweep(_expire_batch, now or timezone.now(), batch_size)


def _expire_batch(moment: datetime, after: int, batch_size: int) -> tuple[int, list[int]]:
    with transaction.atomic(), connection.cursor() as cursor:
        ids = _claim(
            cursor,
            """
            SELECT id, tenant_id FROM memory_memory WHERE id > %(after)s AND expires_at <= %(now)s
            ORDER BY id LIMIT %(batch)s
            """,
            {"now": moment, "batch": batch_size, "after": after},
        )
        cursor.execute(
            """
            DELETE FROM memory_memory WHERE id = ANY(%(ids)s) AND expires_at <= %(now)s
            RETURNING tenant_id, agent_id, session_id, occurred_at, id
            """,
            {"now": moment, "ids": ids},
        )
        positions = rows_named(cursor)
        # Neighbours whose keyword window held an expired memory get it recomputed.
        search_documents_refresh_around(_in_surviving_sessions(cursor, positions))
        rows = [(int(position.id), int(position.tenant_id)) for position in positions]
        # One array parameter rather than Django's IN list of thousands of placeholders (a third
        # of a TTL batch's time went into planning that list).
        cursor.execute(
            f"DELETE FROM {MemoryKey._meta.db_table} WHERE memory_id = ANY(%s)",  # noqa: S608
            [[memory_id for memory_id, _ in rows]],
        )
        _log_per_tenant(rows, kind="memory.expired", payload_extra={"reason": "ttl"})
    return len(rows), ids


def _in_surviving_sessions(cursor: Any, positions: list[Any]) -> list[Any]:
    """The positions whose session still has memories: only those can have neighbours.

    Memories stored together expire together, so a TTL batch often takes whole sessions; one
    probe per session here saves four neighbour probes per deleted memory.
    """
    sessions = {
        (int(p.tenant_id), int(p.agent_id), str(p.session_id)) for p in positions if p.session_id
    }
    if not sessions:
        return []
    tenants, agents, names = (list(column) for column in zip(*sessions, strict=True))
    cursor.execute(
        """
        SELECT s.tenant_id, s.agent_id, s.session_id
        FROM unnest(%s::bigint[], %s::bigint[], %s::text[]) AS s(tenant_id, agent_id, session_id)
        WHERE EXISTS (
            SELECT 1 FROM memory_memory AS m WHERE m.tenant_id = s.tenant_id
              AND m.agent_id = s.agent_id AND m.session_id = s.session_id)
        """,
        [tenants, agents, names],
    )
    surviving = {
        (int(row.tenant_id), int(row.agent_id), str(row.session_id)) for row in rows_named(cursor)
    }
    return [
        p for p in positions if (int(p.tenant_id), int(p.agent_id), str(p.session_id)) in surviving
    ]


def memories_enforce_quota(
    *, now: datetime | None = None, limit: int | None = None, batch_size: int = 5000
) -> int:
    """Archive the lowest effective-importance memories of agents over their quota."""
    moment = now or timezone.now()
    quota = limit if limit is not None else settings.MEMORY_QUOTA_PER_AGENT
    over = [agent_id for agent_id, _ in _agents_over_quota(moment, quota)]
    return _quota_batch(moment, quota, over, batch_size)[0] if over else 0


def memories_enforce_quota_sweep(
    *, now: datetime | None = None, limit: int | None = None, batch_size: int = 5000
) -> Iterator[Batch]:
    """``memories_enforce_quota`` a few agents at a time, for the background job.

    The agents over quota are found once (one count over the active rows); then each batch ranks
    only a few agents' memories, instead of every active memory of every agent again per batch.
    """
    moment = now or timezone.now()
    quota = limit if limit is not None else settings.MEMORY_QUOTA_PER_AGENT
    over = _agents_over_quota(moment, quota)
    # Agents grouped so a batch archives about batch_size rows: fewer, fuller transactions.
    groups: list[list[int]] = [[]]
    excess_in_group = 0
    for agent_id, excess in over:
        if groups[-1] and excess_in_group + excess > batch_size:
            groups.append([])
            excess_in_group = 0
        groups[-1].append(agent_id)
        excess_in_group += excess
    for group in groups if over else []:
        while True:
            archived, claimed = _quota_batch(moment, quota, group, batch_size)
            yield Batch(rows=archived, more=True)
            if len(claimed) < batch_size:
                break
    yield Batch(rows=0, more=False)


# Counted against the quota: neither archived nor expired.
ACTIVE_SQL = "archived_at IS NULL AND (expires_at IS NULL OR expires_at > %(now)s)"


def _agents_over_quota(moment: datetime, quota: int) -> list[tuple[int, int]]:
    """(agent id, memories over the quota) of every agent over it, by agent id."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT agent_id, count(*) - %(quota)s AS excess FROM memory_memory WHERE {ACTIVE_SQL}
            GROUP BY agent_id HAVING count(*) > %(quota)s ORDER BY agent_id
            """,  # noqa: S608 (a constant expression; every value is a parameter)
            {"now": moment, "quota": quota},
        )
        return [(int(row.agent_id), int(row.excess)) for row in rows_named(cursor)]


def _quota_batch(
    moment: datetime, quota: int, agent_ids: list[int], batch_size: int
) -> tuple[int, list[int]]:
    params: dict[str, Any] = {
        "now": moment,
        "decay_base": DECAY_BASE,
        "week": SECONDS_PER_WEEK,
        "quota": quota,
        "batch": batch_size,
        "agents": agent_ids,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        ids = _claim(
            cursor,
            f"""
            -- One pass over the agents' active rows both counts them and ranks them.
            WITH ranked AS (
                SELECT m.id, m.tenant_id,
                       row_number() OVER (
                           PARTITION BY m.agent_id ORDER BY {EFFECTIVE_IMPORTANCE_SQL}, m.id
                       ) AS position,
                       count(*) OVER (PARTITION BY m.agent_id) - %(quota)s AS excess
                FROM memory_memory AS m
                WHERE m.archived_at IS NULL
                  AND (m.expires_at IS NULL OR m.expires_at > %(now)s)
                  AND m.agent_id = ANY(%(agents)s::bigint[])
            )
            SELECT id, tenant_id FROM ranked WHERE position <= excess ORDER BY id LIMIT %(batch)s
            """,  # noqa: S608 (a constant expression; every value is a parameter)
            params,
        )
        cursor.execute(
            """
            UPDATE memory_memory SET archived_at = %(now)s
            WHERE id = ANY(%(ids)s) AND archived_at IS NULL
            RETURNING id, tenant_id
            """,
            {"now": moment, "ids": ids},
        )
        rows = [(int(row.id), int(row.tenant_id)) for row in rows_named(cursor)]
        _log_per_tenant(
            rows,
            kind="memory.archived",
            payload_extra={"reason": "quota", "archived_at": moment.isoformat()},
        )
    return len(rows), ids
