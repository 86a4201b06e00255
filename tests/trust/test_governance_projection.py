from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from ledger.projections import projection_rebuild, registered_projections, reserved_kinds
from tests.trust.governance_rows import agent_with, dissent_row, override_row
from trust.governance.projection import GovernanceProjection
from trust.governance.services import (
    CriterionDraft,
    gaming_check,
    gaming_flag_review,
    rubric_proposal_decide,
    rubric_proposal_open,
    rubric_version_create,
)
from trust.models import GamingFlag, RubricProposal, RubricVersion

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def governed(tenant, make_agent):
    """Flags (reviewed and open), three rubric versions, proposals in every state."""
    critics = [agent_with(make_agent(tenant, name=f"Critic{i}"), trust=0.9) for i in range(2)]
    for critic in critics:
        for i in range(10):
            dissent_row(critic, NOW - timedelta(minutes=i), citations=["Accuracy"])
    first = gaming_check(agent=critics[0], now=NOW)
    gaming_check(agent=critics[1], now=NOW)
    assert first is not None
    gaming_flag_review(flag=first, status="confirmed", note="Always accuracy.", actor="human:rev")
    rubric_version_create(
        tenant=tenant,
        criteria=[CriterionDraft("Accuracy", "Right."), CriterionDraft("Clarity", "Clear.")],
        actor="human:admin",
        note="Start.",
    )
    override = [override_row(critics[0], NOW, decided_by="human:alice") for _ in range(3)][-1]
    drafts = [("add", "Brevity"), ("remove", "Clarity"), ("change", "Accuracy")]
    proposals = [
        rubric_proposal_open(
            override=override,
            action=action,
            criterion=criterion,
            description="New words.",
            rationale="Seen in review.",
            actor="api_key:amk_1",
        )
        for action, criterion in drafts
    ]
    rubric_proposal_decide(proposal=proposals[0], accept=True, note="Yes.", actor="human:admin")
    rubric_proposal_decide(proposal=proposals[1], accept=False, note="No.", actor="human:admin")
    return tenant


def test_a_rebuild_changes_nothing(governed):
    assert projection_rebuild(projection=GovernanceProjection(), tenant=governed)


def test_a_rebuild_restores_identical_rows(governed):
    projection = GovernanceProjection()
    before = projection.snapshot(tenant=governed)
    RubricVersion.objects.filter(tenant=governed).delete()
    RubricProposal.objects.filter(tenant=governed).delete()
    GamingFlag.objects.filter(tenant=governed).update(status="dismissed", review_note="tampered")

    equal = projection_rebuild(projection=projection, tenant=governed)

    assert not equal
    assert projection.snapshot(tenant=governed) == before
    assert [len(rows) for rows in before] == [2, 2, 5, 3]


def test_a_rebuild_leaves_other_tenants_alone(governed, other_tenant):
    rubric_version_create(tenant=other_tenant, criteria=[CriterionDraft("Mine")], actor="x")
    projection = GovernanceProjection()
    theirs = projection.snapshot(tenant=other_tenant)

    projection_rebuild(projection=projection, tenant=governed)

    assert projection.snapshot(tenant=other_tenant) == theirs


def test_it_owns_the_gaming_and_rubric_kinds_and_comes_after_the_core():
    names = [projection.name for projection in registered_projections()]
    governance = next(p for p in registered_projections() if p.name == "trust_governance")

    assert governance.owned_kinds == {
        "gaming.flagged",
        "gaming.flag_reviewed",
        "rubric.version_created",
        "rubric.change_proposed",
        "rubric.proposal_decided",
    }
    assert "trust.devils_advocate_picked" in reserved_kinds()
    if "trust" in names:
        assert names.index("trust") < names.index("trust_governance")


def test_after_a_rebuild_into_fresh_sequences_new_rows_do_not_collide(governed):
    tables = (
        "trust_gamingflag",
        "trust_rubricversion",
        "trust_rubriccriterion",
        "trust_rubricproposal",
    )
    with connection.cursor() as cursor:
        for table in tables:
            # As in a database rebuilt from the ledger alone: the next id is one already replayed.
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), min(id), false)"  # noqa: S608
                f" FROM {table}"
            )

    projection_rebuild(projection=GovernanceProjection(), tenant=governed)
    version = rubric_version_create(
        tenant=governed, criteria=[CriterionDraft("Evidence")], actor="human:admin"
    )

    assert version.number == 3


def test_a_full_trust_rebuild_keeps_proposals_linked_to_their_overrides(tenant, make_agent):
    from trust.rounds.overrides import override_log

    agent = make_agent(tenant, name="Creator1")
    rubric_version_create(tenant=tenant, criteria=[CriterionDraft("Accuracy")], actor="x")
    overrides = [
        override_log(
            agent=agent, agent_output="a", human_decision="b", decided_by="human:alice", actor="x"
        )
        for _ in range(3)
    ]
    proposal = rubric_proposal_open(
        override=overrides[-1],
        action="add",
        criterion="Brevity",
        description="",
        rationale="",
        actor="x",
    )
    wanted = [p for p in registered_projections() if p.name in ("trust", "trust_governance")]

    results = [projection_rebuild(projection=p, tenant=tenant) for p in wanted]

    assert results == [True] * len(wanted)
    proposal.refresh_from_db()
    assert proposal.override_id == overrides[-1].pk
