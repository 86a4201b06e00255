"""POST /api/v1/context/: retrieval plus working-memory assembly (SPEC 6)."""

from __future__ import annotations

import pytest

from ledger.models import Event, Role
from memory.context.working_memory import TRUNCATION_KIND
from memory.episodic.services import MemoryDraft, memories_store
from memory.knowledge.services import DocumentFields, knowledge_document_create

pytestmark = pytest.mark.django_db

CONTEXT = "/api/v1/context/"
SYSTEM_PROMPT = "You are Clerk, the refund desk's assistant."
HANDBOOK = "\n\n".join(
    f"# Rule {i}\nRefund rule {i}: refunds of type {i} are paid within {i + 2} days."
    for i in range(1, 7)
)
QUESTION = {"role": "user", "content": "How fast are refunds paid?"}


@pytest.fixture
def clerk(tenant, make_agent):
    return make_agent(tenant, name="Clerk")


@pytest.fixture
def client(tenant, clerk, api_as, no_embedder):
    return api_as(tenant, role=Role.AGENT, agent=clerk)


def publish(tenant, title, body, **fields):
    return knowledge_document_create(
        tenant=tenant,
        fields=DocumentFields(title=title, body=body, **fields),
        actor="human:alice",
        publish=True,
    )


@pytest.fixture
def knowledge(tenant, clerk, no_embedder):
    memories = memories_store(
        agent=clerk,
        drafts=[
            MemoryDraft(content=f"Customer {i} was told refunds take {i} days.") for i in range(6)
        ],
        actor="Clerk",
    )
    handbook = publish(tenant, "Refund handbook", HANDBOOK)
    tone = publish(tenant, "Tone", "Be brief and kind.", kind="skill")
    publish(tenant, "Critique", "Find the flaw.", kind="skill", applies_to=("Critic",))
    return {"memories": memories, "handbook": handbook, "tone": tone}


def ask(client, **body):
    return client.post(CONTEXT, {"token_budget": 100_000, **body}, format="json")


def test_it_lays_out_the_context_in_the_spec_order(client, knowledge):
    response = ask(
        client,
        system_prompt=SYSTEM_PROMPT,
        turns=[{"role": "assistant", "content": "Hello!"}, QUESTION],
        tool_results=["order 17: refunded", {"order": 18, "status": "open"}],
    )

    assert response.status_code == 200, response.content
    body = response.json()
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert messages[1] == {"role": "system", "content": "Skill: Tone\n\nBe brief and kind."}
    assert messages[2]["content"].startswith("Retrieved memories, most relevant first:")
    assert messages[3]["content"].startswith("Knowledge base excerpts, most relevant first:")
    assert "Refund handbook > Rule" in messages[3]["content"]
    assert messages[4:6] == [{"role": "assistant", "content": "Hello!"}, QUESTION]
    assert messages[6:] == [
        {"role": "tool", "content": "order 17: refunded"},
        {"role": "tool", "content": '{"order": 18, "status": "open"}'},
    ]
    assert body["query"] == QUESTION["content"]
    assert body["agent"] == "Clerk"
    assert body["skills"] == [{"id": knowledge["tone"].pk, "title": "Tone"}]
    assert len(body["memories"]) == 5
    assert {m["source"] for m in body["memories"]} == {"agent_memory"}
    assert {m["id"] for m in body["memories"]} <= {m.pk for m in knowledge["memories"]}
    assert len(body["kb_chunks"]) == 5
    assert {c["document_id"] for c in body["kb_chunks"]} == {knowledge["handbook"].pk}
    assert body["truncations"] == []
    assert sum(body["section_tokens"].values()) == body["total_tokens"]
    assert body["budget_tokens"] == 100_000


def test_an_explicit_query_is_what_retrieval_searches_by(client, knowledge):
    body = ask(client, turns=[QUESTION], query="rule 3").json()

    assert body["query"] == "rule 3"
    assert "Rule 3" in body["messages"][2]["content"]


def test_without_a_query_or_a_user_turn_nothing_is_retrieved(client, knowledge):
    body = ask(client, system_prompt="s", turns=[{"role": "assistant", "content": "Hi"}]).json()

    assert body["query"] == ""
    assert (body["memories"], body["kb_chunks"]) == ([], [])
    assert body["section_tokens"]["memories"] == body["section_tokens"]["kb_chunks"] == 0


