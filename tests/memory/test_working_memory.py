"""Working memory assembly within a token budget (SPEC 6).

Budgets are set from sizes measured with the same tokenizer, one token either side of where a cut
must (or must not) happen.
"""

from __future__ import annotations

import pytest

from config.api import ApiError
from ledger.models import Event
from ledger.projections import reserved_kinds
from memory.context.tokens import token_count
from memory.context.working_memory import (
    MESSAGE_OVERHEAD_TOKENS,
    SUMMARY_MAX_TOKENS,
    TRUNCATION_KIND,
    Skill,
    WorkingMemory,
    message_tokens,
    register_kinds,
    working_memory_assemble,
)

SYSTEM_PROMPT = "You are Archivist, a careful research agent. Answer only from the sources given."
SKILLS = [
    Skill(
        title="Citing sources",
        body="Cite every claim with the source's title and date. Never cite a source you were "
        "not given. When two sources disagree, say so and cite both.",
    ),
    Skill(title="Tone", body="Be brief and plain. Prefer lists for steps."),
]
MEMORIES = [
    f"Memory {i}: the {place} archive keeps its index cards in drawer {i}, sorted by accession "
    "number; the curator prefers requests by email before noon."
    for i, place in enumerate(["north", "south", "east", "west", "central"], start=1)
]
KB_CHUNKS = [
    f"Handbook section {i}. Boxes are labelled with the year, the collection code and a running "
    f"number; section {i} covers loans, copying fees and the reading room's opening hours."
    for i in range(1, 6)
]
HUGE_BUDGET = 1_000_000


def make_turns(count: int) -> list[dict[str, str]]:
    turns = []
    for i in range(count):
        if i % 2 == 0:
            content = f"Question {i} about the archive. Please give all the details we discussed."
            turns.append({"role": "user", "content": content})
        else:
            content = f"Answer {i} is in box {i}. It was filed last spring by the night shift."
            turns.append({"role": "assistant", "content": content})
    return turns


def expected_summary(turns: list[dict[str, str]]) -> dict[str, str]:
    lines = [f"Earlier conversation ({len(turns)} messages, first sentence of each):"]
    for turn in turns:
        first = turn["content"].split(". ")[0] + "."
        lines.append(f"- {turn['role']}: {first}")
    return {"role": "system", "content": "\n".join(lines)}


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Archivist")


@pytest.fixture
def assemble(agent):
    def call(**overrides) -> WorkingMemory:
        inputs = {
            "agent": agent,
            "budget_tokens": HUGE_BUDGET,
            "system_prompt": SYSTEM_PROMPT,
            "skills": SKILLS,
            "memories": MEMORIES,
            "kb_chunks": KB_CHUNKS,
            "turns": make_turns(30),
            "tool_results": ["search_archive: 3 boxes found (1998-A-12, 1998-A-13, 2001-C-2)."],
            "run_id": "run-7",
            "actor": "Archivist",
        }
        inputs.update(overrides)
        return working_memory_assemble(**inputs)

    return call


def truncation_events(tenant) -> list[Event]:
    return list(Event.objects.filter(tenant=tenant, kind=TRUNCATION_KIND).order_by("seq"))


@pytest.fixture
def sizes(assemble):
    """The context's total after each cut, measured by assembling the already-cut inputs whole."""
    turns = make_turns(30)
    full = assemble()
    summarised = assemble(turns=[expected_summary(turns[:10]), *turns[10:]])
    three_memories = assemble(memories=MEMORIES[:3])
    two_chunks = assemble(kb_chunks=KB_CHUNKS[:2])
    after_turns = summarised.total_tokens
    after_memories = after_turns - full.section_tokens["memories"]
    after_memories += three_memories.section_tokens["memories"]
    after_chunks = after_memories - full.section_tokens["kb_chunks"]
    after_chunks += two_chunks.section_tokens["kb_chunks"]
    return {
        "full": full.total_tokens,
        "turns_summarised": after_turns,
        "memories_reduced": after_memories,
        "kb_chunks_reduced": after_chunks,
        "never_cut": full.section_tokens["system_prompt"] + full.section_tokens["skills"],
    }


