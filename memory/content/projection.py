"""The token savings' daily sums (``ContentSavingsDay``) as derived data, registered in
``MemoryConfig.ready``.

The content store's items are primary data (the ledger holds their hashes, never their content),
so these sums are rebuilt from the items rather than from events: ``rebuild_projections`` drops
the tenant's rows and sums its action results again, and reports whether the rows that
``action_result_record`` kept up one result at a time came out the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from ledger.models import Event, Tenant
from memory.models import ContentSavingsDay

_FIELDS = (
    "day",
    "run_id",
    "agent_id",
    "results",
    "full_renderings",
    "tokens_full",
    "tokens_returned",
    "last_result_at",
)

_REBUILD_SQL = """
INSERT INTO memory_contentsavingsday (tenant_id, day, run_id, agent_id, results,
    full_renderings, tokens_full, tokens_returned, last_result_at)
SELECT tenant_id, (timestamp AT TIME ZONE 'UTC')::date, run_id, agent_id, count(*),
       count(*) FILTER (WHERE rendering = 'full'), sum(tokens_full), sum(tokens_returned),
       max(timestamp)
FROM memory_contentitem
WHERE tenant_id = %s AND tokens_returned IS NOT NULL
GROUP BY tenant_id, (timestamp AT TIME ZONE 'UTC')::date, run_id, agent_id
"""


def content_savings_days_rebuild(*, tenant: Tenant) -> None:
    """The tenant's daily sums, summed again from its action results."""
    ContentSavingsDay.objects.filter(tenant=tenant).delete()
    with connection.cursor() as cursor:
        cursor.execute(_REBUILD_SQL, [tenant.pk])


class ContentSavingsProjection:
    """Owns no event kinds: ``finish`` sums the items, whatever the replay held."""

    name = "content_savings"
    owned_kinds: frozenset[str] = frozenset()
    indexes_all_kinds = False

    def snapshot(self, *, tenant: Tenant) -> list[tuple[Any, ...]]:
        rows = ContentSavingsDay.objects.filter(tenant=tenant)
        return list(rows.order_by("day", "run_id", "agent_id").values_list(*_FIELDS))

    def reset(self, *, tenant: Tenant) -> None:
        pass

    def apply(self, *, tenant: Tenant, events: Sequence[Event]) -> None:
        # ``agent.deleted``: the deletion's cascade took the agent's sums with its items.
        pass

    def finish(self, *, tenant: Tenant) -> None:
        content_savings_days_rebuild(tenant=tenant)

    def after_append(self, *, event_ids: Sequence[int]) -> None:
        pass
