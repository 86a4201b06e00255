"""The trust core's services: rounds, dissents, overrides, regret inference and scores."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from config.api import ApiError
from ledger.models import Event
from memory.embeddings.local_embedder import DIMENSIONS
from tests.standins import hashed_bag_of_words
from trust.governance.services import CriterionDraft, rubric_version_create
from trust.models import (
    ArtifactVersion,
    Dissent,
    DissentEmbedding,
    Override,
    Round,
    TrustScoreChange,
)
from trust.rounds.overrides import (
    override_log,
    override_revert,
    override_revert_withdraw,
    overrides_infer_regret,
)
from trust.rounds.services import (
    dissent_embeddings_backfill,
    dissent_log,
    dissent_set_impact,
    round_finalize,
    round_revise,
    rounds_post,
)
from trust.scores.services import trust_recompute

pytestmark = pytest.mark.django_db

FIFTY_WORDS = " ".join(["word"] * 50)


def trust_rows() -> tuple:
    return (
        Round.objects.count(),
        ArtifactVersion.objects.count(),
        Dissent.objects.count(),
        Override.objects.count(),
        TrustScoreChange.objects.count(),
        Event.objects.count(),
    )


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Creator1")


@pytest.fixture
def rubric(tenant):
    return rubric_version_create(
        tenant=tenant,
        criteria=[CriterionDraft("Accuracy"), CriterionDraft("Completeness")],
        actor="admin",
    )


# --- Rounds ------------------------------------------------------------------------------------


def test_posting_a_round_counts_each_participant_once(tenant, agent, make_agent, clock):
    other = make_agent(tenant, name="Reviewer1")

    rounds_post(tenant=tenant, round_id="r1", run_id="run", participants=["Creator1"], actor="o")
    events = Event.objects.count()
    rounds_post(
        tenant=tenant,
        round_id="r1",
        run_id="run",
        participants=["Creator1", "Reviewer1"],
        actor="o",
    )
    rounds_post(tenant=tenant, round_id="r1", participants=["Reviewer1"], actor="o")

    agent.refresh_from_db()
    other.refresh_from_db()
    assert (agent.rounds_participated, other.rounds_participated) == (1, 1)
    added = Event.objects.filter(kind="round.participants_added").order_by("seq")
    assert [e.payload["agents"] for e in added][1] == [{"id": other.pk, "name": "Reviewer1"}]
    assert Event.objects.count() == events + 1


def test_a_round_naming_unknown_agents_is_refused_and_writes_nothing(tenant, agent):
    before = trust_rows()

    with pytest.raises(ApiError) as refused:
        rounds_post(tenant=tenant, round_id="r1", participants=["Creator1", "Ghost"], actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (400, "unknown_agent")
    assert refused.value.details == {"unknown": ["Ghost"]}
    assert trust_rows() == before


def test_a_round_reposted_with_another_run_is_a_conflict(tenant, agent):
    rounds_post(tenant=tenant, round_id="r1", run_id="run-a", participants=[], actor="o")

    with pytest.raises(ApiError) as refused:
        rounds_post(tenant=tenant, round_id="r1", run_id="run-b", participants=[], actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (409, "round_run_mismatch")


def test_finalising_again_with_the_same_words_is_a_no_op(tenant, agent):
    round_ = rounds_post(tenant=tenant, round_id="r1", participants=["Creator1"], actor="o")
    round_finalize(round=round_, final_output="Use  REST.\n", actor="o")
    before = trust_rows()

    again = round_finalize(round=round_, final_output=" Use REST. ", actor="o")

    assert again.output_version == 1
    assert trust_rows() == before


def test_finalising_with_a_different_output_is_refused(tenant, agent):
    round_ = rounds_post(tenant=tenant, round_id="r1", participants=["Creator1"], actor="o")
    round_finalize(round=round_, final_output="Use REST.", actor="o")
    before = trust_rows()

    with pytest.raises(ApiError) as refused:
        round_finalize(round=round_, final_output="Use GraphQL.", actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (409, "round_already_finalized")
    assert trust_rows() == before
    round_.refresh_from_db()
    assert round_.output == "Use REST."


def test_a_version_before_the_final_output_is_refused(tenant, agent):
    round_ = rounds_post(tenant=tenant, round_id="r1", participants=[], actor="o")

    with pytest.raises(ApiError) as refused:
        round_revise(round=round_, content="v2", author="alice", actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (409, "round_not_finalized")


def test_a_newer_version_restoring_the_agents_output_reverts_the_override(tenant, agent, clock):
    round_ = rounds_post(tenant=tenant, round_id="r1", participants=["Creator1"], actor="o")
    override = override_log(
        agent=agent,
        agent_output="Use REST.",
        human_decision="Use GraphQL.",
        decided_by="alice",
        round_id="r1",
        actor="o",
        now=clock,
    )
    round_finalize(round=round_, final_output="Use GraphQL.", actor="o", now=clock)

    version = round_revise(
        round=round_, content="Use   REST.", author="bob", actor="o", now=clock + timedelta(hours=1)
    )

    override.refresh_from_db()
    assert version.number == 2
    assert (override.regret, override.reverted_by, override.revert_reason) == (
        True,
        "bob",
        "newer_version",
    )
    reverted = Event.objects.get(kind="override.reverted")
    assert reverted.payload["override_ids"] == [override.pk]
    assert TrustScoreChange.objects.filter(agent=agent).last().reason == "override_regret"


# --- Dissents ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [("   ", "empty_text"), ("x" * 20_001, "text_too_long")],
)
def test_a_dissent_with_bad_text_is_refused(agent, text, code, embedder_down):
    before = trust_rows()

    with pytest.raises(ApiError) as refused:
        dissent_log(agent=agent, text=text, actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (400, code)
    assert trust_rows() == before


def test_a_dissent_in_the_future_is_refused(agent, clock, embedder_down):
    with pytest.raises(ApiError) as refused:
        dissent_log(
            agent=agent, text="t", occurred_at=clock + timedelta(seconds=1), actor="o", now=clock
        )

    assert refused.value.error_code == "occurred_in_future"


def test_a_citation_outside_the_rubric_is_refused_naming_the_criteria(agent, rubric, embedder_down):
    before = trust_rows()

    with pytest.raises(ApiError) as refused:
        dissent_log(agent=agent, text="t", rubric_citations=["accuracy", "Style"], actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (
        400,
        "unknown_rubric_criterion",
    )
    assert refused.value.details["unknown"] == ["Style"]
    assert refused.value.details["valid"] == ["Accuracy", "Completeness"]
    assert trust_rows() == before


def test_citations_are_stored_as_the_rubric_spells_them_and_counted_once(
    agent, rubric, embedder_down
):
    dissent = dissent_log(
        agent=agent,
        text="short",
        rubric_citations=["ACCURACY", "accuracy", " Completeness "],
        actor="o",
    )

    assert dissent.rubric_citations == ["Accuracy", "Completeness"]
    assert dissent.citation_score == pytest.approx(0.4)
    assert dissent.rubric_version == rubric.number


def test_depth_adds_length_citations_and_novelty(agent, rubric, dissent_embedder):
    first = dissent_log(agent=agent, text=FIFTY_WORDS, rubric_citations=["Accuracy"], actor="o")
    same = dissent_log(agent=agent, text=FIFTY_WORDS, actor="o")
    new = dissent_log(agent=agent, text="entirely different complaint here", actor="o")

    # Known novelty first: a failure here says the stand-in embedder was not reached, not that
    # the arithmetic is wrong.
    assert [d.novelty_known for d in (first, same, new)] == [True, True, True]
    assert DissentEmbedding.objects.filter(agent=agent).count() == 3
    # The first has no previous dissent: novelty 0 (the design note's rule).
    assert (first.length_score, first.citation_score, first.novelty) == pytest.approx(
        (1.0, 0.2, 0.0)
    )
    assert first.depth_score == pytest.approx(1.2)
    assert same.novelty == pytest.approx(0.0, abs=1e-6)
    assert new.novelty == pytest.approx(1.0, abs=1e-6)  # no shared word: orthogonal vectors
    assert new.depth_score == pytest.approx(4 / 50 + 1.0)
    assert DissentEmbedding.objects.count() == 3


def _vector_at_cosine(to: list[float], cosine: float) -> list[float]:
    """A unit vector whose cosine with the unit vector ``to`` is ``cosine``."""
    free = next(i for i, value in enumerate(to) if value == 0.0)  # a bag of words is sparse
    side = [0.0] * len(to)
    side[free] = 1.0
    sine = math.sqrt(1.0 - cosine * cosine)
    return [cosine * a + sine * b for a, b in zip(to, side, strict=True)]


@pytest.mark.parametrize(
    ("cosine", "novelty", "depth"),
    [(-0.5, 1.5, 4 / 50 + 1.5), (-1.0, 2.0, 2.0)],
    ids=["novelty above 1", "total capped at 2"],
)
def test_novelty_is_1_minus_a_negative_cosine(agent, dissent_embedder, cosine, novelty, depth):
    text = "entirely different complaint here"
    earlier = dissent_log(agent=agent, text="an earlier objection", actor="o")
    opposed = _vector_at_cosine(hashed_bag_of_words(text, DIMENSIONS), cosine)
    DissentEmbedding.objects.filter(dissent_id=earlier.pk).update(embedding=opposed)

    dissent = dissent_log(agent=agent, text=text, actor="o")

    assert (earlier.novelty_known, dissent.novelty_known) == (True, True)
    assert dissent.novelty == pytest.approx(novelty, abs=1e-5)
    assert dissent.depth_score == pytest.approx(depth, abs=1e-5)
    logged = Event.objects.filter(kind="dissent.logged").order_by("-seq").first()
    assert logged is not None
    assert logged.payload["depth"]["novelty"] == dissent.novelty


@pytest.fixture
def starved_index():
    """An HNSW scan that gives up after one tuple and is always chosen: what a crowded graph of
    dead and other agents' vectors does to an agent's few rows."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET hnsw.max_scan_tuples = 1")
        cursor.execute("SET enable_sort = off")
        cursor.execute("SET enable_seqscan = off")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET hnsw.max_scan_tuples; RESET enable_sort; RESET enable_seqscan")


