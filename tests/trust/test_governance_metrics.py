from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from config.api import ApiError
from tests.trust.governance_rows import dissent_row, override_row
from trust.governance.selectors import MetricCounts, trust_metrics

pytestmark = pytest.mark.django_db


def day(n: int, hour: int = 12) -> datetime:
    return datetime(2025, 3, n, hour, tzinfo=UTC)


@pytest.fixture
def history(tenant, make_agent):
    """Two agents over 3-5 March 2025 (a Monday to a Wednesday), plus events outside the range."""
    a, b = make_agent(tenant, name="A"), make_agent(tenant, name="B")
    for impact in (True, False, None):
        dissent_row(a, day(3), impact=impact)
    override_row(a, day(3), changed=True, regret=False)
    override_row(a, day(3), changed=True, regret=True)
    dissent_row(b, day(3, hour=23), impact=True)
    override_row(b, day(3), changed=True)
    dissent_row(a, day(5, hour=0), impact=True)  # midnight belongs to the day it starts
    override_row(a, day(5), changed=False)
    dissent_row(a, day(2), impact=False)  # before since
    dissent_row(a, day(6, hour=0), impact=False)  # until is exclusive
    return a, b


def rates(counts: MetricCounts) -> tuple:
    return (counts.dissent_impact_rate, counts.regret_rate, counts.escalation_usefulness)


def test_daily_metrics_of_the_tenant(tenant, history):
    metrics = trust_metrics(tenant=tenant, since=day(3, 0), until=day(6, 0), bucket="day")

    assert [b.start for b in metrics.buckets] == [day(3, 0), day(4, 0), day(5, 0)]
    first, quiet, last = (b.counts for b in metrics.buckets)
    assert first == MetricCounts(
        dissents=4,
        dissents_known=3,
        dissents_impactful=2,
        overrides=3,
        overrides_regretted=1,
        escalations_changed=3,
        escalations_useful=2,
    )
    assert rates(first) == (2 / 3, 1 / 3, 2 / 3)
    assert quiet == MetricCounts()
    assert rates(quiet) == (None, None, None)
    # The one override kept the agent's output: no escalation that changed anything.
    assert rates(last) == (1.0, 0.0, 0.0)
    assert metrics.totals == MetricCounts(5, 4, 3, 4, 1, 3, 2)
    assert rates(metrics.totals) == (0.75, 0.25, 0.5)


def test_metrics_of_one_agent(tenant, history):
    a, _ = history

    metrics = trust_metrics(tenant=tenant, agent=a, since=day(3, 0), until=day(4, 0), bucket="day")

    assert len(metrics.buckets) == 1
    assert metrics.totals == MetricCounts(3, 2, 1, 2, 1, 2, 1)
    assert rates(metrics.totals) == (0.5, 0.5, 0.5)


def test_weeks_start_on_monday(tenant, history):
    metrics = trust_metrics(tenant=tenant, since=day(1, 0), until=day(12, 0), bucket="week")

    assert [b.start for b in metrics.buckets] == [
        datetime(2025, 2, 24, tzinfo=UTC),
        day(3, 0),
        day(10, 0),
    ]
    # 1 March (Saturday) holds nothing; the 2nd's dissent falls in the week of 24 February.
    assert [b.counts.dissents for b in metrics.buckets] == [1, 6, 0]


def test_months(tenant, history):
    metrics = trust_metrics(
        tenant=tenant,
        since=datetime(2025, 1, 15, tzinfo=UTC),
        until=day(6, 0),
        bucket="month",
    )

    assert [b.start.month for b in metrics.buckets] == [1, 2, 3]
    assert [b.counts.dissents for b in metrics.buckets] == [0, 0, 6]


def test_another_tenants_evidence_is_not_counted(tenant, other_tenant, history, make_agent):
    outsider = make_agent(other_tenant, name="A")
    dissent_row(outsider, day(3), impact=True)

    metrics = trust_metrics(tenant=other_tenant, since=day(3, 0), until=day(6, 0), bucket="day")

    assert metrics.totals.dissents == 1


def test_the_default_range_is_the_trust_window_up_to_now(tenant, history):
    metrics = trust_metrics(tenant=tenant, now=day(6, 0), bucket="month")

    assert metrics.until == day(6, 0)
    assert metrics.since == day(6, 0) - timedelta(days=90)
    assert metrics.totals.dissents == 6


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"bucket": "year"}, "invalid_bucket"),
        ({"since": day(6), "until": day(6)}, "invalid_range"),
        ({"since": day(6), "until": day(3)}, "invalid_range"),
        (
            {"since": day(1) - timedelta(days=1001), "until": day(1), "bucket": "day"},
            "invalid_range",
        ),
    ],
)
def test_bad_ranges_and_buckets_are_refused(tenant, kwargs, code):
    with pytest.raises(ApiError) as raised:
        trust_metrics(tenant=tenant, **kwargs)

    assert (raised.value.status_code, raised.value.error_code) == (400, code)
