"""Reads of governance: the current rubric, how far a decision maker is trusted, the flags and
proposals waiting for a person, and SPEC 8's metrics per bucket of time."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import (
    Count,
    Q,
)
from django.utils import timezone

from config.api import ApiError
from config.sql import rows_named
from ledger.models import Agent, Tenant
from trust.governance.models import GamingFlag, RubricProposal, RubricVersion
from trust.rounds.models import Override
from trust.scores.scoring import PRIOR


def rubric_current(*, tenant: Tenant) -> RubricVersion | None:
    return (
        RubricVersion.objects.filter(tenant=tenant)
        .prefetch_related("criteria")
        .order_by("-number")
        .first()
    )


def agent_gaming_flags(*, agent: Agent, limit: int = 10) -> list[GamingFlag]:
    return list(
        GamingFlag.objects.filter(tenant_id=agent.tenant_id, agent=agent).order_by("-id")[:limit]
    )


def gaming_flags_open(*, tenant: Tenant) -> list[GamingFlag]:
    return list(
        GamingFlag.objects.filter(tenant=tenant, status=GamingFlag.Status.OPEN)
        .select_related("agent")
        .order_by("created_at", "id")
    )


def rubric_proposals_pending(*, tenant: Tenant) -> list[RubricProposal]:
    return list(
        RubricProposal.objects.filter(tenant=tenant, status=RubricProposal.Status.PENDING)
        .select_related("override__agent")
        .order_by("created_at", "id")
    )


@dataclass(frozen=True)
class DecisionMakerTrust:
    name: str
    trust: float
    source: str  # "agent" (its trust score) or "track_record" (a person's overrides)
    overrides: int
    regretted: int


def decision_maker_trust(*, tenant: Tenant, name: str) -> DecisionMakerTrust:
    """How far the tenant trusts whoever decided overrides as ``name``.

    An agent of the tenant has its trust score. A person has a track record: 1 - the regret
    ratio of the overrides they decided, blended toward the prior like a trust score,
    (m·0.6 + n·(1 - ratio)) / (m + n), so one unregretted decision does not make them an expert.
    """
    agent = Agent.objects.filter(tenant=tenant, name=name).first()
    record = Override.objects.filter(tenant=tenant, decided_by=name).aggregate(
        n=Count("id"), regretted=Count("id", filter=Q(regret=True))
    )
    n, regretted = int(record["n"]), int(record["regretted"])
    if agent is not None:
        return DecisionMakerTrust(name, agent.trust_score, "agent", n, regretted)
    m = settings.TRUST_PRIOR_STRENGTH
    if m + n == 0:
        return DecisionMakerTrust(name, PRIOR, "track_record", n, regretted)
    kept = 1.0 - regretted / n if n else PRIOR
    trust = (m * PRIOR + n * kept) / (m + n)
    return DecisionMakerTrust(name, round(trust, 6), "track_record", n, regretted)


# --- Metrics -----------------------------------------------------------------------------------


BUCKETS = ("day", "week", "month")


MAX_BUCKETS = 1000


_BUCKET_STEP = {"day": "1 day", "week": "1 week", "month": "1 month"}


# Buckets are UTC calendar days, ISO weeks (from Monday) and months, made by date_trunc; the
# series of bucket starts is generated too, so a quiet bucket is reported with zeros, not skipped.
_METRICS_SQL = """
WITH buckets AS (
    SELECT generate_series(
        date_trunc(%(bucket)s, %(since)s AT TIME ZONE 'UTC'),
        date_trunc(%(bucket)s, %(last)s AT TIME ZONE 'UTC'),
        %(step)s::interval
    ) AS start
), d AS (
    SELECT date_trunc(%(bucket)s, occurred_at AT TIME ZONE 'UTC') AS start,
           count(*) AS dissents,
           count(*) FILTER (WHERE impact IS NOT NULL) AS known,
           count(*) FILTER (WHERE impact) AS impactful
    FROM trust_dissent
    WHERE tenant_id = %(tenant)s AND occurred_at >= %(since)s AND occurred_at < %(until)s
          {agent_filter}
    GROUP BY 1
), o AS (
    SELECT date_trunc(%(bucket)s, occurred_at AT TIME ZONE 'UTC') AS start,
           count(*) AS overrides,
           count(*) FILTER (WHERE regret) AS regretted,
           count(*) FILTER (WHERE decision_hash <> agent_output_hash) AS changed,
           count(*) FILTER (WHERE decision_hash <> agent_output_hash AND NOT regret) AS useful
    FROM trust_override
    WHERE tenant_id = %(tenant)s AND occurred_at >= %(since)s AND occurred_at < %(until)s
          {agent_filter}
    GROUP BY 1
)
SELECT b.start,
       coalesce(d.dissents, 0) AS dissents,
       coalesce(d.known, 0) AS dissents_known,
       coalesce(d.impactful, 0) AS dissents_impactful,
       coalesce(o.overrides, 0) AS overrides,
       coalesce(o.regretted, 0) AS overrides_regretted,
       coalesce(o.changed, 0) AS escalations_changed,
       coalesce(o.useful, 0) AS escalations_useful
