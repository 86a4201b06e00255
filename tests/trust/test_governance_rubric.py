from __future__ import annotations

from datetime import UTC, datetime

import pytest

from config.api import ApiError
from ledger.models import Event
from tests.trust.governance_rows import agent_with, override_row
from trust.governance.selectors import decision_maker_trust, rubric_current
from trust.governance.services import (
    CriterionDraft,
    rubric_proposal_decide,
    rubric_proposal_open,
    rubric_version_create,
)
from trust.models import RubricVersion

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def rubric(tenant):
    return rubric_version_create(
        tenant=tenant,
        criteria=[
            CriterionDraft("Accuracy", "Facts are right."),
            CriterionDraft("Clarity", "Easy to follow."),
        ],
        actor="human:admin",
    )


@pytest.fixture
def agent(tenant, make_agent):
    return agent_with(make_agent(tenant, name="Creator1"), trust=0.6)


@pytest.fixture
def trusted_override(agent, rubric):
    """An override by a person with three unregretted decisions: (5·0.6 + 3·1) / 8 = 0.75."""
    return [override_row(agent, NOW, decided_by="human:alice") for _ in range(3)][-1]


def propose(override, action="add", criterion="Brevity", description="Short.", **kwargs):
    return rubric_proposal_open(
        override=override,
        action=action,
        criterion=criterion,
        description=description,
        rationale=kwargs.pop("rationale", "Long answers hid the point."),
        actor=kwargs.pop("actor", "api_key:amk_1"),
        **kwargs,
    )


def criteria_of(version: RubricVersion) -> list[tuple[str, str]]:
    return [(c.name, c.description) for c in version.criteria.order_by("id")]


def test_a_persons_trust_is_their_prior_blended_track_record(tenant, agent):
    for regret in (False, False, False, True):
        override_row(agent, NOW, decided_by="human:bob", regret=regret)

    maker = decision_maker_trust(tenant=tenant, name="human:bob")

    # n = 4, ratio = 1/4: (5·0.6 + 4·0.75) / 9
    assert maker.trust == pytest.approx((3 + 3) / 9, abs=1e-6)
    assert (maker.source, maker.overrides, maker.regretted) == ("track_record", 4, 1)


def test_an_agents_trust_is_its_score(tenant, make_agent):
    deciding = agent_with(make_agent(tenant, name="Curator"), trust=0.8)

    maker = decision_maker_trust(tenant=tenant, name=deciding.name)

    assert (maker.trust, maker.source) == (0.8, "agent")


def test_a_trusted_decision_maker_opens_a_proposal(trusted_override, rubric):
    proposal = propose(trusted_override)

    assert (proposal.proposed_by, proposal.proposer_trust) == ("human:alice", 0.75)
    assert (proposal.status, proposal.base_version, proposal.override) == (
        "pending",
        rubric.number,
        trusted_override,
    )
    event = Event.objects.get(tenant=rubric.tenant, kind="rubric.change_proposed")
    assert event.payload["proposal_id"] == proposal.pk
    assert event.actor == "api_key:amk_1"


def test_a_decision_maker_below_the_threshold_may_not_propose(agent, rubric):
    override = [override_row(agent, NOW, decided_by="human:carol") for _ in range(2)][-1]

    with pytest.raises(ApiError) as raised:
        propose(override)

    assert (raised.value.status_code, raised.value.error_code) == (
        403,
        "decision_maker_not_trusted",
    )
    # (5·0.6 + 2·1) / 7
    assert raised.value.details["trust"] == pytest.approx(5 / 7, abs=1e-6)
    assert raised.value.details["threshold"] == 0.75


def test_a_low_trust_agent_decision_maker_may_not_propose(tenant, agent, rubric, make_agent):
    agent_with(make_agent(tenant, name="Curator"), trust=0.7)
    override = override_row(agent, NOW, decided_by="Curator")

    with pytest.raises(ApiError) as raised:
        propose(override)

    assert raised.value.details["trust"] == 0.7


def test_an_override_without_a_decision_maker_cannot_propose(agent, rubric):
    with pytest.raises(ApiError) as raised:
        propose(override_row(agent, NOW, decided_by=""))

    assert raised.value.error_code == "no_decision_maker"