@pytest.mark.parametrize(("exact_max", "novelty"), [(1000, 1.5), (0, 0.0)], ids=["exact", "index"])
def test_an_agents_few_dissents_are_compared_exactly_however_the_index_is_crowded(
    tenant, agent, make_agent, dissent_embedder, starved_index, monkeypatch, exact_max, novelty
):
    from trust.rounds import selectors

    monkeypatch.setattr(selectors, "NOVELTY_EXACT_MAX_DISSENTS", exact_max)
    text = "entirely different complaint here"
    vector = hashed_bag_of_words(text, DIMENSIONS)
    # The crowd first: the graph's entry point, the one tuple the starved scan reads, is then
    # one of the crowd's, not (by a chance of about 2 %) the agent's earlier dissent.
    crowd = make_agent(tenant, name="Crowd")
    DissentEmbedding.objects.bulk_create(
        DissentEmbedding(
            tenant=tenant, dissent_id=10**9 + i, agent=crowd, embedding=vector, model="m"
        )
        for i in range(300)
    )
    earlier = dissent_log(agent=agent, text="an earlier objection", actor="o")
    DissentEmbedding.objects.filter(dissent_id=earlier.pk).update(
        embedding=_vector_at_cosine(vector, -0.5)
    )

    dissent = dissent_log(agent=agent, text=text, actor="o")

    # Exact: the agent's one earlier dissent is found. Through the starved index it is not,
    # which is what novelty 0 for a dissent unlike any before looked like.
    assert dissent.novelty == pytest.approx(novelty, abs=1e-5)


