"""The client against the real server: memories, search, the knowledge base, working memory,
recall and reflections, and the content store, as an agent-scoped key uses them."""

from __future__ import annotations

import pytest
from ledgered_memory import AsyncClient, BadRequestError, Client, NotFoundError, types

from memory.models import Memory
from tests.clients.threads import run_async


@pytest.fixture
def agent(tenant_keys, admin: Client) -> Client:
    """A client with an agent-scoped key of agent 'Planner' (and a second agent beside it)."""
    admin.agents_create(name="Planner")
    admin.agents_create(name="Other")
    key = admin.api_keys_create(name="planner", role="agent", agent="Planner")["key"]
    return tenant_keys.client(key)


def test_it_stores_reads_updates_and_deletes_memories(agent: Client):
    stored = agent.memories_create(
        content="The deploy window is Tuesday afternoon.", tags=["ops"], session_id="s1"
    )
    assert stored["agent"] == "Planner"
    assert agent.memories_get(stored["id"])["content"].startswith("The deploy window")
    updated = agent.memories_update(stored["id"], importance=0.9, tags=["ops", "deploy"])
    assert updated["tags"] == ["ops", "deploy"]
    history = agent.memories_history_list(stored["id"]).results
    assert [h["kind"] for h in history] == ["memory.stored", "memory.updated"]
    assert history[1]["before"]["tags"] == ["ops"]
    assert history[1]["after"]["tags"] == ["ops", "deploy"]
    agent.memories_delete(stored["id"], reason="the window moved")
    with pytest.raises(NotFoundError):
        agent.memories_get(stored["id"])
    assert not Memory.objects.filter(pk=stored["id"]).exists()
    every = list(agent.memories_history_iter(stored["id"], page_size=1))
    assert [h["kind"] for h in every] == ["memory.stored", "memory.updated", "memory.deleted"]
    assert every[-1]["reason"] == "the window moved"
    assert all(h["content_shredded"] for h in every)
    assert every[0]["after"]["content"] is None


def test_it_stores_a_batch_pages_through_it_and_searches(agent: Client):
    texts = [f"Fact {n}: the cache for service {n} is Redis." for n in range(5)]
    made = agent.memories_create_batch(
        memories=[{"content": text, "session_id": "s2"} for text in texts]
    )
    assert [m["content"] for m in made["memories"]] == texts
    page = agent.memories_list(session_id="s2", page_size=2)
    assert len(page.results) == 2
    assert page.next_cursor
    assert sorted(
        m["content"] for m in agent.memories_iter(session_id="s2", page_size=2)
    ) == sorted(texts)
    agent.memories_create(content="Our billing service runs on PostgreSQL 18.")
    found = agent.memories_search(query="which database does billing use?", top_k=3)
    assert found["results"][0]["content"] == "Our billing service runs on PostgreSQL 18."
    assert set(found["results"][0]["breakdown"]) >= {"similarity"}


def test_a_changed_fact_supersedes_the_old_one_through_the_client(agent: Client):
    eur = agent.memories_create(
        content="I prefer invoices in EUR.", occurred_at="2026-05-01T09:00:00Z"
    )
    gbp = agent.memories_create(
        content="Now I prefer GBP for invoices.",
        occurred_at="2026-06-01T09:00:00Z",
        supersedes=[eur["id"]],
    )
    assert gbp["supersedes"] == [eur["id"]]
    found = agent.memories_search(query="invoice currency", sources=["agent_memory"])
    assert [hit["content"] for hit in found["results"]] == ["Now I prefer GBP for invoices."]
    then = agent.memories_search(
        query="invoice currency", sources=["agent_memory"], as_of="2026-05-15T00:00:00Z"
    )
    assert [hit["content"] for hit in then["results"]] == ["I prefer invoices in EUR."]
    listed = agent.memories_list(include_superseded=True).results
    assert {m["id"]: m["superseded_by"] for m in listed} == {eur["id"]: gbp["id"], gbp["id"]: None}
    later = agent.memories_create(content="From July, invoices in USD.")
    moved = agent.memories_supersede(later["id"], supersedes=[gbp["id"]])
    assert moved["supersedes"] == [gbp["id"]]
    with pytest.raises(BadRequestError) as caught:
        agent.memories_supersede(later["id"], supersedes=[gbp["id"]])
    assert caught.value.code == "invalid_supersedes"


