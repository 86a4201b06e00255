from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from config.api import ApiError
from ledger.models import Event
from tests.trust.governance_rows import agent_with, dissent_row, override_row
from trust.governance.services import (
    CriterionDraft,
    gaming_check,
    gaming_flag_review,
    rubric_version_create,
)
from trust.models import Dissent, GamingFlag

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def dissents(agent, citations_each, *, start=NOW):
    """One dissent per entry, newest first from ``start``, a minute apart."""
    for i, citations in enumerate(citations_each):
        dissent_row(agent, start - timedelta(minutes=i), citations=citations)


@pytest.fixture
def trusted(tenant, make_agent):
    return agent_with(make_agent(tenant, name="Critic"), trust=0.85)


def test_it_flags_a_trusted_agent_that_always_cites_one_criterion(trusted):
    dissents(trusted, [["Accuracy"]] * 10)

    flag = gaming_check(agent=trusted, now=NOW)

    assert flag is not None
    assert (flag.status, flag.entropy_bits, flag.trust_score) == ("open", 0.0, 0.85)
    assert (flag.dissents_considered, flag.citation_counts) == (10, {"Accuracy": 10})
    event = Event.objects.get(tenant=trusted.tenant, kind="gaming.flagged")
    assert event.payload["flag_id"] == flag.pk
    assert event.payload["entropy_bits"] == 0.0


def test_it_opens_one_flag_while_one_waits(trusted):
    dissents(trusted, [["Accuracy"]] * 12)

    first = gaming_check(agent=trusted, now=NOW)
    second = gaming_check(agent=trusted, now=NOW)

    assert first is not None
    assert second is None
    assert GamingFlag.objects.filter(agent=trusted).count() == 1
    assert Event.objects.filter(tenant=trusted.tenant, kind="gaming.flagged").count() == 1


def test_it_waits_for_ten_dissents(trusted):
    dissents(trusted, [["Accuracy"]] * 9)

    assert gaming_check(agent=trusted, now=NOW) is None


def test_it_does_not_flag_an_agent_of_lower_trust(tenant, make_agent):
    agent = agent_with(make_agent(tenant, name="Meh"), trust=0.69)
    dissents(agent, [["Accuracy"]] * 10)

    assert gaming_check(agent=agent, now=NOW) is None


def test_it_does_not_flag_diverse_citations(trusted):
    # Four criteria cited evenly: 2 bits, over the 1-bit threshold.
    dissents(trusted, [["Accuracy"], ["Clarity"], ["Completeness"], ["Evidence"]] * 5)

    assert gaming_check(agent=trusted, now=NOW) is None


def test_it_flags_narrow_citations_under_the_threshold(trusted):
    # 9 to 1 between two criteria: about 0.47 bits.
    dissents(trusted, [["Accuracy"]] * 9 + [["Clarity"]])

    flag = gaming_check(agent=trusted, now=NOW)

    assert flag is not None
    assert flag.entropy_bits == pytest.approx(0.469, abs=1e-3)


def test_it_does_not_flag_dissents_that_cite_nothing(trusted):
    dissents(trusted, [[]] * 15)

    assert gaming_check(agent=trusted, now=NOW) is None


def test_only_the_last_twenty_dissents_count(trusted):
    dissents(trusted, [["Accuracy"], ["Clarity"], ["Completeness"], ["Evidence"]] * 5)
    dissents(trusted, [["Accuracy"]] * 30, start=NOW - timedelta(days=1))

    assert gaming_check(agent=trusted, now=NOW) is None


def test_dissents_after_now_do_not_count(trusted):
    dissents(trusted, [["Accuracy"]] * 10, start=NOW + timedelta(hours=1))

    assert gaming_check(agent=trusted, now=NOW) is None


@pytest.fixture
def flag(trusted):
    dissents(trusted, [["Accuracy"]] * 10)
    return gaming_check(agent=trusted, now=NOW)


@pytest.mark.parametrize("status", ["dismissed", "confirmed"])
def test_a_review_closes_the_flag_and_is_logged(flag, status):
    reviewed = gaming_flag_review(flag=flag, status=status, note="checked", actor="human:rev")

    assert (reviewed.status, reviewed.reviewed_by, reviewed.review_note) == (
        status,
        "human:rev",
        "checked",
    )
    event = Event.objects.get(tenant=flag.tenant, kind="gaming.flag_reviewed")
    assert (event.actor, event.payload["status"]) == ("human:rev", status)


def test_a_flag_is_reviewed_once(flag):
    gaming_flag_review(flag=flag, status="dismissed", note="", actor="human:rev")

    with pytest.raises(ApiError) as raised:
        gaming_flag_review(flag=flag, status="confirmed", note="", actor="human:other")

    assert (raised.value.status_code, raised.value.error_code) == (409, "flag_already_reviewed")
    flag.refresh_from_db()
    assert (flag.status, flag.reviewed_by) == ("dismissed", "human:rev")


def test_a_review_must_decide(flag):
    with pytest.raises(ApiError) as raised:
        gaming_flag_review(flag=flag, status="open", note="", actor="human:rev")

    assert raised.value.error_code == "invalid_review"


def test_after_a_review_only_dissents_logged_since_count(trusted, flag):
    gaming_flag_review(
        flag=flag, status="dismissed", note="", actor="human:rev", now=NOW + timedelta(hours=1)
    )
    later = NOW + timedelta(days=1)

    unchanged = gaming_check(agent=trusted, now=later)
    dissents(trusted, [["Accuracy"]] * 9, start=later)
    too_few = gaming_check(agent=trusted, now=later)
    dissents(trusted, [["Accuracy"]], start=later + timedelta(minutes=1))
    again = gaming_check(agent=trusted, now=later + timedelta(minutes=1))

    assert (unchanged, too_few) == (None, None)
    assert again is not None
    assert again.dissents_considered == 10


def test_logging_a_dissent_through_the_core_runs_the_check(
    tenant, make_agent, embedder_down, clock
):
    from trust.rounds.services import dissent_log, dissent_set_impact

    rubric_version_create(tenant=tenant, criteria=[CriterionDraft("Accuracy")], actor="x")
    agent = make_agent(tenant, name="Narrow")
    for _ in range(5):
        override_row(agent, clock - timedelta(days=1))
    text = " ".join(["the claim in section two is not supported by the cited data"] * 5)

    def log() -> None:
        dissent_log(agent=agent, text=text, rubric_citations=["accuracy"], actor="x", now=clock)

    for _ in range(9):
        log()
    for dissent in Dissent.objects.filter(agent=agent):
        dissent_set_impact(dissent=dissent, impact=True, actor="x", now=clock)
    assert not GamingFlag.objects.filter(agent=agent).exists()

    log()

    flag = GamingFlag.objects.get(agent=agent)
    assert (flag.dissents_considered, flag.citation_counts) == (10, {"Accuracy": 10})
    assert flag.trust_score >= 0.7
