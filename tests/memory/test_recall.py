from __future__ import annotations

import math

import pytest

from ledger.models import Event, RecallSettings, Role
from ledger.services import EventDraft, events_append
from memory.embeddings.services import event_embeddings_build
from memory.models import EventEmbedding
from memory.recall.selectors import recall_episodic, recall_salience

pytestmark = pytest.mark.django_db

RUN = "run_20250214_153000"


@pytest.fixture
def cast(tenant, make_agent):
    return make_agent(tenant, name="Creator1"), make_agent(tenant, name="Reviewer1")


def play(tenant, *events: tuple[str, str, int, dict]) -> list[Event]:
    return events_append(
        tenant=tenant,
        drafts=[
            EventDraft(kind=kind, actor=actor, turn=turn, payload=payload, run_id=RUN)
            for kind, actor, turn, payload in events
        ],
    )


def test_episodic_recall_shows_own_and_public_events_but_not_peer_thoughts(tenant, cast):
    creator, _ = cast
    play(
        tenant,
        ("run.started", "system", 0, {"goal": "Find who took the key"}),
        ("agent.thought", "Reviewer1", 1, {"text": "I suspect the cook"}),
        ("agent.spoke", "Reviewer1", 2, {"text": "Where were you at noon?"}),
        ("agent.thought", "Creator1", 3, {"text": "The butler seems nervous"}),
        ("clue.found", "Reviewer1", 4, {"text": "a muddy boot"}),
    )

    result = recall_episodic(agent=creator, run_id=RUN)

    assert result.prompt.splitlines() == [
        "[turn 000][run.started] Find who took the key",
        "[turn 002][agent.spoke] Where were you at noon?",
        "[turn 003][agent.thought] The butler seems nervous",
    ]


def test_episodic_recall_keeps_only_the_most_recent_events(tenant, cast):
    creator, _ = cast
    play(tenant, *[("world.observed", "system", t, {"text": f"beat {t}"}) for t in range(12)])

    result = recall_episodic(agent=creator, run_id=RUN, max_recent=3)

    assert [item.text for item in result.items] == ["beat 9", "beat 10", "beat 11"]


def test_episodic_recall_of_an_empty_run_says_so(tenant, cast):
    assert recall_episodic(agent=cast[0], run_id="nothing").prompt == "(no prior memory)"


def test_salience_scores_each_term_as_specified(tenant, cast, no_embedder):
    creator, _ = cast
    play(
        tenant,
        ("world.observed", "system", 2, {"text": "the red key is missing"}),
        ("agent.spoke", "Creator1", 5, {"text": "nothing to report"}),
    )

    result = recall_salience(agent=creator, run_id=RUN, query="red key", current_turn=6)

    assert result.semantic is False
    assert "unavailable" in result.semantic_note
    observed, spoke = result.items
    # Jaccard({red, key}, {the, red, key, is, missing}) = 2 / 5
    assert observed.relevance == pytest.approx(0.4)
    assert observed.recency == pytest.approx(math.exp(-0.1 * 4), abs=1e-4)
    assert observed.importance == pytest.approx(0.7)
    assert observed.score == pytest.approx(0.3 * 0.4 + 0.4 * math.exp(-0.4) + 0.3 * 0.7, abs=1e-3)
    assert spoke.relevance == 0
    assert spoke.importance == pytest.approx(0.5)


def test_salience_returns_the_top_k_in_chronological_order(tenant, cast, no_embedder):
    creator, _ = cast
    play(
        tenant,
        ("judge.verdict", "system", 1, {"text": "the butler did it"}),
        *[("agent.spoke", "Creator1", t, {"text": f"filler {t}"}) for t in range(2, 30)],
    )

    result = recall_salience(agent=creator, run_id=RUN, query="The butler did it", top_k=3)

    assert len(result.items) == 3
    assert result.items[0].text == "the butler did it"
    assert [item.seq for item in result.items] == sorted(item.seq for item in result.items)


def test_salience_follows_the_tenants_weights(tenant, cast, no_embedder):
    creator, _ = cast
    RecallSettings.objects.create(
        tenant=tenant, weight_relevance=1.0, weight_recency=0.0, weight_importance=0.0
    )
    play(
        tenant,
        ("agent.spoke", "Creator1", 1, {"text": "apples and pears"}),
        ("verdict.final", "system", 9, {"text": "case closed"}),
    )

    result = recall_salience(agent=creator, run_id=RUN, query="apples", top_k=1)

    assert [item.text for item in result.items] == ["apples and pears"]


def test_salience_uses_the_semantic_index_when_it_is_there(tenant, cast, embedding_standin):
    creator, _ = cast
    events = play(
        tenant,
        ("world.observed", "system", 1, {"text": "the garden gate creaks"}),
        ("world.observed", "system", 2, {"text": "rain on the garden"}),
    )
    event_embeddings_build(event_ids=[e.pk for e in events])

    result = recall_salience(agent=creator, run_id=RUN, query="garden gate")

    assert result.semantic is True
    assert result.semantic_note == ""
    assert EventEmbedding.objects.filter(tenant=tenant).count() == 2
    assert result.items[0].relevance > result.items[1].relevance > 0