def test_it_counts_each_message_with_its_framing(assemble):
    result = assemble()

    assert message_tokens({"role": "user", "content": "Hello, world!"}) == (
        MESSAGE_OVERHEAD_TOKENS + 1 + 4
    )
    assert result.section_tokens["system_prompt"] == 3 + 1 + token_count(SYSTEM_PROMPT)
    assert result.section_tokens["turns"] == sum(
        3 + token_count(turn["role"]) + token_count(turn["content"]) for turn in make_turns(30)
    )
    assert result.total_tokens == sum(message_tokens(m) for m in result.messages)
    assert result.total_tokens == sum(result.section_tokens.values())


def test_it_fits_untouched_and_writes_no_event(tenant, assemble, sizes):
    result = assemble(budget_tokens=sizes["full"])

    assert result.truncations == []
    assert result.total_tokens == sizes["full"]
    assert truncation_events(tenant) == []


def test_it_orders_the_context_as_the_spec_says(assemble):
    turns = make_turns(4)

    messages = assemble(turns=turns).messages

    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert messages[1] == {
        "role": "system",
        "content": f"Skill: Citing sources\n\n{SKILLS[0].body}",
    }
    assert messages[2] == {"role": "system", "content": f"Skill: Tone\n\n{SKILLS[1].body}"}
    assert messages[3]["content"].startswith("Retrieved memories, most relevant first:")
    assert all(f"{i}. {text}" in messages[3]["content"] for i, text in enumerate(MEMORIES, 1))
    assert messages[4]["content"].startswith("Knowledge base excerpts, most relevant first:")
    assert all(f"{i}. {text}" in messages[4]["content"] for i, text in enumerate(KB_CHUNKS, 1))
    assert messages[5:9] == turns
    assert messages[9]["role"] == "tool"
    assert len(messages) == 10


@pytest.mark.parametrize(
    ("budget_from", "expected_steps"),
    [
        ("full", []),
        ("full-1", ["turns_summarised"]),
        ("turns_summarised", ["turns_summarised"]),
        ("turns_summarised-1", ["turns_summarised", "memories_reduced"]),
        ("memories_reduced", ["turns_summarised", "memories_reduced"]),
        ("memories_reduced-1", ["turns_summarised", "memories_reduced", "kb_chunks_reduced"]),
        ("kb_chunks_reduced", ["turns_summarised", "memories_reduced", "kb_chunks_reduced"]),
    ],
)
def test_it_cuts_in_order_only_as_far_as_needed(
    tenant, assemble, sizes, budget_from, expected_steps
):
    name, _, minus = budget_from.partition("-")
    budget = sizes[name] - int(minus or 0)

    result = assemble(budget_tokens=budget)

    assert [t.step for t in result.truncations] == expected_steps
    assert result.total_tokens <= budget
    expected_total = sizes[expected_steps[-1]] if expected_steps else sizes["full"]
    assert result.total_tokens == expected_total
    assert [e.payload["step"] for e in truncation_events(tenant)] == expected_steps


def test_each_cut_writes_one_event_with_its_numbers(tenant, agent, assemble, sizes):
    result = assemble(budget_tokens=sizes["kb_chunks_reduced"])

    events = truncation_events(tenant)
    assert [(e.actor, e.run_id, e.kind) for e in events] == [
        ("Archivist", "run-7", TRUNCATION_KIND)
    ] * 3
    payloads = [e.payload for e in events]
    assert [(p["tokens_before"], p["tokens_after"]) for p in payloads] == [
        (sizes["full"], sizes["turns_summarised"]),
        (sizes["turns_summarised"], sizes["memories_reduced"]),
        (sizes["memories_reduced"], sizes["kb_chunks_reduced"]),
    ]
    assert [p["sources"] for p in payloads] == [{"turns": 10}, {"memories": 2}, {"kb_chunks": 3}]
    assert [p["description"] for p in payloads] == [
        "10 conversation turns older than the most recent 20 summarised into one message",
        "memories 5 → 3",
        "KB chunks 5 → 2",
    ]
    for payload in payloads:
        assert payload["tokens_removed"] == payload["tokens_before"] - payload["tokens_after"] > 0
        assert payload["budget_tokens"] == sizes["kb_chunks_reduced"]
        assert payload["agent_id"] == agent.pk
    assert [t.as_payload() for t in result.truncations] == [
        {key: p[key] for key in t.as_payload()}
        for t, p in zip(result.truncations, payloads, strict=True)
    ]


def test_it_keeps_the_recent_turns_and_summarises_the_older_ones(assemble, sizes):
    turns = make_turns(30)

    result = assemble(budget_tokens=sizes["turns_summarised"])

    conversation = result.messages[5:-1]
    assert conversation == [expected_summary(turns[:10]), *turns[10:]]
    assert result.section_tokens["memories"] == assemble().section_tokens["memories"]