def test_it_filters_lists_and_searches_and_changes_memories_in_bulk(agent: Client):
    agent.memories_create_batch(
        memories=[
            {"content": f"Invoice {n} for acme.", "importance": n / 10,
             "metadata": {"customer": "acme", "n": n}}
            for n in range(6)
        ]
    )  # fmt: skip
    wanted: types.MemoryFilter = {"metadata": {"n": {"gte": 3}}, "importance": {"lt": 0.5}}

    listed = agent.memories_list(filter=wanted)
    found = agent.memories_search(query="invoice for acme", top_k=10, filters=wanted)
    dry = agent.memories_bulk_delete(filter={"metadata": {"n": {"in": [0, 1]}}}, dry_run=True)
    updated = agent.memories_bulk_update(filter=wanted, changes={"tags_add": ["late"]})
    deleted = agent.memories_bulk_delete(filter={"tags": "late"}, idempotency_key="late-1")

    late = ["Invoice 3 for acme.", "Invoice 4 for acme."]
    assert sorted(m["content"] for m in listed.results) == late
    assert sorted(hit["content"] for hit in found["results"]) == late
    assert (dry["matched"], dry["done"], len(dry["ids"])) == (2, 0, 2)
    assert updated["done"] == 2
    assert deleted["ids"] == updated["ids"]
    assert Memory.objects.count() == 4
    with pytest.raises(BadRequestError) as refused:
        agent.memories_bulk_delete(all=True)
    assert refused.value.code == "confirmation_required"


def test_it_refuses_bad_memories_with_the_servers_code(agent: Client):
    with pytest.raises(BadRequestError) as caught:
        agent.memories_create(content="   ")
    assert caught.value.status == 400
    assert caught.value.code in ("validation_error", "empty_content")
    with pytest.raises(BadRequestError) as too_many:
        agent.memories_search(query="x", top_k=10_000)
    assert too_many.value.status == 400
    assert Memory.objects.count() == 0


def test_it_manages_and_searches_the_knowledge_base(tenant_keys, agent: Client, admin: Client):
    reviewer = tenant_keys.client(tenant_keys.reviewer)
    doc = reviewer.kb_documents_create(
        title="Release checklist",
        body="Before a release, run the migrations check.\n\nThen tag the commit and deploy.",
        category="ops",
    )
    assert doc["published_at"] is None
    with pytest.raises(NotFoundError):  # agents read published documents only
        agent.kb_documents_get(doc["id"])
    published = reviewer.kb_documents_publish(doc["id"])
    assert published["published_at"]
    assert agent.kb_documents_get(doc["id"])["title"] == "Release checklist"
    assert agent.kb_documents_chunks_list(doc["id"])
    assert [d["id"] for d in agent.kb_documents_iter(category="ops")] == [doc["id"]]
    hits = agent.kb_search(query="what to do before a release", top_k=3)
    assert hits["results"][0]["document_id"] == doc["id"]
    reviewer.kb_documents_update(doc["id"], title="Release checklist v2")
    assert reviewer.kb_documents_unpublish(doc["id"])["published_at"] is None
    assert reviewer.kb_documents_list(published=False).results[0]["title"].endswith("v2")
    admin.kb_documents_delete(doc["id"])
    with pytest.raises(NotFoundError):
        admin.kb_documents_get(doc["id"])