def test_a_dissent_logged_while_the_embedder_is_down_has_unknown_novelty_and_is_backfilled(
    agent, settings, embedder_down
):
    dissent = dissent_log(agent=agent, text="the plan ignores cost", actor="o")
    assert (dissent.novelty, dissent.novelty_known) == (0.0, False)
    assert dissent_embeddings_backfill(batch_size=10) == 0  # still down: nothing, no error

    from memory.embeddings.backends import embedder_reset
    from memory.embeddings.local_embedder import DIMENSIONS
    from tests.standins import openai_standin

    with openai_standin(dimensions=DIMENSIONS) as standin:
        settings.EMBEDDING_URL = standin.url
        settings.EMBEDDING_DIMENSIONS = DIMENSIONS
        embedder_reset()
        filled = dissent_embeddings_backfill(batch_size=10)
        again = dissent_embeddings_backfill(batch_size=10)

    dissent.refresh_from_db()
    assert (filled, again) == (1, 0)
    assert dissent.novelty_known is False  # depth is fixed at logging time


def test_impact_set_again_with_the_same_value_is_a_no_op(agent, embedder_down):
    dissent = dissent_log(agent=agent, text="t", actor="o")
    dissent_set_impact(dissent=dissent, impact=True, feedback_incorporated=True, actor="o")
    before = trust_rows()

    dissent_set_impact(dissent=dissent, impact=True, actor="o")

    assert trust_rows() == before