def test_salience_scores_events_missing_from_the_index_by_keywords(tenant, cast, embedding_standin):
    creator, _ = cast
    play(tenant, ("world.observed", "system", 1, {"text": "the garden gate creaks"}))

    result = recall_salience(agent=creator, run_id=RUN, query="garden gate")

    assert result.semantic is True
    assert "not in the semantic index yet" in result.semantic_note
    assert result.items[0].relevance == pytest.approx(2 / 4)


def test_recall_falls_back_to_keywords_when_the_embedder_fails(tenant, cast, embedding_standin):
    creator, _ = cast
    play(tenant, ("world.observed", "system", 1, {"text": "the garden gate creaks"}))
    embedding_standin.fail_with = 500

    result = recall_salience(agent=creator, run_id=RUN, query="garden gate")

    assert result.semantic is False
    assert result.items[0].relevance == pytest.approx(2 / 4)


def test_recall_never_shows_payload_keys_other_than_the_displayable_text(
    tenant, cast, api_as, no_embedder
):
    play(
        tenant,
        ("world.observed", "system", 1, {"text": "door opened", "api_key": "sk-SECRET-1"}),
        ("agent.spoke", "Creator1", 2, {"summary": "I opened it", "password": "hunter2"}),
        ("judge.verdict", "system", 3, {"seed": "SECRET-SEED", "goal": "judge fairly"}),
    )
    client = api_as(tenant, role=Role.AGENT)

    bodies = [
        client.post(
            "/api/v1/recall/",
            {"agent": "Creator1", "run_id": RUN, "mode": mode, "query": "door"},
            format="json",
        ).content.decode()
        for mode in ("episodic", "salience")
    ]

    for body in bodies:
        assert "door opened" in body
        for secret in ("sk-SECRET-1", "hunter2", "SECRET-SEED", "api_key", "password"):
            assert secret not in body


def test_the_recall_api_answers_lines_and_scored_items(tenant, cast, api_as, no_embedder):
    play(tenant, ("world.observed", "system", 4, {"text": "a muddy boot"}))
    client = api_as(tenant, role=Role.AGENT)

    body = client.post(
        "/api/v1/recall/",
        {"agent": "Creator1", "run_id": RUN, "mode": "salience", "query": "boot"},
        format="json",
    ).json()

    assert body["prompt"] == "[turn 004][world.observed] a muddy boot"
    assert body["semantic"] is False
    item = body["items"][0]
    assert set(item) >= {"score", "relevance", "recency", "importance"}


def test_an_agent_key_recalls_only_as_its_own_agent(tenant, cast, api_as):
    creator, _ = cast
    client = api_as(tenant, role=Role.AGENT, agent=creator)

    own = client.post("/api/v1/recall/", {"run_id": RUN}, format="json")
    other = client.post("/api/v1/recall/", {"agent": "Reviewer1", "run_id": RUN}, format="json")

    assert own.status_code == 200
    assert own.json()["agent"] == "Creator1"
    assert other.status_code == 404


def test_a_tenant_key_must_name_the_agent(tenant, cast, api_as):
    response = api_as(tenant).post("/api/v1/recall/", {"run_id": RUN}, format="json")

    assert response.status_code == 400
    assert "agent" in response.json()["error"]["details"]


def test_salience_matches_a_brute_force_ranking(tenant, cast, no_embedder):
    """The SQL prunes events that cannot reach the top K; it must rank exactly like scoring
    every visible event by the formula."""
    import random
    import re

    creator, _ = cast
    rng = random.Random(7)
    words = [
        "key",
        "butler",
        "garden",
        "knife",
        "letter",
        "alibi",
        "storm",
        "window",
        "cellar",
        "map",
    ]
    kinds = ["world.observed", "agent.spoke", "judge.verdict", "agent.thought", "clue.found"]
    rows = [
        (
            rng.choice(kinds),
            rng.choice(["Creator1", "system", "Reviewer1"]),
            turn,
            {"text": " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))},
        )
        for turn in range(300)
    ]
    play(tenant, *rows)
    query, current_turn, top_k = "garden key", 310, 10
    defaults = RecallSettings(tenant=tenant)
    visible = set(defaults.globally_visible_kinds)

    def tokens(text: str) -> set[str]:
        return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if w}

    expected = []
    for seq, (kind, actor, turn, payload) in enumerate(rows):
        if actor != "Creator1" and kind not in visible:
            continue
        shared = tokens(payload["text"]) & tokens(query)
        relevance = len(shared) / len(tokens(payload["text"]) | tokens(query))
        score = (
            0.3 * relevance
            + 0.4 * math.exp(-0.1 * (current_turn - turn))
            + 0.3 * defaults.kind_importance.get(kind, 0.5)
        )
        expected.append((round(score, 4), seq))
    best = sorted(expected, reverse=True)[:top_k]

    result = recall_salience(
        agent=creator, run_id=RUN, query=query, current_turn=current_turn, top_k=top_k
    )

    assert sorted((item.score or 0.0 for item in result.items), reverse=True) == [
        s for s, _ in best
    ]
