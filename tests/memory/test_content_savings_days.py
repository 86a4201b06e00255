"""The token savings page reads daily sums per run and agent (issue 20, Speed) and gives the same
figures as summing every action result; a rebuild and the migration reproduce the sums."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from config.sql import rows_named
from ledger.projections import projection_rebuild, registered_projections
from ledger.services import agent_delete
from memory.content.selectors import content_runs_savings
from memory.content.services import ItemDraft, action_result_record
from memory.models import ContentItem, ContentSavingsDay

pytestmark = pytest.mark.django_db

NOW = datetime.now(UTC)
MIDNIGHT = NOW.replace(hour=0, minute=0, second=0, microsecond=0)

# The page's query before the daily sums: every action result of the period, summed.
REFERENCE_SQL = """
WITH per_agent AS (
    SELECT run_id, agent_id, count(*) AS results,
           count(*) FILTER (WHERE rendering = 'full') AS full_renderings,
           sum(tokens_full) AS tokens_full, sum(tokens_returned) AS tokens_returned,
           max(timestamp) AS last_result_at
    FROM memory_contentitem
    WHERE tenant_id = %(tenant)s AND tokens_returned IS NOT NULL
      AND (%(since)s::timestamptz IS NULL OR timestamp >= %(since)s::timestamptz)
    GROUP BY run_id, agent_id
)
SELECT run_id, array_agg(agent_id ORDER BY agent_id) AS agent_ids, sum(results) AS results,
       sum(full_renderings) AS full_renderings, sum(tokens_full) AS tokens_full,
       sum(tokens_returned) AS tokens_returned, max(last_result_at) AS last_result_at
FROM per_agent GROUP BY run_id
ORDER BY last_result_at DESC, run_id
"""


def reference(tenant: Any, since: datetime | None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(REFERENCE_SQL, {"tenant": tenant.pk, "since": since})
        rows = rows_named(cursor)
    return [
        (
            row.run_id,
            len(row.agent_ids),
            int(row.results),
            int(row.full_renderings),
            int(row.tokens_full),
            int(row.tokens_returned),
            row.last_result_at,
        )
        for row in rows
    ]


def page_figures(tenant: Any, since: datetime | None) -> list[tuple[Any, ...]]:
    overview = content_runs_savings(tenant=tenant, since=since, limit=1000)
    runs = [
        (
            run.run_id,
            len(run.agents),
            run.action_results,
            run.full_renderings,
            run.tokens_full,
            run.tokens_returned,
            run.last_result_at,
        )
        for run in overview.runs
    ]
    assert overview.runs_total == len(runs)
    assert overview.total.action_results == sum(run[2] for run in runs)
    assert overview.total.full_renderings == sum(run[3] for run in runs)
    assert overview.total.tokens_full == sum(run[4] for run in runs)
    assert overview.total.tokens_returned == sum(run[5] for run in runs)
    return runs


def record(agent: Any, run_id: str, at: datetime, size: int) -> None:
    rows = [{"id": i, "name": f"row {i}", "status": "paid"} for i in range(size)]
    action_result_record(
        agent=agent,
        actor=agent.name,
        run_id=run_id,
        action_type="sql.query",
        draft=ItemDraft(content=rows, timestamp=at),
    )


# Results on both sides of midnights, on a midnight itself, and in the periods' first hours.
MOMENTS = [
    MIDNIGHT - timedelta(days=40),
    MIDNIGHT - timedelta(days=30, hours=1),
    NOW - timedelta(days=30) + timedelta(minutes=1),
    NOW - timedelta(days=30) - timedelta(minutes=1),
    MIDNIGHT - timedelta(days=7),
    MIDNIGHT - timedelta(days=7, microseconds=1),
    NOW - timedelta(days=7, seconds=-30),
    MIDNIGHT - timedelta(days=2, hours=3),
    MIDNIGHT - timedelta(days=2, hours=-3),
    MIDNIGHT,
    NOW - timedelta(minutes=5),
]


@pytest.fixture
def results(tenant, other_tenant, make_agent):
    creator, curator = make_agent(tenant, name="Creator1"), make_agent(tenant, name="Curator1")
    for i, at in enumerate(MOMENTS):
        record(creator, f"run-{i % 4}", at, 20 + i)
        record(creator, f"run-{i % 4}", at + timedelta(seconds=1), 25 + i)
        if i % 3 == 0:
            record(curator, f"run-{i % 4}", at, 3 + i)
    record(make_agent(other_tenant, name="Spy"), "run-0", NOW, 40)
    return creator, curator


PERIODS = [
    None,
    NOW - timedelta(days=30),
    NOW - timedelta(days=7),
    MIDNIGHT - timedelta(days=7),
    MIDNIGHT - timedelta(days=2),
    MIDNIGHT,
    NOW + timedelta(days=1),
]


@pytest.mark.parametrize("since", PERIODS)
def test_the_page_gives_what_summing_every_result_gives(tenant, results, since):
    expected = reference(tenant, since)

    assert page_figures(tenant, since) == expected
    if since is not None and since < NOW:
        assert expected  # the period holds results: the comparison says something


def test_the_page_lists_the_newest_runs_first_with_their_agents(tenant, results):
    overview = content_runs_savings(tenant=tenant, since=None, limit=2)

    assert [run.run_id for run in overview.runs] == [row[0] for row in reference(tenant, None)][:2]
    assert overview.runs_total == 4
    assert overview.runs[0].agents in (("Creator1",), ("Creator1", "Curator1"))
    assert overview.total.action_results == sum(r[2] for r in reference(tenant, None))


def _sums(tenant: Any) -> list[tuple[Any, ...]]:
    projection = next(p for p in registered_projections() if p.name == "content_savings")
    return list(projection.snapshot(tenant=tenant))


def test_a_rebuild_reproduces_the_sums_kept_one_result_at_a_time(tenant, results):
    kept = _sums(tenant)
    projection = next(p for p in registered_projections() if p.name == "content_savings")
    # Sums per run, agent and UTC day: fewer rows than results.
    assert 0 < len(kept) < ContentItem.objects.filter(tenant=tenant).count()

    assert projection_rebuild(projection=projection, tenant=tenant) is True
    assert _sums(tenant) == kept

    ContentSavingsDay.objects.filter(tenant=tenant, run_id="run-1").delete()
    ContentSavingsDay.objects.filter(tenant=tenant, run_id="run-2").update(tokens_full=1)
    assert projection_rebuild(projection=projection, tenant=tenant) is False
    assert _sums(tenant) == kept


def test_the_migration_sums_the_results_stored_before_it(tenant, other_tenant, results):
    kept = _sums(tenant), _sums(other_tenant)
    ContentSavingsDay.objects.all().delete()

    migration = importlib.import_module("memory.migrations.0015_content_savings_days")
    with connection.cursor() as cursor:
        cursor.execute(migration.BACKFILL)

    assert (_sums(tenant), _sums(other_tenant)) == kept


def test_deleting_an_agent_takes_its_sums_and_the_figures_still_agree(tenant, results):
    _, curator = results

    agent_delete(agent=curator, actor="admin")

    assert not ContentSavingsDay.objects.filter(agent_id=curator.pk).exists()
    assert page_figures(tenant, None) == reference(tenant, None)
    projection = next(p for p in registered_projections() if p.name == "content_savings")
    assert projection_rebuild(projection=projection, tenant=tenant) is True