FROM buckets b
LEFT JOIN d ON d.start = b.start
LEFT JOIN o ON o.start = b.start
ORDER BY b.start
"""


def _rate(hits: int, total: int) -> float | None:
    return hits / total if total else None


@dataclass(frozen=True)
class MetricCounts:
    """The counts of a stretch of time and the three rates made from them (None: no events)."""

    dissents: int = 0
    dissents_known: int = 0
    dissents_impactful: int = 0
    overrides: int = 0
    overrides_regretted: int = 0
    escalations_changed: int = 0
    escalations_useful: int = 0

    @property
    def dissent_impact_rate(self) -> float | None:
        return _rate(self.dissents_impactful, self.dissents_known)

    @property
    def regret_rate(self) -> float | None:
        return _rate(self.overrides_regretted, self.overrides)

    @property
    def escalation_usefulness(self) -> float | None:
        return _rate(self.escalations_useful, self.overrides)

    def __add__(self, other: MetricCounts) -> MetricCounts:
        return MetricCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True)
class MetricBucket:
    start: datetime
    counts: MetricCounts


@dataclass(frozen=True)
class TrustMetrics:
    agent: Agent | None
    since: datetime
    until: datetime
    bucket: str
    buckets: list[MetricBucket]
    totals: MetricCounts


def trust_metrics(
    *,
    tenant: Tenant,
    agent: Agent | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    bucket: str = "week",
    now: datetime | None = None,
) -> TrustMetrics:
    """SPEC 8's metrics per bucket of time over [since, until), for one agent or the tenant.

    - dissent impact rate: impactful / dissents whose impact is known;
    - regret rate: regretted / overrides;
    - escalation usefulness: overrides (escalations to a person) whose decision changed the
      agent's output (their hashes differ) and were not regretted / overrides.

    Defaults: until now, since TRUST_WINDOW_DAYS before until.
    """
    if bucket not in BUCKETS:
        raise ApiError(code="invalid_bucket", message=f"bucket is one of {', '.join(BUCKETS)}.")
    end = until or now or timezone.now()
    try:
        start = since or end - timedelta(days=settings.TRUST_WINDOW_DAYS)
    except OverflowError:  # until in the first days of year 1 (a fuzzing find: was a 500)
        raise ApiError(
            code="invalid_range", message="until leaves no room for the default window."
        ) from None
    if start >= end:
        raise ApiError(code="invalid_range", message="since must be before until.")
    limit = {"day": 1, "week": 7, "month": 28}[bucket] * MAX_BUCKETS
    if end - start > timedelta(days=limit):
        raise ApiError(
            code="invalid_range",
            message=f"At most {MAX_BUCKETS} buckets; choose a shorter range or a longer bucket.",
        )
    params: dict[str, Any] = {
        "tenant": tenant.pk,
        "bucket": bucket,
        "step": _BUCKET_STEP[bucket],
        "since": start,
        "until": end,
        # The last instant inside the half-open range names the last bucket.
        "last": end - timedelta(microseconds=1),
    }
    agent_filter = ""
    if agent is not None:
        agent_filter = "AND agent_id = %(agent)s"
        params["agent"] = agent.pk
    with connection.cursor() as cursor:
        cursor.execute(_METRICS_SQL.format(agent_filter=agent_filter), params)
        rows = rows_named(cursor)
    # The SQL names its counts as MetricCounts names its fields.
    counted = [f.name for f in fields(MetricCounts)]
    buckets = [
        MetricBucket(
            start=row.start.replace(tzinfo=UTC),
            counts=MetricCounts(**{name: int(getattr(row, name)) for name in counted}),
        )
        for row in rows
    ]
    totals = sum((b.counts for b in buckets), MetricCounts())
    return TrustMetrics(
        agent=agent, since=start, until=end, bucket=bucket, buckets=buckets, totals=totals
    )
