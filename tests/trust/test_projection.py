"""The trust tables are a projection of the ledger: a rebuild gives the same rows and scores."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Agent
from ledger.projections import projection_rebuild, registered_projections
from trust.governance.services import CriterionDraft, rubric_version_create
from trust.models import Dissent, DissentEmbedding, Override, Round, TrustScoreChange
from trust.rounds.overrides import (
    override_log,
    override_revert,
    override_revert_withdraw,
    overrides_infer_regret,
)
from trust.rounds.projection import TrustProjection
from trust.rounds.services import (
    dissent_log,
    dissent_set_impact,
    round_finalize,
    round_revise,
    rounds_post,
)

pytestmark = pytest.mark.django_db


def trust_projection() -> TrustProjection:
    found = [p for p in registered_projections() if p.name == "trust"]
    assert len(found) == 1
    assert isinstance(found[0], TrustProjection)
    return found[0]


@pytest.fixture
def history(tenant, make_agent, clock, dissent_embedder):
    """A history touching every core kind, over two agents and several rounds."""
    creator = make_agent(tenant, name="Creator1")
    reviewer = make_agent(tenant, name="Reviewer1")
    rubric_version_create(
        tenant=tenant, criteria=[CriterionDraft("Accuracy"), CriterionDraft("Scope")], actor="a"
    )
    for n in range(6):
        round_ = rounds_post(
            tenant=tenant,
            round_id=f"run/round_{n}",
            run_id="run",
            participants=["Creator1", "Reviewer1"] if n % 2 else ["Creator1"],
            actor="orchestrator",
            now=clock,
        )
        dissent = dissent_log(
            agent=reviewer,
            text=f"critique number {n} of the plan about cost and scope",
            round_id=round_.round_id,
            rubric_citations=["accuracy"] if n % 2 else ["Scope", "Accuracy"],
            context={"task": "ADR", "artifact_type": "adr"},
            actor="Reviewer1",
            now=clock,
        )
        if n < 4:
            dissent_set_impact(
                dissent=dissent, impact=n % 2 == 0, feedback_incorporated=True, actor="o", now=clock
            )
        override = override_log(
            agent=creator,
            agent_output=f"draft {n}",
            human_decision=f"decision {n}",
            decided_by="alice",
            round_id=round_.round_id,
            actor="o",
            now=clock,
        )
        if n == 0:
            override_revert(
                override=override, reverted_by="alice", note="<b>wrong</b>", actor="o", now=clock
            )
        if n == 3:  # a mistaken regret, taken back: the override stays open
            override_revert(override=override, reverted_by="bob", note="oops", actor="o", now=clock)
            override_revert_withdraw(override=override, note="misclick", actor="bob", now=clock)
        round_finalize(
            round=round_,
            final_output=f"final {n}" if n < 3 else f"decision {n}",
            actor="o",
            now=clock,
        )
        if n == 5:
            round_revise(round=round_, content="draft 5", author="bob", actor="o", now=clock)
    overrides_infer_regret(tenant=tenant, now=clock + timedelta(days=2))
    return tenant


def rows(tenant) -> tuple:
    return (
        list(Round.objects.filter(tenant=tenant).order_by("id").values()),
        list(Dissent.objects.filter(tenant=tenant).order_by("id").values()),
        list(Override.objects.filter(tenant=tenant).order_by("id").values()),
        list(TrustScoreChange.objects.filter(tenant=tenant).order_by("id").values()),
        list(
            Agent.objects.filter(tenant=tenant)
            .order_by("id")
            .values_list("id", "trust_score", "rounds_participated")
        ),
    )


def test_a_rebuild_gives_the_same_rows_and_scores(history):
    before = rows(history)
    embeddings = DissentEmbedding.objects.count()

    unchanged = projection_rebuild(projection=trust_projection(), tenant=history)

    assert unchanged
    assert rows(history) == before
    assert Override.objects.filter(regret=True).count() == 4  # marked, inferred twice, undone
    assert Override.objects.get(revert_note="<b>wrong</b>").regret
    assert not Override.objects.get(round_id="run/round_3").reverted_at
    assert TrustScoreChange.objects.filter(reason="override_revert_withdrawn").count() == 1
    assert DissentEmbedding.objects.count() == embeddings == 6


def test_a_rebuild_repairs_drift(history):
    before = rows(history)
    Dissent.objects.filter(tenant=history).update(depth_score=2.0)
    Override.objects.filter(tenant=history, regret=True).update(regret=False)
    Agent.objects.filter(tenant=history).update(trust_score=0.99, rounds_participated=0)
    TrustScoreChange.objects.filter(tenant=history).first().delete()

    unchanged = projection_rebuild(projection=trust_projection(), tenant=history)

    assert not unchanged
    assert rows(history) == before
    assert projection_rebuild(projection=trust_projection(), tenant=history)


def test_rows_created_after_a_rebuild_get_fresh_ids(history, clock):
    projection_rebuild(projection=trust_projection(), tenant=history)
    agent = Agent.objects.get(tenant=history, name="Creator1")

    override = override_log(
        agent=agent, agent_output="x", human_decision="y", decided_by="a", actor="o", now=clock
    )

    assert override.pk > max(Override.objects.exclude(pk=override.pk).values_list("pk", flat=True))


def test_the_check_command_passes_after_a_withdrawn_revert(history):
    out = StringIO()

    call_command("rebuild_projections", "--projection", "trust", "--check", stdout=out)

    assert "DIFFERED" not in out.getvalue()


def test_a_rebuild_repairs_a_withdrawn_revert_drifted_back(history):
    Override.objects.filter(round_id="run/round_3").update(
        regret=True, reverted_by="bob", revert_reason="marked", revert_note="oops"
    )

    unchanged = projection_rebuild(projection=trust_projection(), tenant=history)

    assert not unchanged
    withdrawn = Override.objects.get(round_id="run/round_3")
    assert (withdrawn.regret, withdrawn.reverted_by, withdrawn.revert_note) == (False, "", "")


def test_the_check_command_reports_drift_and_writes_nothing(history):
    Dissent.objects.filter(tenant=history).update(text="tampered")
    out = StringIO()

    with pytest.raises(CommandError):
        call_command("rebuild_projections", "--projection", "trust", "--check", stdout=out)

    assert "acme / trust: DIFFERED from the ledger" in out.getvalue()
    assert set(Dissent.objects.values_list("text", flat=True)) == {"tampered"}
