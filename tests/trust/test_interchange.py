"""Per-agent documents (the design note's memory/<Agent>.json): export, import, round trip."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command

from config.api import ApiError
from ledger.models import Agent, Event
from ledger.projections import projection_rebuild, registered_projections
from trust.interchange.selectors import agent_export
from trust.interchange.services import agent_import
from trust.models import Dissent, Override, TrustScoreChange
from trust.rounds.overrides import override_log, override_revert, overrides_infer_regret
from trust.rounds.services import dissent_log, dissent_set_impact, round_finalize, rounds_post
from trust.scores import selectors
from trust.scores.scoring import trust_score
from trust.scores.services import trust_recompute

pytestmark = pytest.mark.django_db


@pytest.fixture
def creator(tenant, make_agent, clock, dissent_embedder):
    """An agent with dissents (judged and not), overrides (open, marked, inferred), rounds and
    a score history."""
    agent = make_agent(tenant, name="Creator1", model="gpt-x", primary_role="creator")
    # Registered before the fixed clock's events, as it would have been.
    Agent.objects.filter(pk=agent.pk).update(created_at=clock - timedelta(days=30))
    for n in range(3):
        round_ = rounds_post(
            tenant=tenant,
            round_id=f"run/round_{n}",
            participants=["Creator1"],
            actor="o",
            now=clock,
        )
        dissent = dissent_log(
            agent=agent,
            text=f"dissent {n} about tooling and cost",
            round_id=round_.round_id,
            context={"task": "ADR", "artifact_type": "adr"},
            actor="o",
            now=clock + timedelta(minutes=n),
        )
        if n:
            dissent_set_impact(
                dissent=dissent, impact=n == 1, feedback_incorporated=n == 1, actor="o", now=clock
            )
        override = override_log(
            agent=agent,
            agent_output=f"output {n}",
            human_decision=f"decision {n}",
            decided_by="alice",
            round_id=round_.round_id,
            context={"task": "ADR"},
            actor="o",
            now=clock + timedelta(minutes=n),
        )
        if n == 0:
            override_revert(
                override=override, reverted_by="alice", note="wrong <call>", actor="o", now=clock
            )
        if n == 1:
            round_finalize(round=round_, final_output="other", actor="o", now=clock)
    overrides_infer_regret(tenant=tenant, now=clock + timedelta(days=2))
    agent.refresh_from_db()
    return agent


def test_export_import_export_gives_the_same_document(creator, other_tenant, clock):
    later = clock + timedelta(days=3)
    document = agent_export(agent=creator, now=later)

    imported = agent_import(
        tenant=other_tenant, document=json.loads(json.dumps(document)), actor="o"
    )

    assert agent_export(agent=imported, now=later) == document
    assert document["rounds_participated"] == 3
    assert [o["reverted_by"] for o in document["override_history"]] == ["alice", "system", None]
    assert document["trust_score_history"][0]["reason"] == "initial"
    assert imported.trust_score == creator.trust_score != 0.6


# Fields an import cannot or should not carry over, with why. Every other field of these models
# must come back equal from export -> import, so a field added later that the document forgets
# fails the round trip below.
NOT_CARRIED = {
    Agent: {
        "id": "the importing tenant's own",
        "tenant": "the importing tenant's own",
        "created_at": "when the agent was registered here",
    },
    Dissent: {
        "id": "the importing tenant's own",
        "tenant": "the importing tenant's own",
        "agent": "the imported agent",
        "created_at": "when the row was written here: the import",
        "imported": "marks the rows an import wrote",
        "rubric_version": "the exporting tenant's rubric numbering means nothing here",
    },
    Override: {
        "id": "the importing tenant's own",
        "tenant": "the importing tenant's own",
        "agent": "the imported agent",
        "created_at": "when the row was written here: the import",
    },
    TrustScoreChange: {
        "cause": "names the exporting tenant's override and dissent ids",
        "id": "the importing tenant's own",
        "tenant": "the importing tenant's own",
        "agent": "the imported agent",
    },
}


def carried_fields(model):
    names = [field.name for field in model._meta.concrete_fields]
    assert set(NOT_CARRIED[model]) <= set(names), "an exclusion names a field that is gone"
    return [name for name in names if name not in NOT_CARRIED[model]]


def rows_of(model, agent):
    """The agent's rows in the document's order."""
    fields = carried_fields(model)
    if model is Agent:
        return list(Agent.objects.filter(pk=agent.pk).values(*fields))
    time = "at" if model is TrustScoreChange else "occurred_at"
    return list(model.objects.filter(agent=agent).order_by(time, "id").values(*fields))


def test_a_round_trip_keeps_every_field_of_every_row(creator, other_tenant, clock):
    later = clock + timedelta(days=3)
    document = json.loads(json.dumps(agent_export(agent=creator, now=later)))

    imported = agent_import(tenant=other_tenant, document=document, actor="o", now=later)

    for model in (Agent, Dissent, Override):
        assert rows_of(model, imported) == rows_of(model, creator), model.__name__
    # The export opens every history with the registration's 0.6 (selectors.trust_history),
    # which the original keeps no row for and the import stores as one.
    initial, *changes = rows_of(TrustScoreChange, imported)
    assert (initial["reason"], initial["score"]) == ("initial", 0.6)
    assert changes == rows_of(TrustScoreChange, creator)
    reverted = Override.objects.filter(agent=imported).exclude(reverted_at=None)
    assert {o.revert_reason for o in reverted} == {"marked", "inferred"}
    assert all(d.novelty_known for d in Dissent.objects.filter(agent=imported))


def test_the_score_is_computed_from_the_imported_evidence_not_taken_from_the_document(
    tenant, embedder_down, clock
):
    document = {
        "agent_name": "Flatterer",
        "override_history": [
            {
                "timestamp": (clock - timedelta(days=n + 1)).isoformat(),
                "agent_output": f"output {n}",
                "human_decision": f"decision {n}",
                "regret": True,
                "reverted_by": "system",
            }
            for n in range(20)
        ],
        "trust_score": 0.9,
        "trust_score_history": [
            {"timestamp": (clock - timedelta(days=30)).isoformat(), "score": 0.9, "reason": "x"}
        ],
        "rounds_participated": 30,
    }

    agent = agent_import(tenant=tenant, document=document, actor="o", now=clock)

    evidence = selectors.trust_evidence(tenant=tenant, agent_ids=[agent.pk], now=clock)
    expected = trust_score(evidence[agent.pk], prior_strength=settings.TRUST_PRIOR_STRENGTH)
    # 20 regretted overrides: regret term 0, the rest at the prior, blended with m = 5.
    assert agent.trust_score == expected.score == pytest.approx((5 * 0.6 + 20 * 0.42) / 25)
    assert Agent.objects.get(pk=agent.pk).trust_score == agent.trust_score
    assert trust_recompute(tenant=tenant, agent_ids=[agent.pk], reason="check", now=clock) == 0
    last = TrustScoreChange.objects.filter(agent=agent).order_by("-id").first()
    assert (last.reason, last.score) == ("imported", agent.trust_score)
    imported = Event.objects.get(kind="trust.rounds_imported")
    assert imported.payload["trust_score_claimed"] == 0.9
    assert agent_export(agent=agent, now=clock)["trust_score"] == agent.trust_score


def test_the_import_command_names_a_score_the_evidence_does_not_bear_out(
    other_tenant, embedder_down, tmp_path
):
    document = {
        "agent_name": "Flatterer",
        "override_history": [
            {
                "timestamp": "2025-01-01T00:00:00Z",
                "agent_output": "output",
                "human_decision": "decision",
                "regret": True,
            }
        ],
        "trust_score": 0.9,
    }
    (tmp_path / "Flatterer.json").write_text(json.dumps(document))
    out = StringIO()

    call_command("trust_import", "--tenant", "globex", str(tmp_path), stdout=out)

    score = Agent.objects.get(tenant=other_tenant, name="Flatterer").trust_score
    assert f"imported Flatterer (trust {score}; the file said 0.9)" in out.getvalue()


def test_an_imported_score_is_replayed_by_a_rebuild(tenant, embedder_down, clock):
    document = {
        "agent_name": "Flatterer",
        "override_history": [
            {
                "timestamp": clock.isoformat(),
                "agent_output": "output",
                "human_decision": "decision",
                "regret": True,
            }
        ],
        "trust_score": 0.9,
    }
    agent = agent_import(tenant=tenant, document=document, actor="o", now=clock)
    trust = next(p for p in registered_projections() if p.name == "trust")

    assert projection_rebuild(projection=trust, tenant=tenant)
    assert Agent.objects.get(pk=agent.pk).trust_score == agent.trust_score != 0.9


def test_an_import_is_replayed_by_a_rebuild(creator, other_tenant, clock):
    document = agent_export(agent=creator, now=clock)
    agent = agent_import(tenant=other_tenant, document=document, actor="o")
    trust = next(p for p in registered_projections() if p.name == "trust")

    unchanged = projection_rebuild(projection=trust, tenant=other_tenant)

    assert unchanged
    assert agent_export(agent=Agent.objects.get(pk=agent.pk), now=clock) == document
    assert all(Dissent.objects.filter(agent=agent).values_list("imported", flat=True))


def test_imported_dissents_keep_their_depth_and_citations(tenant, embedder_down):
    document = {
        "agent_name": "Veteran",
        "dissent_history": [
            {
                "timestamp": "2025-02-14T16:20:00Z",
                "dissent_text": "The decision ignores existing REST tooling.",
                "rubric_citations": ["Accuracy", "Not In Our Rubric"],
                "impact": True,
                "depth_score": 1.4,
                "feedback_incorporated": True,
            }
        ],
        "rounds_participated": 24,
    }

    agent = agent_import(tenant=tenant, document=document, actor="o")

    dissent = Dissent.objects.get(agent=agent)
    assert (dissent.depth_score, dissent.rubric_citations) == (
        1.4,
        ["Accuracy", "Not In Our Rubric"],
    )
    assert (dissent.imported, dissent.impact, dissent.novelty_known) == (True, True, False)
    assert agent.rounds_participated == 24


def test_the_novelty_an_imported_depth_implies_may_exceed_1(tenant, embedder_down):
    document = {
        "agent_name": "Veteran",
        "dissent_history": [
            {
                "timestamp": "2025-02-14T16:20:00Z",
                "dissent_text": "The decision ignores existing REST tooling.",
                "rubric_citations": ["Accuracy"],
                "depth_score": 1.9,
            }
        ],
    }

    agent = agent_import(tenant=tenant, document=document, actor="o")

    dissent = Dissent.objects.get(agent=agent)
    assert dissent.novelty == pytest.approx(1.9 - 6 / 50 - 0.2)
    assert dissent.depth_score == 1.9


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ([], "(document)"),
        ({"agent_name": ""}, "agent_name"),
        ({"agent_name": "A", "dissent_history": {}}, "dissent_history"),
        (
            {
                "agent_name": "A",
                "dissent_history": [{"timestamp": "yesterday", "dissent_text": "t"}],
            },
            "dissent_history[0].timestamp",
        ),
        (
            {
                "agent_name": "A",
                "dissent_history": [
                    {"timestamp": "2025-01-01T00:00:00Z", "dissent_text": "t", "depth_score": 3}
                ],
            },
            "dissent_history[0].depth_score",
        ),
        (
            {"agent_name": "A", "override_history": [{"timestamp": "2025-01-01T00:00:00Z"}]},
            "override_history[0].agent_output",
        ),
        ({"agent_name": "A", "trust_score": 1.5}, "trust_score"),
        (
            {
                "agent_name": "A",
                "dissent_history": [
                    {"timestamp": "2025-01-01T00:00:00Z", "dissent_text": "t", "novelty": 2.5}
                ],
            },
            "dissent_history[0].novelty",
        ),
        (
            {
                "agent_name": "A",
                "dissent_history": [
                    {
                        "timestamp": "2025-01-01T00:00:00Z",
                        "dissent_text": "t",
                        "novelty": 0.5,
                        "depth_score": 2.0,
                    }
                ],
            },
            "dissent_history[0].depth_score",
        ),
        (
            {
                "agent_name": "A",
                "dissent_history": [
                    {
                        "timestamp": "2025-01-01T00:00:00Z",
                        "dissent_text": "t",
                        "impact": True,
                        "impact_set_at": "soon",
                    }
                ],
            },
            "dissent_history[0].impact_set_at",
        ),
        (
            {
                "agent_name": "A",
                "override_history": [
                    {
                        "timestamp": "2025-01-01T00:00:00Z",
                        "agent_output": "a",
                        "human_decision": "b",
                        "regret": True,
                        "revert_reason": "because",
                    }
                ],
            },
            "override_history[0].revert_reason",
        ),
        (
            {
                "agent_name": "A",
                "trust_score_history": [
                    {
                        "timestamp": "2025-01-01T00:00:00Z",
                        "score": 0.5,
                        "reason": "x",
                        "components": [],
                    }
                ],
            },
            "trust_score_history[0].components",
        ),
        ({"agent_name": "A", "rounds_participated": -1}, "rounds_participated"),
    ],
)
def test_a_bad_document_is_refused_naming_the_field(tenant, document, path):
    events = Event.objects.count()

    with pytest.raises(ApiError) as refused:
        agent_import(tenant=tenant, document=document, actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (400, "invalid_document")
    assert refused.value.details["path"] == path
    assert Event.objects.count() == events
    assert not Agent.objects.filter(tenant=tenant).exists()


def test_importing_over_an_agent_with_history_is_refused(creator, tenant, clock):
    document = agent_export(agent=creator, now=clock)
    counts = (Dissent.objects.count(), Override.objects.count(), TrustScoreChange.objects.count())

    with pytest.raises(ApiError) as refused:
        agent_import(tenant=tenant, document=document, actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (409, "agent_has_trust_history")
    assert (
        Dissent.objects.count(),
        Override.objects.count(),
        TrustScoreChange.objects.count(),
    ) == (counts)


def test_the_commands_move_a_folder_of_agents(creator, other_tenant, tmp_path):
    call_command("trust_export", "--tenant", "acme", "--output", str(tmp_path), stdout=StringIO())
    out = StringIO()

    call_command("trust_import", "--tenant", "globex", str(tmp_path), stdout=out)

    assert (tmp_path / "Creator1.json").exists()
    assert "imported Creator1" in out.getvalue()
    moved = Agent.objects.get(tenant=other_tenant, name="Creator1")
    assert Dissent.objects.filter(agent=moved).count() == 3
    assert moved.model == "gpt-x"
