from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

import pytest

from config.api import ApiError
from ledger.models import Event
from tests.trust.governance_rows import agent_with
from trust.governance.services import MAX_SEED, devils_advocate_choose, devils_advocate_pick

pytestmark = pytest.mark.django_db

# Chi-square critical values at p = 0.001, by degrees of freedom (any statistics table).
CHI_SQUARE_CRITICAL_0_001 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467}


@pytest.fixture
def team(tenant, make_agent):
    """Four agents out of probation with distinct trust."""
    return {
        name: agent_with(make_agent(tenant, name=name), trust=trust)
        for name, trust in [("A", 0.9), ("B", 0.6), ("C", 0.3), ("D", 0.25)]
    }


def pick(tenant, candidates, seed=None, **kwargs):
    return devils_advocate_pick(
        tenant=tenant, candidates=candidates, seed=seed, actor="orchestrator", **kwargs
    )


def test_selection_frequencies_follow_the_trust_weights():
    names, weights = ["A", "B", "C", "D"], [0.9, 0.6, 0.3, 0.25]
    draws = 20_000

    counts = Counter(devils_advocate_choose(names, weights, seed) for seed in range(draws))

    expected = {name: draws * w / sum(weights) for name, w in zip(names, weights, strict=True)}
    chi_square = sum((counts[name] - expected[name]) ** 2 / expected[name] for name in names)
    assert chi_square < CHI_SQUARE_CRITICAL_0_001[len(names) - 1], (counts, expected)


def test_the_service_draws_exactly_what_the_pure_draw_gives(tenant, team):
    for seed in range(25):
        result = pick(tenant, ["A", "B", "C", "D"], seed)

        assert result.picked.name == devils_advocate_choose(result.eligible, result.weights, seed)


def test_it_weights_eligible_candidates_by_trust(tenant, team):
    result = pick(tenant, ["D", "A", "B"], seed=7)

    assert result.eligible == ["D", "A", "B"]
    assert result.weights == [0.25, 0.9, 0.6]
    assert result.fallback is False


def test_the_same_seed_gives_the_same_pick(tenant, team):
    picks = {pick(tenant, ["A", "B", "C", "D"], seed=12345).picked.name for _ in range(5)}

    assert len(picks) == 1


def test_without_a_seed_one_is_drawn_and_reported_so_the_pick_replays(tenant, team):
    first = pick(tenant, ["A", "B", "C", "D"])

    again = pick(tenant, ["A", "B", "C", "D"], seed=first.seed)

    assert 0 <= first.seed <= MAX_SEED
    assert again.picked == first.picked


def test_low_trust_and_probation_are_not_eligible(tenant, team, make_agent):
    agent_with(make_agent(tenant, name="Low"), trust=0.2)  # at the floor: not above it
    agent_with(make_agent(tenant, name="New"), trust=0.95, rounds=4)
    on_probation = agent_with(make_agent(tenant, name="Held"), trust=0.95)
    on_probation.probation_until = on_probation.created_at + timedelta(days=30)
    on_probation.save(update_fields=["probation_until"])

    result = pick(tenant, ["Low", "New", "Held", "B"], seed=1, now=on_probation.created_at)

    assert result.eligible == ["B"]
    assert result.picked.name == "B"


def test_probation_ends_when_its_date_has_passed(tenant, make_agent):
    agent = agent_with(make_agent(tenant, name="Back"), trust=0.5)
    agent.probation_until = agent.created_at + timedelta(days=1)
    agent.save(update_fields=["probation_until"])

    result = pick(tenant, ["Back"], seed=1, now=agent.created_at + timedelta(days=2))

    assert result.eligible == ["Back"]
    assert result.fallback is False


def test_when_nobody_is_eligible_all_candidates_are(tenant, make_agent):
    agent_with(make_agent(tenant, name="Low"), trust=0.1)
    agent_with(make_agent(tenant, name="New"), trust=0.6, rounds=0)

    result = pick(tenant, ["Low", "New"], seed=3)

    assert result.fallback is True
    assert result.eligible == ["Low", "New"]
    assert result.weights == [0.1, 0.6]


def test_all_zero_weights_draw_uniformly(tenant, make_agent):
    for name in ("Z1", "Z2"):
        agent_with(make_agent(tenant, name=name), trust=0.0)

    picked = Counter(pick(tenant, ["Z1", "Z2"], seed=seed).picked.name for seed in range(40))

    assert set(picked) == {"Z1", "Z2"}
    assert devils_advocate_choose(["Z1", "Z2"], [0.0, 0.0], 5) == random.Random(5).choice(
        ["Z1", "Z2"]
    )


def test_the_pick_is_logged_with_weights_and_seed(tenant, team):
    result = pick(tenant, ["A", "C"], seed=99)

    event = Event.objects.get(tenant=tenant, seq=result.event_seq)
    assert event.kind == "trust.devils_advocate_picked"
    assert event.actor == "orchestrator"
    assert {k: v for k, v in event.payload.items() if k != "at"} == {
        "candidates": ["A", "C"],
        "eligible": ["A", "C"],
        "weights": [0.9, 0.3],
        "seed": 99,
        "picked": result.picked.name,
        "picked_id": result.picked.pk,
        "fallback": False,
    }


def test_the_largest_seed_is_accepted(tenant, team):
    assert pick(tenant, ["A"], seed=MAX_SEED).seed == MAX_SEED


@pytest.mark.parametrize(
    ("candidates", "seed", "code"),
    [
        ([], 1, "no_candidates"),
        (["A", "B", "A"], 1, "duplicate_candidate"),
        (["A", "Nobody", "Ghost"], 1, "unknown_agent"),
        (["A"], -1, "invalid_seed"),
        (["A"], True, "invalid_seed"),
        (["A"], False, "invalid_seed"),
        (["A"], 1.5, "invalid_seed"),
        (["A"], 2.0, "invalid_seed"),
        (["A"], "3", "invalid_seed"),
        (["A"], MAX_SEED + 1, "invalid_seed"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_logged(tenant, team, candidates, seed, code):
    before = Event.objects.filter(tenant=tenant).count()

    with pytest.raises(ApiError) as raised:
        pick(tenant, candidates, seed)

    assert (raised.value.status_code, raised.value.error_code) == (400, code)
    assert Event.objects.filter(tenant=tenant).count() == before


def test_unknown_agents_are_listed(tenant, team):
    with pytest.raises(ApiError) as raised:
        pick(tenant, ["A", "Nobody", "Ghost"], 1)

    assert raised.value.details == {"unknown": ["Nobody", "Ghost"]}


def test_another_tenants_agent_is_unknown(tenant, other_tenant, team, make_agent):
    make_agent(other_tenant, name="Outsider")

    with pytest.raises(ApiError) as raised:
        pick(tenant, ["A", "Outsider"], 1)

    assert raised.value.error_code == "unknown_agent"