def test_a_named_skill_replaces_the_agents_skills(client, knowledge, tenant):
    critique = knowledge["tone"].__class__.objects.get(title="Critique")

    by_id = ask(client, skill=critique.pk, turns=[QUESTION]).json()
    by_title = ask(client, skill="Critique", turns=[QUESTION]).json()

    assert by_id["skills"] == by_title["skills"] == [{"id": critique.pk, "title": "Critique"}]
    assert by_id["messages"][0]["content"] == "Skill: Critique\n\nFind the flaw."


def test_a_skill_of_another_tenant_is_unknown_like_a_missing_one(
    client, knowledge, other_tenant, no_embedder
):
    foreign = publish(other_tenant, "Foreign", "Theirs.", kind="skill")

    answers = [ask(client, skill=reference).json() for reference in (foreign.pk, 10**9)]

    assert [a["error"]["code"] for a in answers] == ["unknown_skill", "unknown_skill"]
    assert answers[0]["error"]["message"].replace(str(foreign.pk), "N") == answers[1]["error"][
        "message"
    ].replace(str(10**9), "N")


def test_a_tight_budget_cuts_memories_then_chunks_and_logs_each_cut(client, knowledge, tenant):
    full = ask(client, system_prompt=SYSTEM_PROMPT, turns=[QUESTION]).json()
    total = full["total_tokens"]

    fewer_memories = ask(
        client, system_prompt=SYSTEM_PROMPT, turns=[QUESTION], token_budget=total - 1
    ).json()
    saved = fewer_memories["truncations"][0]["tokens_removed"]
    both = ask(
        client, system_prompt=SYSTEM_PROMPT, turns=[QUESTION], token_budget=total - saved - 1
    ).json()

    assert [t["step"] for t in fewer_memories["truncations"]] == ["memories_reduced"]
    assert (len(fewer_memories["memories"]), len(fewer_memories["kb_chunks"])) == (3, 5)
    assert fewer_memories["memories"] == full["memories"][:3]
    assert [t["step"] for t in both["truncations"]] == ["memories_reduced", "kb_chunks_reduced"]
    assert (len(both["memories"]), len(both["kb_chunks"])) == (3, 2)
    assert both["kb_chunks"] == full["kb_chunks"][:2]
    assert both["total_tokens"] <= total - saved - 1
    logged = Event.objects.filter(tenant=tenant, kind=TRUNCATION_KIND).order_by("seq")
    assert [e.payload["step"] for e in logged] == [
        "memories_reduced",
        "memories_reduced",
        "kb_chunks_reduced",
    ]
    assert all(e.actor == "Clerk" and e.payload["agent"] == "Clerk" for e in logged)
    assert logged.last().payload["tokens_removed"] == both["truncations"][1]["tokens_removed"]


