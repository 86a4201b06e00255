"""The client against the real server: rounds, dissents, overrides, trust scores and their
interchange, the Devil's Advocate, metrics, gaming flags, the rubric and its proposals."""

from __future__ import annotations

import pytest
from ledgered_memory import Client, ConflictError, NotFoundError, PermissionDeniedError, types

from trust.models import Dissent

CRITERIA: list[types.RubricCriterionRequest] = [
    {"name": "correctness", "description": "The output is right."},
    {"name": "security", "description": "No secrets leak."},
    {"name": "clarity", "description": "A reader follows it."},
]


def track_record(name: str, *, landed: bool) -> dict:
    """A document whose evidence earns its score: 20 deep dissents that all changed the output
    (trust about 0.82), or 20 that never did beside 20 regretted overrides (about 0.26). An
    import computes the score; a ``trust_score`` in the document would be ignored."""
    return {
        "agent_name": name,
        "dissent_history": [
            {
                "timestamp": f"2025-01-{n + 1:02d}T09:00:00Z",
                "dissent_text": f"Point {n}: the draft misses a case.",
                "impact": landed,
                "depth_score": 2.0 if landed else 0.2,
            }
            for n in range(20)
        ],
        "override_history": []
        if landed
        else [
            {
                "timestamp": f"2025-01-{n + 1:02d}T10:00:00Z",
                "agent_output": f"output {n}",
                "human_decision": f"decision {n}",
                "regret": True,
            }
            for n in range(20)
        ],
        "rounds_participated": 10,
    }


@pytest.fixture
def reviewer(tenant_keys) -> Client:
    return tenant_keys.client(tenant_keys.reviewer)


def test_it_plays_a_round_with_dissents_and_overrides(admin: Client, reviewer: Client):
    admin.rubric_create(criteria=CRITERIA, note="first rubric")
    for name in ("Creator", "Critic"):
        admin.agents_create(name=name)
    made = admin.rounds_create(round_id="r1", run_id="run-1", participants=["Creator", "Critic"])
    dissent = admin.dissents_create(
        agent="Critic",
        round_id="r1",
        text="The draft logs the API key in plain text; that breaks the security criterion.",
        rubric_citations=["security"],
    )
    assert dissent["rubric_citations"] == ["security"]
    impact = admin.dissents_impact(dissent["id"], impact=True, feedback_incorporated=True)
    assert impact["impact"] is True
    assert admin.dissents_get(dissent["id"])["feedback_incorporated"] is True
    assert [d["id"] for d in admin.dissents_iter(round_id="r1")] == [dissent["id"]]
    override = admin.overrides_create(
        agent="Creator",
        round_id="r1",
        agent_output="draft 1",
        human_decision="draft 1 without the key",
        decided_by="human:dana",
    )
    assert [o["id"] for o in admin.overrides_iter(agent="Creator")] == [override["id"]]
    finalised = admin.rounds_finalize(made["id"], final_output="draft 1 without the key")
    assert finalised["finalized_at"]
    with pytest.raises(ConflictError):
        admin.rounds_finalize(made["id"], final_output="something else")
    version = admin.rounds_versions(made["id"], content="draft 2", author="Creator")
    assert version["number"] == 2
    reverted = reviewer.overrides_revert(override["id"], reverted_by="human:erin")
    assert reverted["reverted_at"]
    assert admin.overrides_get(override["id"])["reverted_by"] == "human:erin"
    assert admin.rounds_get(made["id"])["round_id"] == "r1"
    assert [r["round_id"] for r in admin.rounds_iter()] == ["r1"]
    assert admin.rounds_list(round_id="r1").results[0]["participants"] == ["Creator", "Critic"]


def test_it_reads_recomputes_exports_and_imports_trust(admin: Client, reviewer: Client):
    admin.agents_create(name="Scout")
    admin.dissents_create(agent="Scout", text="The plan ignores the rollback path entirely.")
    scores = {a["name"]: a["trust_score"] for a in admin.trust_iter()}
    assert set(scores) == {"Scout"}
    scout_id = admin.agents_list(name="Scout").results[0]["id"]
    detail = admin.trust_get(scout_id)
    assert detail["dissents"] == 1
    assert "components" in detail
    document = admin.trust_export(scout_id)
    assert document["agent_name"] == "Scout"
    # Logging the dissent already moved the score: a recompute right after finds nothing to change.
    assert admin.trust_recompute(agents=["Scout"])["changed"] == 0
    imported = admin.trust_import({**document, "agent_name": "Scout2"})
    assert imported["name"] == "Scout2"
    assert imported["dissents"] == 1
    with pytest.raises(ConflictError) as caught:
        admin.trust_import({**document, "agent_name": "Scout2"})
    assert caught.value.code == "agent_has_trust_history"
    metrics = reviewer.trust_metrics(bucket="day")
    assert metrics["totals"]["dissents"] == 2