def test_impact_set_twice_with_different_values_is_refused(agent, embedder_down):
    dissent = dissent_log(agent=agent, text="t", actor="o")
    dissent_set_impact(dissent=dissent, impact=True, actor="o")
    before = trust_rows()

    with pytest.raises(ApiError) as refused:
        dissent_set_impact(dissent=dissent, impact=False, actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (409, "impact_already_set")
    assert trust_rows() == before
    dissent.refresh_from_db()
    assert dissent.impact is True


# --- Trust scores, computed by hand --------------------------------------------------------------


def test_a_dissent_without_judged_evidence_leaves_the_prior(agent, embedder_down):
    dissent_log(agent=agent, text=FIFTY_WORDS, actor="o")

    agent.refresh_from_db()
    assert agent.trust_score == 0.6
    assert not TrustScoreChange.objects.exists()


def test_scores_follow_the_spec_formula_blended_toward_the_prior(agent, clock, embedder_down):
    # Depth 1.0 (50 words, no citation, novelty unknown).
    dissent = dissent_log(agent=agent, text=FIFTY_WORDS, actor="o", now=clock)

    # raw = 0.4*1 + 0.3*(1.0/2) + 0.3*0.6 = 0.73; (5*0.6 + 1*0.73) / 6
    dissent_set_impact(dissent=dissent, impact=True, actor="o", now=clock)
    agent.refresh_from_db()
    assert agent.trust_score == pytest.approx(0.621667)

    # raw = 0.4 + 0.15 + 0.3*(1-0) = 0.85; (3 + 2*0.85) / 7
    override = override_log(
        agent=agent, agent_output="a", human_decision="b", decided_by="alice", actor="o", now=clock
    )
    agent.refresh_from_db()
    assert agent.trust_score == pytest.approx(0.671429)

    # raw = 0.4 + 0.15 + 0.3*(1-1) = 0.55; (3 + 2*0.55) / 7
    override_revert(override=override, reverted_by="alice", actor="o", now=clock)
    agent.refresh_from_db()
    assert agent.trust_score == pytest.approx(0.585714)

    history = list(TrustScoreChange.objects.filter(agent=agent).values_list("reason", "score"))
    assert history == [
        ("dissent_impact_true", pytest.approx(0.621667)),
        ("override_logged", pytest.approx(0.671429)),
        ("override_regret", pytest.approx(0.585714)),
    ]
    changed = Event.objects.filter(kind="trust.score_changed").order_by("seq").last()
    assert changed.payload["previous"] == pytest.approx(0.671429)
    assert changed.payload["components"]["regret_ratio"] == 1.0


def test_a_recompute_that_changes_nothing_writes_nothing(tenant, agent, clock, embedder_down):
    dissent = dissent_log(agent=agent, text=FIFTY_WORDS, actor="o", now=clock)
    dissent_set_impact(dissent=dissent, impact=False, actor="o", now=clock)
    before = trust_rows()

    changed = trust_recompute(tenant=tenant, reason="recomputed", now=clock)

    assert changed == 0
    assert trust_rows() == before


def test_reverting_a_reverted_override_is_refused(agent, clock):
    override = override_log(
        agent=agent, agent_output="a", human_decision="b", decided_by="alice", actor="o", now=clock
    )
    override_revert(override=override, reverted_by="alice", actor="o", now=clock)
    before = trust_rows()

    with pytest.raises(ApiError) as refused:
        override_revert(override=override, reverted_by="bob", actor="o", now=clock)

    assert (refused.value.status_code, refused.value.error_code) == (
        409,
        "override_already_reverted",
    )
    assert trust_rows() == before
    override.refresh_from_db()
    assert override.reverted_by == "alice"


def test_a_revert_keeps_its_note_on_the_row_and_in_the_event(agent, clock):
    override = override_log(
        agent=agent, agent_output="a", human_decision="b", decided_by="alice", actor="o", now=clock
    )

    override_revert(
        override=override, reverted_by="bob", note="  the customer asked for b  ", actor="o"
    )

    override.refresh_from_db()
    event = Event.objects.filter(kind="override.reverted").get()
    assert override.revert_note == "the customer asked for b"
    assert event.payload["note"] == "the customer asked for b"
    assert event.payload["override_ids"] == [override.pk]


def test_a_note_over_the_limit_is_refused_and_nothing_is_written(agent, clock):
    override = override_log(
        agent=agent, agent_output="a", human_decision="b", decided_by="alice", actor="o", now=clock
    )
    before = trust_rows()

    with pytest.raises(ApiError) as refused:
        override_revert(override=override, reverted_by="bob", note="x" * 2001, actor="o")

    assert (refused.value.status_code, refused.value.error_code) == (400, "note_too_long")
    assert trust_rows() == before


def test_withdrawing_a_revert_reopens_the_override_and_restores_the_score(agent, clock):
    override = override_log(
        agent=agent, agent_output="a", human_decision="b", decided_by="alice", actor="o", now=clock
    )
    agent.refresh_from_db()
    before_regret = agent.trust_score
    override_revert(override=override, reverted_by="bob", note="misread", actor="o", now=clock)
    agent.refresh_from_db()
    after_regret = agent.trust_score

    withdrawn = override_revert_withdraw(
        override=override, note="misclick", actor="bob", now=clock + timedelta(minutes=1)
    )

    agent.refresh_from_db()
    assert after_regret < before_regret
    assert agent.trust_score == before_regret
    assert (withdrawn.regret, withdrawn.reverted_at, withdrawn.revert_note) == (False, None, "")
    event = Event.objects.filter(kind="override.revert_withdrawn").get()
    assert event.actor == "bob"
    assert event.payload == {
        "override_id": override.pk,
        "agent_id": agent.pk,
        "withdrawn_by": "bob",
        "was_reverted_by": "bob",
        "was_reason": "marked",
        "note": "misclick",
        "at": (clock + timedelta(minutes=1)).isoformat(),
    }
    change = TrustScoreChange.objects.filter(agent=agent).order_by("-id").first()
    assert (change.reason, change.score) == ("override_revert_withdrawn", before_regret)
    # The change's event follows the withdrawal's in the chain: one append, one transaction.
    kinds = list(Event.objects.order_by("-seq").values_list("kind", flat=True)[:2])
    assert kinds == ["trust.score_changed", "override.revert_withdrawn"]


def test_withdrawing_what_is_not_reverted_is_refused(agent, clock):
    override = override_log(
        agent=agent, agent_output="a", human_decision="b", decided_by="alice", actor="o", now=clock
    )
    before = trust_rows()

    with pytest.raises(ApiError) as refused:
        override_revert_withdraw(override=override, actor="bob", now=clock)

    assert (refused.value.status_code, refused.value.error_code) == (409, "override_not_reverted")
    assert trust_rows() == before


def test_a_withdrawn_override_can_be_reverted_again(agent, clock):
    override = override_log(
        agent=agent, agent_output="a", human_decision="b", decided_by="alice", actor="o", now=clock
    )
    override_revert(override=override, reverted_by="bob", actor="o", now=clock)
    override_revert_withdraw(override=override, actor="bob", now=clock)

    again = override_revert(override=override, reverted_by="carol", note="now sure", actor="o")

    assert (again.regret, again.reverted_by, again.revert_note) == (True, "carol", "now sure")


# --- Regret inference ----------------------------------------------------------------------------


@pytest.fixture
def finalised_override(tenant, agent, clock):
    """An override of round r1 (deadline clock + 24 h) whose round ended with another output."""
    round_ = rounds_post(tenant=tenant, round_id="r1", participants=["Creator1"], actor="o")
    override = override_log(
        agent=agent,
        agent_output="Use REST.",
        human_decision="Use GraphQL.",
        decided_by="alice",
        round_id="r1",
        actor="o",
        now=clock,
    )
    round_finalize(round=round_, final_output="Use gRPC.", actor="o", now=clock)
    return override


@pytest.mark.parametrize(
    ("offset", "regret"),
    [(timedelta(microseconds=-1), False), (timedelta(0), False), (timedelta(microseconds=1), True)],
    ids=["just-before", "exactly-at", "just-after"],
)
def test_regret_is_inferred_only_strictly_after_the_deadline(
    tenant, finalised_override, offset, regret
):
    deadline = finalised_override.auto_check_deadline

    marked = overrides_infer_regret(tenant=tenant, now=deadline + offset)

    finalised_override.refresh_from_db()
    assert marked == int(regret)
    assert finalised_override.regret is regret
    assert finalised_override.reverted_by == ("system" if regret else "")


def test_inferring_twice_marks_once_and_logs_once(tenant, finalised_override):
    later = finalised_override.auto_check_deadline + timedelta(hours=1)

    first = overrides_infer_regret(now=later)
    state = trust_rows()
    second = overrides_infer_regret(now=later)

    assert (first, second) == (1, 0)
    assert trust_rows() == state
    event = Event.objects.get(kind="override.reverted")
    assert event.payload["override_ids"] == [finalised_override.pk]
    assert event.payload["reason"] == "inferred"


def test_an_override_the_final_output_kept_is_no_regret(tenant, agent, clock):
    round_ = rounds_post(tenant=tenant, round_id="r2", participants=[], actor="o")
    kept = override_log(
        agent=agent,
        agent_output="Use REST.",
        human_decision="Use GraphQL.",
        decided_by="alice",
        round_id="r2",
        actor="o",
        now=clock,
    )
    round_finalize(round=round_, final_output="Use  GraphQL.", actor="o", now=clock)

    marked = overrides_infer_regret(tenant=tenant, now=clock + timedelta(days=2))

    kept.refresh_from_db()
    assert marked == 0
    assert kept.regret is False


def test_finalising_after_the_deadline_infers_regret_for_that_round(tenant, agent, clock):
    round_ = rounds_post(tenant=tenant, round_id="r3", participants=[], actor="o")
    late = override_log(
        agent=agent,
        agent_output="a",
        human_decision="b",
        decided_by="alice",
        round_id="r3",
        actor="o",
        now=clock,
    )

    round_finalize(round=round_, final_output="c", actor="o", now=clock + timedelta(days=2))

    late.refresh_from_db()
    assert (late.regret, late.revert_reason) == (True, "inferred")


def test_inference_works_in_batches_with_one_event_per_batch(tenant, agent, clock):
    round_ = rounds_post(tenant=tenant, round_id="r4", participants=[], actor="o")
    for n in range(5):
        override_log(
            agent=agent,
            agent_output="a",
            human_decision=f"b{n}",
            decided_by="alice",
            round_id="r4",
            actor="o",
            now=clock,
        )
    round_finalize(round=round_, final_output="c", actor="o", now=clock)

    marked = overrides_infer_regret(tenant=tenant, now=clock + timedelta(days=2), batch_size=2)

    assert marked == 5
    batches = Event.objects.filter(kind="override.reverted").order_by("seq")
    assert [len(e.payload["override_ids"]) for e in batches] == [2, 2, 1]
    assert Override.objects.filter(regret=True).count() == 5