def test_when_the_never_cut_parts_do_not_fit_the_answer_is_422_and_nothing_is_logged(
    client, knowledge, tenant
):
    events = Event.objects.filter(tenant=tenant).count()

    response = ask(client, system_prompt=SYSTEM_PROMPT * 20, turns=[QUESTION], token_budget=50)

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "context_budget_exceeded"
    assert not Event.objects.filter(tenant=tenant, kind=TRUNCATION_KIND).exists()
    assert Event.objects.filter(tenant=tenant).count() == events


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"token_budget": 0}, "invalid_budget"),
        ({"token_budget": -5}, "invalid_budget"),
        ({"token_budget": 10**9}, "invalid_budget"),
        ({"turns": [{"role": "user"}]}, "invalid_turn"),
        ({"turns": [{"role": "", "content": "x"}]}, "invalid_turn"),
        ({"turns": [{"role": "user", "content": 5}]}, "invalid_turn"),
        ({"turns": ["hello"]}, "invalid_turn"),
        ({"skill": True}, "invalid_skill"),
        ({"skill": 1.5}, "invalid_skill"),
        ({"skill": " "}, "invalid_skill"),
        ({"skill": -1}, "invalid_skill"),
        ({"tool_results": "not a list"}, "validation_error"),
        ({"token_budget": "many"}, "validation_error"),
    ],
)
def test_bad_input_is_refused_with_its_code_and_nothing_is_logged(client, tenant, body, code):
    events = Event.objects.filter(tenant=tenant).count()

    response = client.post(CONTEXT, {"token_budget": 1000, **body}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert Event.objects.filter(tenant=tenant).count() == events


def test_a_tenant_wide_key_must_name_the_agent(tenant, clerk, api_as, no_embedder):
    client = api_as(tenant, role=Role.AGENT)

    unnamed = client.post(CONTEXT, {"token_budget": 1000}, format="json")
    named = client.post(CONTEXT, {"token_budget": 1000, "agent": "Clerk"}, format="json")

    assert unnamed.status_code == 400
    assert unnamed.json()["error"]["details"] == {"agent": ["This field is required."]}
    assert named.status_code == 200
    assert named.json()["agent"] == "Clerk"


def test_the_ledger_and_another_agents_memories_are_seen_as_memory_search_sees_them(
    tenant, clerk, make_agent, api_as, no_embedder
):
    other = make_agent(tenant, name="Other")
    memories_store(agent=other, drafts=[MemoryDraft(content="refunds secret of Other")], actor="x")
    from ledger.services import event_append

    event_append(
        tenant=tenant,
        kind="judge.verdict",
        actor="Judge",
        payload={"text": "Refunds over $500 need a manager.", "secret": "refunds-token"},
    )
    client = api_as(tenant, role=Role.AGENT, agent=clerk)

    body = client.post(CONTEXT, {"token_budget": 5000, "turns": [QUESTION]}, format="json").json()

    memories = body["messages"][0]["content"]
    assert "[judge.verdict by Judge] Refunds over $500 need a manager." in memories
    assert "secret of Other" not in memories
    assert "refunds-token" not in memories
    assert [m["source"] for m in body["memories"]] == ["audit_log"]


def test_the_real_embedder_ranks_by_meaning(tenant, clerk, api_as):
    publish(tenant, "Shipping", "Parcels leave the warehouse every weekday at noon.")
    publish(tenant, "Refunds", "Money is returned to the original card within five days.")
    client = api_as(tenant, role=Role.AGENT, agent=clerk)

    body = client.post(
        CONTEXT,
        {
            "token_budget": 5000,
            "turns": [{"role": "user", "content": "When do I get my cash back?"}],
        },
        format="json",
    ).json()

    assert body["semantic"] is True
    assert body["kb_chunks"][0]["title"] == "Refunds"


def test_a_summary_that_would_not_shrink_is_skipped_and_the_cuts_still_fit(
    client, knowledge, tenant
):
    # 21 short turns: the one older than the recent 20, summarised under a heading, would be
    # longer than it is, so summarising it could only grow the context.
    turns = [{"role": "user", "content": f"ok {n}"} for n in range(20)] + [QUESTION]
    full = ask(client, system_prompt=SYSTEM_PROMPT, turns=turns).json()
    fewer_memories = ask(
        client, system_prompt=SYSTEM_PROMPT, turns=turns, token_budget=full["total_tokens"] - 1
    ).json()
    # The memory cut alone is one token short of this budget; the KB cut then makes it fit.
    budget = full["total_tokens"] - fewer_memories["truncations"][0]["tokens_removed"] - 1

    tight = ask(client, system_prompt=SYSTEM_PROMPT, turns=turns, token_budget=budget)

    assert full["truncations"] == []
    assert [t["step"] for t in fewer_memories["truncations"]] == ["memories_reduced"]
    assert tight.status_code == 200, tight.content
    body = tight.json()
    assert [t["step"] for t in body["truncations"]] == ["memories_reduced", "kb_chunks_reduced"]
    assert body["total_tokens"] <= budget
    assert [m for m in body["messages"] if m["role"] == "user"] == turns
    logged = Event.objects.filter(tenant=tenant, kind=TRUNCATION_KIND)
    assert logged.count() == 3
    assert all(e.payload["tokens_removed"] > 0 for e in logged)
    assert not logged.filter(payload__step="turns_summarised").exists()
