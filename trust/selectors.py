"""Reads of the trust app: the evidence behind scores, statistics, metrics, probation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.api import ApiError
from ledger.models import Agent, Tenant
from memory.selectors import vector_literal
from trust.models import Dissent, Override, RubricVersion, TrustScoreChange
from trust.scoring import PRIOR, TrustEvidence

WINDOW_MIN_EVENTS = 5  # below this many events in the window, a ratio uses all history
DEPTH_WINDOW = 100  # avg_depth is over the agent's last 100 dissents
# HNSW candidate list for the nearest earlier dissent, in strict order. bench/trust_bench.py
# (10,000 of the agent's dissents among 110,000) found it exactly for 200 of 200 dissents at 200
# and at 400 (9 ms), but missed one at 100 (by 0.59): 200 is the smallest exact list measured.
NOVELTY_EF_SEARCH = 200

# One statement for any number of agents: the per-agent aggregates run on the
# (tenant, agent, occurred_at) indexes, so one agent costs one index range, and a bulk recompute
# of a tenant is one pass per table.
_EVIDENCE_SQL = """
SELECT a.id,
       d_recent.known, d_recent.impactful, d_all.known, d_all.impactful,
       depth.n, depth.total,
       o_recent.total, o_recent.regretted, o_all.total, o_all.regretted
