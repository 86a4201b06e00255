"""Reads of rounds, dissents and overrides: agents by name, the novelty search, an agent's evidence
and the review queue's overrides with their confirmations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import (
    Q,
    QuerySet,
)
from django.db.models.functions import Left
from django.utils import timezone

from config.api import ApiError
from config.sql import row_named
from ledger.models import Agent, Event, Tenant
from memory.search.plans import cosine_similarity_sql, hnsw_scan_configure, vector_literal
from trust.rounds.models import Dissent, Override

# HNSW candidate list for the nearest earlier dissent, in strict order. bench/trust_bench.py
# (10,000 of the agent's dissents among 110,000) found it exactly for 200 of 200 dissents at 200
# and at 400 (9 ms), but missed one at 100 (by 0.59): 200 is the smallest exact list measured.
NOVELTY_EF_SEARCH = 200


def unknown_agents(names: Sequence[str]) -> ApiError:
    return ApiError(
        code="unknown_agent",
        message=f"No agent of this tenant is named {', '.join(names)}.",
        details={"unknown": list(names)},
    )


def agents_named(*, tenant: Tenant, names: Sequence[str]) -> dict[str, Agent]:
    """The tenant's agents by name; 400 ``unknown_agent`` listing the names that are none."""
    agents = {agent.name: agent for agent in Agent.objects.filter(tenant=tenant, name__in=names)}
    unknown = [name for name in names if name not in agents]
    if unknown:
        raise unknown_agents(unknown)
    return agents


def dissent_max_similarity(*, agent: Agent, vector: Sequence[float]) -> float | None:
    """The highest cosine similarity of ``vector`` to the agent's earlier dissents, or None.

    The nearest neighbour comes from the HNSW index with iterative scans, so the agent filter
    cannot starve it however many other agents' dissents share the index.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        # Strict order: in relaxed order the first row of this agent that the index offers need
        # not be its nearest (bench/trust_bench.py found novelty off by up to 0.69 that way).
        hnsw_scan_configure(cursor, ef_search=NOVELTY_EF_SEARCH)
        cursor.execute(
            f"""
            SELECT {cosine_similarity_sql("embedding")} AS similarity
            FROM trust_dissentembedding
            WHERE tenant_id = %(tenant)s AND agent_id = %(agent)s
            ORDER BY embedding <=> %(vector)s::vector
            LIMIT 1
            """,  # noqa: S608 (the f-string adds our own SQL, no input)
            {"vector": vector_literal(vector), "tenant": agent.tenant_id, "agent": agent.pk},
        )
        row = row_named(cursor)
    return None if row is None or row.similarity is None else float(row.similarity)


def recent_dissents(*, agent: Agent, limit: int = 100) -> list[Dissent]:
    return list(Dissent.objects.filter(agent=agent).order_by("-occurred_at", "-id")[:limit])


def recent_overrides(*, agent: Agent, limit: int = 100) -> list[Override]:
    return list(Override.objects.filter(agent=agent).order_by("-occurred_at", "-id")[:limit])


def agent_dissents(*, agent: Agent) -> QuerySet[Dissent]:
    return Dissent.objects.filter(tenant_id=agent.tenant_id, agent=agent).order_by(
        "-occurred_at", "-id"
    )


OVERRIDE_HEAD_CHARS = 161  # the pages show 160 characters of an override's texts


def _with_heads(overrides: QuerySet[Override]) -> QuerySet[Override]:
    """The start of each override's texts (``agent_output_head``, ``human_decision_head``)
    instead of the whole texts, which may hold 20,000 characters each."""
    return overrides.defer("agent_output", "human_decision", "context").annotate(
        agent_output_head=Left("agent_output", OVERRIDE_HEAD_CHARS),
        human_decision_head=Left("human_decision", OVERRIDE_HEAD_CHARS),
    )


def agent_overrides(*, agent: Agent) -> QuerySet[Override]:
    return _with_heads(
        Override.objects.filter(tenant_id=agent.tenant_id, agent=agent).order_by(
            "-occurred_at", "-id"
        )
    )


def overrides_for_review(*, tenant: Tenant) -> QuerySet[Override]:
    """The tenant's overrides as the review queue's rows show them."""
    return _with_heads(Override.objects.filter(tenant=tenant).select_related("agent", "tenant"))


REVIEW_RECENT_DAYS = 7


OVERRIDE_CONFIRMED = "override.confirmed"
OVERRIDE_REVERT_WITHDRAWN = "override.revert_withdrawn"


def overrides_waiting(*, tenant: Tenant, now: datetime | None = None) -> QuerySet[Override]:
    """Open overrides whose regret check is still ahead, the nearest deadline first."""
    moment = now or timezone.now()
    return (
        overrides_for_review(tenant=tenant)
        .filter(reverted_at__isnull=True, auto_check_deadline__gt=moment)
        .order_by("auto_check_deadline", "id")
    )


def overrides_recent(
    *, tenant: Tenant, now: datetime | None = None, limit: int = 20
) -> list[Override]:
    """Overrides of the last REVIEW_RECENT_DAYS that are settled (reverted, or past their
    deadline), newest first."""
    moment = now or timezone.now()
    return list(
        overrides_for_review(tenant=tenant)
        .filter(occurred_at__gt=moment - timedelta(days=REVIEW_RECENT_DAYS))
        .filter(Q(reverted_at__isnull=False) | Q(auto_check_deadline__lte=moment))
        .order_by("-occurred_at", "-id")[:limit]
    )


@dataclass(frozen=True)
class Confirmation:
    by: str
    at: datetime


def override_confirmations(
    *, tenant: Tenant, override_ids: Sequence[int]
) -> dict[int, Confirmation]:
    """Who confirmed which of these overrides, read from their ``override.confirmed`` events
    (the latest confirmation of each wins)."""
    if not override_ids:
        return {}
    events = (
        Event.objects.filter(
            tenant=tenant, kind=OVERRIDE_CONFIRMED, payload__override_id__in=list(override_ids)
        )
        .order_by("seq")
        .values_list("payload", "actor", "created_at")
    )
    return {
        int(payload["override_id"]): Confirmation(by=actor, at=created_at)
        for payload, actor, created_at in events
    }