def test_it_assembles_context_recalls_and_reflects(agent: Client):
    french = agent.memories_create(content="The customer prefers answers in French.")
    context = agent.context_assemble(
        token_budget=2000,
        system_prompt="You are a planner.",
        query="How should I answer the customer?",
        turns=[{"role": "user", "content": "Draft the reply."}],
    )
    assert context["total_tokens"] <= 2000
    assert french["id"] in [m["id"] for m in context["memories"] if m["source"] == "agent_memory"]
    agent.events_create(kind="agent.spoke", run_id="run-7", payload={"text": "Plan drafted."})
    agent.events_create(kind="agent.spoke", run_id="run-7", payload={"text": "Reply sent."})
    episodic = agent.recall(run_id="run-7", mode="episodic")
    assert episodic["agent"] == "Planner"
    assert len(episodic["items"]) == 2
    salience = agent.recall(run_id="run-7", mode="salience", query="reply")
    assert salience["mode"] == "salience"
    reflection = agent.reflections_create(run_id="run-7", force=True)
    assert reflection["created"] is True
    assert reflection["reflections_made"] == 1
    event = reflection["event"]
    assert event is not None
    assert "Plan drafted." in event["payload"]["summary"]


def test_it_stores_retrieves_queries_snapshots_and_clears_content(agent: Client):
    text = "\n".join(f"line {n}: status ok" for n in range(200)) + "\nline 200: ERROR disk full"
    item = agent.content_items_create(content=text, run_id="run-9", tags=["log"])
    assert item["size"] == len(text.encode())
    full = agent.content_items_get(item["id"])
    assert full["content"] == text
    errors = agent.content_items_get(item["id"], transform="filtered", match="ERROR")
    assert "disk full" in str(errors["content"])
    assert "status ok" not in str(errors["content"])
    tail = agent.content_items_get(item["id"], transform="last_n", n=1, unit="lines")
    assert "ERROR" in str(tail["content"])
    listed = agent.content_items_list(run_id="run-9", tags="log")
    assert [i["id"] for i in listed] == [item["id"]]
    answer = agent.content_action_results_create(
        run_id="run-9", action_type="shell", result={"stdout": text, "exit_code": 1}
    )
    assert answer["item"]["id"]
    savings = agent.content_runs_get("run-9")
    assert savings["action_results"] == 1
    snapshot = agent.content_snapshots_create(run_id="run-9", label="handover")
    assert agent.content_snapshots_get(snapshot["id"])["label"] == "handover"
    restored = agent.content_snapshots_restore(snapshot["id"], run_id="run-10")
    assert restored
    agent.content_items_clear(scope="run", run_id="run-9")
    with pytest.raises(NotFoundError):
        agent.content_items_get(item["id"])


def test_the_async_client_searches_and_pages_memories(tenant_keys, agent: Client):
    agent.memories_create_batch(memories=[{"content": f"note {n}"} for n in range(3)])
    key = agent._headers["Authorization"].removeprefix("Bearer ")

    async def scenario() -> tuple[int, int]:
        async with AsyncClient(base_url=tenant_keys.base_url, api_key=key) as api:
            found = await api.memories_search(query="note", top_k=5)
            contents = [m["content"] async for m in api.memories_iter(page_size=2)]
            return len(found["results"]), len(contents)

    assert run_async(scenario()) == (3, 3)


def test_a_search_retried_with_its_key_replays_the_first_answer(agent: Client):
    # The stored answer holds what the renderer sent (search hits carry datetimes in details).
    agent.memories_create(content="Backups run nightly at 02:00 UTC.")
    first = agent.memories_search(query="when do backups run?", idempotency_key="search-1")
    again = agent.memories_search(query="when do backups run?", idempotency_key="search-1")
    assert again == first


def test_a_peers_workflow_step_output_is_found_through_the_client(tenant_keys, admin, agent):
    other = tenant_keys.client(
        admin.api_keys_create(name="other", role="agent", agent="Other")["key"]
    )
    output = "Quarterly vendor audit finished: Initech passed with two findings."
    other.events_create(kind="workflow.step_completed", payload={"step": "audit", "output": output})

    found = agent.memories_search(query="Initech vendor audit findings", top_k=5)

    assert {"source": "workflow_steps", "content": output} in [
        {"source": hit["source"], "content": hit["content"]} for hit in found["results"]
    ]


def test_small_talk_is_stored_as_unimportant_and_an_instruction_as_important(agent: Client):
    greeting = agent.memories_create(content="hi, how are you?", role="user")
    instruction = agent.memories_create(
        content="Deploy version 2.3.1 to production now.", role="user"
    )

    assert greeting["importance"] < 0.3 <= 0.6 <= instruction["importance"]