def test_it_caps_the_summary_of_a_long_conversation(assemble):
    turns = make_turns(320)
    budget = assemble(turns=turns[300:]).total_tokens + SUMMARY_MAX_TOKENS + 50

    result = assemble(turns=turns, budget_tokens=budget)

    summary = result.messages[5]
    assert summary["content"].startswith("Earlier conversation (300 messages")
    assert summary["content"].endswith("more not shown)")
    assert token_count(summary["content"]) <= SUMMARY_MAX_TOKENS + 10
    assert result.messages[6:-1] == turns[300:]
    assert [t.step for t in result.truncations] == ["turns_summarised"]


def test_it_skips_the_turn_summary_when_there_are_no_old_turns(tenant, assemble):
    turns = make_turns(20)
    full = assemble(turns=turns).total_tokens

    result = assemble(turns=turns, budget_tokens=full - 1)

    assert [t.step for t in result.truncations] == ["memories_reduced"]
    assert result.messages[5:-1] == turns
    assert [e.payload["step"] for e in truncation_events(tenant)] == ["memories_reduced"]


def test_it_never_cuts_the_system_prompt_or_skills(assemble, sizes):
    result = assemble(budget_tokens=sizes["kb_chunks_reduced"])

    assert result.messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert [m["content"] for m in result.messages[1:3]] == [
        f"Skill: {skill.title}\n\n{skill.body}" for skill in SKILLS
    ]
    assert (
        result.section_tokens["system_prompt"] + result.section_tokens["skills"]
        == (sizes["never_cut"])
    )


def test_it_refuses_when_every_cut_is_not_enough(tenant, assemble, sizes):
    budget = sizes["kb_chunks_reduced"] - 1

    with pytest.raises(ApiError) as caught:
        assemble(budget_tokens=budget)

    error = caught.value
    assert error.error_code == "context_budget_exceeded"
    assert error.status_code == 422
    message = str(error.detail)
    assert f"needs {sizes['kb_chunks_reduced']} tokens" in message
    assert f"budget of {budget}" in message
    assert f"system prompt and skills need {sizes['never_cut']} tokens" in message
    assert "memories 5 → 3; KB chunks 5 → 2" in message
    assert error.details["required_tokens"] == sizes["kb_chunks_reduced"]
    assert [t["step"] for t in error.details["truncations"]] == [
        "turns_summarised",
        "memories_reduced",
        "kb_chunks_reduced",
    ]
    assert truncation_events(tenant) == []


def test_it_refuses_when_the_system_prompt_and_skills_alone_overflow(tenant, assemble, sizes):
    budget = sizes["never_cut"] - 1

    with pytest.raises(ApiError) as caught:
        assemble(budget_tokens=budget)

    message = str(caught.value.detail)
    assert caught.value.error_code == "context_budget_exceeded"
    assert f"alone need {sizes['never_cut']} tokens" in message
    assert f"budget of {budget}" in message
    assert "nothing was cut" in message
    assert caught.value.details["truncations"] == []
    assert truncation_events(tenant) == []


def test_it_refuses_a_tool_result_that_overflows_after_every_cut(tenant, assemble, sizes):
    tool_result = "row " * 2000
    budget = sizes["kb_chunks_reduced"] + 100

    with pytest.raises(ApiError) as caught:
        assemble(budget_tokens=budget, tool_results=[tool_result])

    message = str(caught.value.detail)
    assert caught.value.error_code == "context_budget_exceeded"
    assert "tool results" in message
    assert caught.value.details["section_tokens"]["tool_results"] > 2000
    assert truncation_events(tenant) == []


def test_it_rejects_a_turn_without_role_or_content(assemble):
    with pytest.raises(ApiError) as caught:
        assemble(turns=[{"role": "user", "content": "hi"}, {"content": "no role"}])

    assert caught.value.error_code == "invalid_turn"
    assert caught.value.details == {"index": 1}


def test_it_rejects_a_budget_that_is_not_positive(assemble):
    with pytest.raises(ApiError) as caught:
        assemble(budget_tokens=0)

    assert caught.value.error_code == "invalid_budget"


def test_the_truncation_kind_is_reserved_for_the_service():
    register_kinds()

    assert TRUNCATION_KIND in reserved_kinds()