def test_it_picks_a_devils_advocate_by_trust(admin: Client):
    veteran = admin.trust_import(track_record("Veteran", landed=True))
    novice = admin.trust_import(track_record("Novice", landed=False))
    assert veteran["trust_score"] > 0.8
    assert novice["trust_score"] < 0.3
    pick = admin.trust_devils_advocate(candidates=["Veteran", "Novice"], seed=7)
    assert pick["picked"] in ("Veteran", "Novice")
    assert pick["seed"] == 7
    again = admin.trust_devils_advocate(candidates=["Veteran", "Novice"], seed=7)
    assert again["picked"] == pick["picked"]


def test_it_flags_narrowed_citations_and_a_reviewer_settles_the_flag(
    admin: Client, reviewer: Client
):
    admin.rubric_create(criteria=CRITERIA)
    admin.agents_create(name="Narrow")
    # Overrides nobody regrets and dissents that all land (impact) raise its trust; all the
    # dissents citing one criterion narrow it.
    for n in range(10):
        admin.overrides_create(agent="Narrow", agent_output=f"v{n}", human_decision=f"w{n}")
    for n in range(14):
        dissent = admin.dissents_create(
            agent="Narrow",
            text=f"Issue {n}: handler {n} writes the session token to the log.",
            rubric_citations=["security"],
        )
        admin.dissents_impact(dissent["id"], impact=True, feedback_incorporated=True)
    flags = list(reviewer.flags_iter(status="open"))
    assert [f["agent"] for f in flags] == ["Narrow"]
    assert reviewer.flags_get(flags[0]["id"])["status"] == "open"
    settled = reviewer.flags_review(flags[0]["id"], status="dismissed", note="a security sprint")
    assert settled["status"] == "dismissed"
    assert reviewer.flags_list(status="open").results == []
    with pytest.raises(NotFoundError):
        reviewer.flags_get(999_999)


def test_it_versions_the_rubric_and_decides_proposals(admin: Client, reviewer: Client):
    first = admin.rubric_create(criteria=CRITERIA, note="v1")
    assert admin.rubric_get()["version"] == first["version"]
    admin.trust_import(track_record("Lead", landed=True))
    admin.agents_create(name="Writer")
    override = admin.overrides_create(
        agent="Writer", agent_output="a", human_decision="b", decided_by="Lead"
    )
    proposal = admin.rubric_proposals_create(
        override=override["id"],
        action="add",
        criterion="tests",
        description="Every change comes with a test.",
        rationale="The override added the missing test.",
    )
    assert admin.rubric_proposals_get(proposal["id"])["status"] == "pending"
    assert [p["id"] for p in admin.rubric_proposals_iter(status="pending")] == [proposal["id"]]
    accepted = admin.rubric_proposals_accept(proposal["id"], note="agreed")
    assert accepted["status"] == "accepted"
    versions = admin.rubric_versions_list()
    assert len(versions) == 2
    newest = admin.rubric_versions_get(versions[-1]["version"])
    assert "tests" in [c["name"] for c in newest["criteria"]]
    second = admin.rubric_proposals_create(
        override=override["id"], action="remove", criterion="clarity"
    )
    assert admin.rubric_proposals_reject(second["id"], note="keep it")["status"] == "rejected"
    with pytest.raises(PermissionDeniedError):
        reviewer.rubric_proposals_accept(second["id"])
    admin.agents_create(name="Doubter")
    low = admin.overrides_create(
        agent="Writer", agent_output="a", human_decision="c", decided_by="Doubter"
    )
    with pytest.raises(PermissionDeniedError) as caught:
        admin.rubric_proposals_create(override=low["id"], action="add", criterion="speed")
    assert caught.value.code == "decision_maker_not_trusted"
    assert Dissent.objects.filter(imported=False).count() == 0  # Lead's record was imported