@pytest.mark.parametrize(
    ("action", "criterion"),
    [
        ("add", "accuracy"),  # exists, whatever the case
        ("change", "Brevity"),
        ("remove", "Brevity"),
        ("add", "   "),
        ("rename", "Accuracy"),
    ],
)
def test_a_change_that_does_not_fit_the_rubric_is_refused(trusted_override, action, criterion):
    with pytest.raises(ApiError) as raised:
        propose(trusted_override, action=action, criterion=criterion)

    assert (raised.value.status_code, raised.value.error_code) == (400, "invalid_rubric_change")
    assert raised.value.details["criteria"] == ["Accuracy", "Clarity"]


def test_the_last_criterion_cannot_be_removed(tenant, trusted_override):
    rubric_version_create(tenant=tenant, criteria=[CriterionDraft("Accuracy")], actor="x")

    with pytest.raises(ApiError) as raised:
        propose(trusted_override, action="remove", criterion="Accuracy")

    assert raised.value.error_code == "invalid_rubric_change"


@pytest.mark.parametrize(
    ("action", "criterion", "description", "expected"),
    [
        (
            "add",
            "Brevity",
            "Short.",
            [
                ("Accuracy", "Facts are right."),
                ("Clarity", "Easy to follow."),
                ("Brevity", "Short."),
            ],
        ),
        (
            "change",
            "clarity",
            "A reader follows it once.",
            [("Accuracy", "Facts are right."), ("Clarity", "A reader follows it once.")],
        ),
        ("remove", "CLARITY", "", [("Accuracy", "Facts are right.")]),
    ],
)
def test_accepting_makes_a_new_version_with_the_change(
    tenant, trusted_override, rubric, action, criterion, description, expected
):
    proposal = propose(
        trusted_override, action=action, criterion=criterion, description=description
    )

    decided = rubric_proposal_decide(
        proposal=proposal, accept=True, note="Agreed.", actor="human:admin"
    )

    current = rubric_current(tenant=tenant)
    assert current is not None
    assert current.number == rubric.number + 1
    assert criteria_of(current) == expected
    assert (current.proposal, current.created_by) == (proposal, "human:admin")
    assert (decided.status, decided.result_version, decided.decided_by) == (
        "accepted",
        current.number,
        "human:admin",
    )
    kinds = list(Event.objects.filter(tenant=tenant).order_by("seq").values_list("kind", flat=True))
    assert kinds[-2:] == ["rubric.version_created", "rubric.proposal_decided"]


def test_rejecting_records_the_decision_and_keeps_the_rubric(tenant, trusted_override, rubric):
    proposal = propose(trusted_override)

    decided = rubric_proposal_decide(
        proposal=proposal, accept=False, note="Not now.", actor="human:admin"
    )

    assert rubric_current(tenant=tenant).number == rubric.number
    assert (decided.status, decided.decision_note, decided.result_version) == (
        "rejected",
        "Not now.",
        None,
    )
    event = Event.objects.filter(tenant=tenant).order_by("-seq").first()
    assert (event.kind, event.payload["status"]) == ("rubric.proposal_decided", "rejected")


@pytest.mark.parametrize("first", [True, False])
def test_a_proposal_is_decided_once(trusted_override, first):
    proposal = propose(trusted_override)
    rubric_proposal_decide(proposal=proposal, accept=first, note="", actor="human:admin")

    with pytest.raises(ApiError) as raised:
        rubric_proposal_decide(proposal=proposal, accept=True, note="", actor="human:other")

    assert (raised.value.status_code, raised.value.error_code) == (409, "proposal_already_decided")


def test_accepting_a_change_the_rubric_has_outgrown_is_refused(tenant, trusted_override):
    proposal = propose(trusted_override, criterion="Brevity")
    rubric_version_create(
        tenant=tenant,
        criteria=[CriterionDraft("Accuracy"), CriterionDraft("Brevity")],
        actor="human:admin",
    )

    with pytest.raises(ApiError) as raised:
        rubric_proposal_decide(proposal=proposal, accept=True, note="", actor="human:admin")

    assert raised.value.error_code == "invalid_rubric_change"
    proposal.refresh_from_db()
    assert proposal.status == "pending"


def test_versions_number_on_and_keep_their_criteria(tenant, rubric):
    second = rubric_version_create(
        tenant=tenant, criteria=[CriterionDraft("Evidence", "Cites sources.")], actor="x"
    )

    assert second.number == rubric.number + 1
    assert criteria_of(rubric) == [("Accuracy", "Facts are right."), ("Clarity", "Easy to follow.")]
    event = Event.objects.filter(tenant=tenant, kind="rubric.version_created").last()
    assert event.payload["criteria"] == [
        {"id": second.criteria.get().pk, "name": "Evidence", "description": "Cites sources."}
    ]