FROM ledger_agent a
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE impact IS NOT NULL) AS known,
           count(*) FILTER (WHERE impact) AS impactful
    FROM trust_dissent
    WHERE tenant_id = a.tenant_id AND agent_id = a.id
      AND occurred_at > %(since)s AND occurred_at <= %(now)s
) d_recent ON true
LEFT JOIN LATERAL (
    -- All history is read only where the window holds too few events (a one-time filter).
    SELECT count(*) FILTER (WHERE impact IS NOT NULL) AS known,
           count(*) FILTER (WHERE impact) AS impactful
    FROM trust_dissent
    WHERE d_recent.known < %(min_events)s
      AND tenant_id = a.tenant_id AND agent_id = a.id AND occurred_at <= %(now)s
) d_all ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n, coalesce(sum(depth_score), 0) AS total
    FROM (
        SELECT depth_score FROM trust_dissent
        WHERE tenant_id = a.tenant_id AND agent_id = a.id AND occurred_at <= %(now)s
        ORDER BY occurred_at DESC, id DESC
        LIMIT %(depth_window)s
    ) recent
) depth ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS total, count(*) FILTER (WHERE regret) AS regretted
    FROM trust_override
    WHERE tenant_id = a.tenant_id AND agent_id = a.id
      AND occurred_at > %(since)s AND occurred_at <= %(now)s
) o_recent ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS total, count(*) FILTER (WHERE regret) AS regretted
    FROM trust_override
    WHERE o_recent.total < %(min_events)s
      AND tenant_id = a.tenant_id AND agent_id = a.id AND occurred_at <= %(now)s
) o_all ON true
WHERE a.tenant_id = %(tenant)s {agent_filter}
"""


def _windowed(
    recent_total: int, recent_hits: int, all_total: int, all_hits: int
) -> tuple[int, int, str]:
    """The window SPEC 8 asks for: the last 90 days, or all history when it holds fewer than 5
    (all-history counts are zero when the window is full: the SQL skips reading them)."""
    if recent_total >= WINDOW_MIN_EVENTS:
        return recent_total, recent_hits, f"{settings.TRUST_WINDOW_DAYS}d"
    if all_total == 0:
        return 0, 0, "none"
    return all_total, all_hits, "all"


def trust_evidence(
    *, tenant: Tenant, agent_ids: Sequence[int] | None = None, now: datetime | None = None
) -> dict[int, TrustEvidence]:
    """The evidence for each agent's score at ``now`` (all of the tenant's agents by default)."""
    moment = now or timezone.now()
    params: dict[str, Any] = {
        "tenant": tenant.pk,
        "now": moment,
        "since": moment - timedelta(days=settings.TRUST_WINDOW_DAYS),
        "depth_window": DEPTH_WINDOW,
        "min_events": WINDOW_MIN_EVENTS,
    }
    agent_filter = ""
    if agent_ids is not None:
        agent_filter = "AND a.id = ANY(%(agents)s)"
        params["agents"] = list(agent_ids)
    with connection.cursor() as cursor:
        cursor.execute(_EVIDENCE_SQL.format(agent_filter=agent_filter), params)
        rows = cursor.fetchall()
    evidence = {}
    for row in rows:
        agent_id, *counts = row
        known_recent, impactful_recent, known_all, impactful_all = (int(c) for c in counts[:4])
        depth_n, depth_total = int(counts[4]), float(counts[5])
        total_recent, regret_recent, total_all, regret_all = (int(c) for c in counts[6:])
        dissents_known, impactful, dissent_window = _windowed(
            known_recent, impactful_recent, known_all, impactful_all
        )
        overrides, regretted, override_window = _windowed(
            total_recent, regret_recent, total_all, regret_all
        )
        evidence[int(agent_id)] = TrustEvidence(
            dissents_known=dissents_known,
            dissents_impactful=impactful,
            dissents_window=dissent_window,
            depth_count=depth_n,
            depth_sum=depth_total,
            overrides=overrides,
            overrides_regretted=regretted,
            overrides_window=override_window,
        )
    return evidence


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
        cursor.execute(
            "SELECT set_config('hnsw.iterative_scan', 'strict_order', true),"
            " set_config('hnsw.ef_search', %s, true)",
            [str(NOVELTY_EF_SEARCH)],
        )
        cursor.execute(
            """
            SELECT 1 - (embedding <=> %(vector)s::vector)
            FROM trust_dissentembedding
            WHERE tenant_id = %(tenant)s AND agent_id = %(agent)s
            ORDER BY embedding <=> %(vector)s::vector
            LIMIT 1
            """,
            {"vector": vector_literal(vector), "tenant": agent.tenant_id, "agent": agent.pk},
        )
        row = cursor.fetchone()
    return None if row is None else float(row[0])


def agent_on_probation(*, agent: Agent, now: datetime | None = None) -> bool:
    """Probation: fewer than PROBATION_MIN_ROUNDS rounds, or ``probation_until`` still ahead."""
    moment = now or timezone.now()
    if agent.rounds_participated < settings.PROBATION_MIN_ROUNDS:
        return True
    return agent.probation_until is not None and agent.probation_until > moment


def rubric_current(*, tenant: Tenant) -> RubricVersion | None:
    return (
        RubricVersion.objects.filter(tenant=tenant)
        .prefetch_related("criteria")
        .order_by("-number")
        .first()
    )


def trust_history(*, agent: Agent) -> list[dict[str, Any]]:
    """Every change of the agent's score, oldest first, starting with its initial 0.6.

    The initial entry is the agent's registration unless an import brought its own history.
    """
    changes = [
        {"timestamp": c.at, "score": c.score, "reason": c.reason}
        for c in TrustScoreChange.objects.filter(agent=agent).order_by("at", "id")
    ]
    if changes and changes[0]["reason"] == "initial":
        return changes
    return [{"timestamp": agent.created_at, "score": PRIOR, "reason": "initial"}, *changes]


@dataclass(frozen=True)
class LongTermStats:
    avg_dissent_depth_last_90d: float | None
    dissent_impact_ratio_last_90d: float | None
    total_overrides: int
    regret_rate_last_90d: float | None
    total_dissents: int


def long_term_stats(*, agent: Agent, now: datetime | None = None) -> LongTermStats:
    """SPEC 8's long-term statistics, always over the 90-day window (None when it is empty)."""
    moment = now or timezone.now()
    since = moment - timedelta(days=settings.TRUST_WINDOW_DAYS)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT
              (SELECT avg(depth_score) FROM trust_dissent
                WHERE agent_id = %(agent)s AND occurred_at > %(since)s AND occurred_at <= %(now)s),
              (SELECT avg(impact::int) FROM trust_dissent
                WHERE agent_id = %(agent)s AND impact IS NOT NULL
                  AND occurred_at > %(since)s AND occurred_at <= %(now)s),
              (SELECT count(*) FROM trust_override WHERE agent_id = %(agent)s),
              (SELECT avg(regret::int) FROM trust_override
                WHERE agent_id = %(agent)s AND occurred_at > %(since)s AND occurred_at <= %(now)s),
              (SELECT count(*) FROM trust_dissent WHERE agent_id = %(agent)s)
            """,
            {"agent": agent.pk, "since": since, "now": moment},
        )
        depth, impact, overrides, regret, dissents = cursor.fetchone()
    return LongTermStats(
        avg_dissent_depth_last_90d=None if depth is None else float(depth),
        dissent_impact_ratio_last_90d=None if impact is None else float(impact),
        total_overrides=int(overrides),
        regret_rate_last_90d=None if regret is None else float(regret),
        total_dissents=int(dissents),
    )


def recent_dissents(*, agent: Agent, limit: int = 100) -> list[Dissent]:
    return list(Dissent.objects.filter(agent=agent).order_by("-occurred_at", "-id")[:limit])


def recent_overrides(*, agent: Agent, limit: int = 100) -> list[Override]:
    return list(Override.objects.filter(agent=agent).order_by("-occurred_at", "-id")[:limit])
