"""Memory search (SPEC 5) against real PostgreSQL + pgvector and the real local embedder."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.models import Role
from ledger.services import event_append
from memory.episodic.lifecycle import memories_expire
from memory.episodic.services import MemoryDraft, memories_store, memory_delete, memory_update
from memory.models import Memory, MemorySearchTotals, MemoryTerm
from memory.search import plans as selectors
from memory.search.filters import MemoryFilter, filter_parse
from memory.search.legs import (
    filtered_nearest_sql,
    filtered_where,
    memory_candidates_query,
    semantic_share,
)
from memory.search.plans import SemanticPlan, hnsw_ef_search, nearest_rows_sql
from memory.search.ranking import AGENT_MEMORY, AUDIT_LOG, SOURCES, WORKFLOW_STEPS, SearchWeights
from memory.search.selectors import memories_search
from tests.memory.private_reflection import SECRET, SECRET_QUERY, private_reflection_made

pytestmark = pytest.mark.django_db

DAY = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Atlas")


@pytest.fixture
def other_agent(tenant, make_agent):
    return make_agent(tenant, name="Binky")


def store(agent, *contents, session="s1", start=DAY, **fields):
    return memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(
                content=content,
                session_id=session,
                occurred_at=start + timedelta(minutes=i),
                **fields,
            )
            for i, content in enumerate(contents)
        ],
        actor="system",
    )


def lexemes(memory: Memory) -> set[str]:
    memory.refresh_from_db()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT array(SELECT lexeme FROM unnest(search_vector)) FROM memory_memory "
            "WHERE id = %s",
            [memory.pk],
        )
        return set(cursor.fetchone()[0])


def stats_recounted(agent) -> tuple[dict[str, int], tuple[int, int]]:
    """BM25 statistics counted from scratch, to compare with what the triggers kept."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT u.lexeme, count(*) FROM memory_memory m, unnest(m.search_vector) u "
            "WHERE m.agent_id = %s GROUP BY 1",
            [agent.pk],
        )
        df = {lexeme: count for lexeme, count in cursor.fetchall()}
        cursor.execute(
            "SELECT count(*), coalesce(sum(search_length), 0) FROM memory_memory "
            "WHERE agent_id = %s AND search_vector IS NOT NULL",
            [agent.pk],
        )
        documents, positions = cursor.fetchone()
    return df, (documents, positions)


def stats_kept(agent) -> tuple[dict[str, int], tuple[int, int]]:
    df = {t.lexeme: t.df for t in MemoryTerm.objects.filter(agent=agent) if t.df}
    totals = MemorySearchTotals.objects.filter(agent=agent).first()
    return df, ((totals.documents, totals.positions) if totals else (0, 0))


# --- the keyword documents and their statistics ------------------------------------------------


def test_a_keyword_document_holds_two_neighbours_on_each_side_within_the_session(agent):
    first, _second, third, _fourth, fifth = store(
        agent, "alpha apples", "bravo bananas", "charlie cherries", "delta dates", "echo elderberry"
    )
    store(agent, "foxtrot figs", session="elsewhere")

    assert {"alpha", "bravo", "charli"} <= lexemes(first)
    assert "delta" not in lexemes(first)
    assert {"alpha", "bravo", "charli", "delta", "echo"} <= lexemes(third)
    assert "foxtrot" not in lexemes(fifth)
    assert "2023" in lexemes(first)  # the session date is part of the document


def test_the_window_follows_later_turns_edits_and_deletions(agent):
    first, second, third = store(agent, "alpha apples", "bravo bananas", "charlie cherries")
    (_fourth,) = store(agent, "delta dates", start=DAY + timedelta(minutes=3))

    assert "delta" in lexemes(second)  # the new turn reached the two before it
    assert "delta" not in lexemes(first)

    memory_update(memory=third, actor="system", changes={"content": "zulu zucchini"})
    assert "zulu" in lexemes(first)
    assert "charli" not in lexemes(first)

    memory_delete(memory=second, actor="system")
    assert "bravo" not in lexemes(first)
    assert "delta" in lexemes(first)


def documents_recomputed_differ(agent) -> list[int]:
    """Ids of the agent's memories whose stored document or length is not their window's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM ("
            " SELECT id, search_vector, search_length,"
            "  memory_search_document(tenant_id, agent_id, session_id, occurred_at, id,"
            "                         metadata, speaker, role, content) AS recomputed"
            " FROM memory_memory WHERE agent_id = %s) AS d"
            " WHERE search_vector IS DISTINCT FROM recomputed"
            "  OR search_length <> memory_search_length(recomputed)",
            [agent.pk],
        )
        return [row[0] for row in cursor.fetchall()]


def test_every_document_a_store_leaves_is_its_window(agent):
    store(agent, "alpha apples", "bravo bananas", "charlie cherries", "delta dates")
    store(agent, "kiwi in between", start=DAY + timedelta(seconds=90))  # between two turns
    store(agent, "before them all", start=DAY - timedelta(minutes=5))
    store(agent, "a batch", "of turns", "after the rest", start=DAY + timedelta(minutes=10))
    store(agent, "no session at all", session="")

    assert documents_recomputed_differ(agent) == []
    assert {"kiwi", "appl"} <= lexemes(Memory.objects.get(content="alpha apples"))


def test_a_memory_stored_alone_is_written_once(agent):
    store(agent, "an earlier note", session="")

    with CaptureQueriesContext(connection) as queries:
        (memory,) = store(agent, "a note without a session", session="")

    assert not [q["sql"] for q in queries if "UPDATE memory_memory" in q["sql"]]
    assert {"note", "session"} <= lexemes(memory)


def test_a_batch_rewrites_only_the_stored_turns_its_window_reaches(agent):
    """A batch's own turns are inserted with their windows complete; only the two stored turns
    before it get a new document (each rewrite enters the row in every index again)."""
    stored = store(agent, "alpha apples", "bravo bananas", "charlie cherries")
    later = DAY + timedelta(minutes=10)

    with CaptureQueriesContext(connection) as queries:
        batch = store(agent, "delta dates", "echo elders", "foxtrot figs", start=later)

    rewrites = [q["sql"] for q in queries if "UPDATE memory_memory" in q["sql"]]
    assert len(rewrites) == 1
    assert f"'{{{stored[1].pk},{stored[2].pk}}}'" in rewrites[0]  # ids = ANY('{2,3}')
    assert {"delta", "echo", "fig"} <= lexemes(batch[0])  # the batch-mates after it, at insert
    assert {"delta", "echo"} <= lexemes(stored[2])
    assert documents_recomputed_differ(agent) == []


def test_bm25_statistics_stay_exact_through_every_kind_of_write(agent, other_agent):
    stored = store(agent, *[f"note {i} about apples and pears {i % 3}" for i in range(8)])
    store(other_agent, "pears only here")
    memory_update(memory=stored[2], actor="system", changes={"content": "plums instead"})
    memory_delete(memory=stored[5], actor="system")
    Memory.objects.filter(pk=stored[7].pk).update(expires_at=timezone.now() - timedelta(days=1))
    memories_expire()

    assert stats_kept(agent) == stats_recounted(agent)
    assert stats_kept(other_agent) == stats_recounted(other_agent)
    assert stats_kept(agent)[1][0] == 6


# --- search ------------------------------------------------------------------------------------


def test_a_memory_is_found_as_soon_as_it_is_stored_with_every_term_explained(agent):
    store(agent, "The quarterly budget of $4,000 was approved by Dana.", "Lunch was pasta.")

    outcome = memories_search(agent=agent, query="Who approved the budget?")

    top = outcome.hits[0]
    assert outcome.semantic
    assert top.source == AGENT_MEMORY
    assert "budget" in top.content
    assert set(top.breakdown) >= {"similarity", "recency", "importance", "source_priority"}
    assert {"cosine", "keyword"} <= set(top.breakdown)
    assert math.isclose(top.score, sum(top.contributions.values()), abs_tol=1e-3)
    weights = SearchWeights.configured()
    assert math.isclose(
        top.contributions["similarity"],
        weights.similarity * top.breakdown["similarity"],
        abs_tol=1e-3,
    )


def test_semantic_evidence_finds_a_memory_without_shared_words(agent):
    store(agent, "My dog loves playing fetch in the park.", "The invoice is due Friday.")

    outcome = memories_search(agent=agent, query="Which pet is kept?", top_k=1)

    assert outcome.hits[0].content.startswith("My dog")
    assert outcome.hits[0].breakdown["keyword"] == 0


def test_expired_archived_and_foreign_memories_are_never_returned(
    agent, other_agent, tenant, other_tenant, make_agent
):
    expired, archived, kept = store(
        agent, "zebra crossing one", "zebra crossing two", "zebra crossing three"
    )
    Memory.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    Memory.objects.filter(pk=archived.pk).update(archived_at=timezone.now())
    store(other_agent, "zebra crossing of another agent")
    store(make_agent(other_tenant, name="Atlas"), "zebra crossing of another tenant")

    hits = memories_search(agent=agent, query="zebra crossing", top_k=50).hits

    assert [h.id for h in hits if h.source == AGENT_MEMORY] == [kept.pk]


def test_filters_narrow_to_tags_metadata_session_and_type(agent):
    store(agent, "deploy the api", tags=["ops"], metadata={"team": "red"})
    store(agent, "deploy the web app", tags=["ops", "web"], metadata={"team": "blue"})
    store(agent, "deploy the docs", session="s2")

    def found(filters):
        return {
            h.content
            for h in memories_search(agent=agent, query="deploy", top_k=10, filters=filters).hits
        }

    assert found(filter_parse({"tags": ["web"]})) == {"deploy the web app"}
    assert found(filter_parse({"metadata": {"team": "red"}})) == {"deploy the api"}
    assert found(filter_parse({"session_id": "s2"})) == {"deploy the docs"}


def test_filters_that_remove_most_rows_still_give_the_exact_top_k(agent):
    noise = [f"routine status update number {i}" for i in range(300)]
    store(agent, *noise, session="noise")
    rare = store(
        agent,
        *[f"status update {i} about the migration" for i in range(8)],
        session="rare",
        tags=["rare"],
    )

    hits = memories_search(
        agent=agent,
        query="status update",
        top_k=5,
        filters=filter_parse({"tags": ["rare"]}),
        weights=SearchWeights(1, 0, 0, 0),
    ).hits

    assert len(hits) == 5
    assert {h.id for h in hits} <= {m.pk for m in rare}


def test_the_index_is_asked_with_a_candidate_list_as_wide_as_the_filters_are_narrow():
    assert hnsw_ef_search(0.5) == 200  # half the rows pass: the floor
    assert hnsw_ef_search(0.16) == 250
    assert hnsw_ef_search(0.01) == 400  # the ceiling
    assert semantic_share(1000, 2000, filter_parse(None)) == 0.5
    assert semantic_share(1000, 2000, filter_parse({"tags": ["x"]})) == pytest.approx(0.05)
    # The table's row estimate can lag behind an agent that just grew.
    assert semantic_share(1000, 10, filter_parse(None)) == 1.0


@pytest.mark.parametrize(
    ("threshold", "query", "filters", "plan"),
    [
        # A small agent: its sign-bit sketches from the covering index, re-ranked exactly.
        (20_000, "status", filter_parse(None), SemanticPlan.SKETCH),
        # A small agent under a filter the covering index cannot answer: its rows, sorted.
        (20_000, "status", filter_parse({"tags": ["x"]}), SemanticPlan.SCAN),
        (0, "status", filter_parse(None), SemanticPlan.INDEX),  # a large one: the index
        (0, "status", filter_parse({"tags": ["x"]}), SemanticPlan.INDEX),
        (0, "status", filter_parse({"session_id": "s1"}), SemanticPlan.SCAN),  # one session
        # A query of stop words alone still counts the agent's memories.
        (0, "the of and", filter_parse(None), SemanticPlan.INDEX),
    ],
)
def test_the_semantic_leg_leaves_the_index_to_agents_with_many_memories(
    agent, monkeypatch, threshold, query, filters, plan
):
    store(agent, "status update", "another status")
    monkeypatch.setattr(selectors, "EXACT_SCAN_MAX_MEMORIES", threshold)

    sql, params = memory_candidates_query(
        agent=agent, query=query, vector=[1.0] + [0.0] * 383, filters=filters, now=timezone.now()
    )

    if plan is SemanticPlan.INDEX and filters.narrowing:  # exact when the filter keeps few
        assert (
            filtered_nearest_sql(filtered_where(filters), filtered_where(filters, opaque=True))
            in sql
        )
    else:
        assert nearest_rows_sql(filtered_where(filters), plan, limit="dense_k") in sql
    assert params["ef_search"] >= 200
    # The index walks about 1 / share rows per row returned under a tag filter: it asks for
    # fewer there.
    assert params["dense_k"] == (50 if plan is SemanticPlan.INDEX and filters.narrowing else 60)


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (filter_parse({"tags": ["flagged"]}), {"budget review, flagged"}),
        (filter_parse({"metadata": {"team": "red"}}), {"budget review, red team"}),
        (filter_parse({"memory_type": "fact"}), {"budget review, a fact"}),
        (filter_parse(None), {"budget review, flagged", "budget review, red team",
                           "budget review, a fact", "budget review, plain"}),
    ],
)  # fmt: skip
def test_the_keyword_leg_applies_every_filter_to_the_rows_it_matches(agent, filters, expected):
    """The keyword leg reads the agent's rows holding the query's words from the full-text
    index and checks the filters on those rows (not through the tag index): what it returns
    must still pass every filter, and archived memories never."""
    store(agent, "budget review, flagged", tags=["flagged"])
    store(agent, "budget review, red team", session="s2", metadata={"team": "red"})
    store(agent, "budget review, a fact", session="s3", memory_type="fact")
    store(agent, "budget review, plain", session="s4")
    (archived,) = store(agent, "budget review, archived", session="s5", tags=["flagged"])
    Memory.objects.filter(pk=archived.pk).update(archived_at=timezone.now())
    sql, params = memory_candidates_query(
        agent=agent, query="review", vector=None, filters=filters, now=timezone.now()
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = {row[0] for row in cursor.fetchall()}

    assert set(Memory.objects.filter(pk__in=found).values_list("content", flat=True)) == expected


def test_duplicates_by_content_collapse_to_the_best_scored_copy(agent, tenant):
    store(agent, "The release is frozen until Monday.", start=timezone.now(), importance=0.9)
    event_append(
        tenant=tenant,
        kind="note",
        actor="Atlas",
        payload={"text": "The release is frozen until Monday."},
    )

    hits = memories_search(agent=agent, query="release frozen", top_k=10).hits

    same = [h for h in hits if h.content == "The release is frozen until Monday."]
    assert len(same) == 1
    assert same[0].source == AGENT_MEMORY


def test_the_threshold_drops_candidates_with_weak_evidence(agent):
    store(agent, "Quantum chromodynamics lecture notes.", "Grocery list: milk and eggs.")

    strict = memories_search(agent=agent, query="milk", threshold=0.99, top_k=10).hits
    loose = memories_search(agent=agent, query="milk", threshold=-1.0, top_k=10).hits

    assert [h.content for h in strict] == ["Grocery list: milk and eggs."]  # the keyword match
    assert len(loose) == 2


def test_the_ledger_sources_hold_what_the_agent_may_see(agent, tenant):
    event_append(
        tenant=tenant, kind="note", actor="Atlas", payload={"text": "invoice sent to Globex"}
    )
    event_append(
        tenant=tenant, kind="note", actor="Binky", payload={"text": "invoice secret of Binky"}
    )
    event_append(
        tenant=tenant,
        kind="workflow.step_completed",
        actor="Atlas",
        payload={"text": "invoice step finished"},
    )

    hits = memories_search(agent=agent, query="invoice", top_k=10).hits

    by_source = {(h.source, h.content) for h in hits}
    assert (AUDIT_LOG, "invoice sent to Globex") in by_source
    assert (WORKFLOW_STEPS, "invoice step finished") in by_source
    assert not any("Binky" in content for _, content in by_source)


def test_without_an_embedder_keywords_alone_rank(agent, no_embedder):
    store(agent, "the sprint retro is on Thursday", "unrelated words here")

    outcome = memories_search(agent=agent, query="when is the retro?")

    assert not outcome.semantic
    assert [h.content for h in outcome.hits] == ["the sprint retro is on Thursday"]


@pytest.mark.parametrize("query", ["%_%", "' OR 1=1 --", "back\\slash", "a | b & !c", "(:*)"])
def test_queries_with_sql_or_tsquery_syntax_are_plain_text(agent, query):
    store(agent, f"literal {query} text", "the quarterly budget review moved to Friday")

    outcome = memories_search(agent=agent, query=query, top_k=5, sources=["agent_memory"])

    # Read as operators, the query would match every row (' OR 1=1) or fail to parse; read as
    # text it can only ever reach the memory that holds it, and the unrelated one never.
    contents = [h.content for h in outcome.hits]
    assert "the quarterly budget review moved to Friday" not in contents
    assert set(contents) <= {f"literal {query} text"}


# --- the API -----------------------------------------------------------------------------------


@pytest.fixture
def client(tenant, agent, api_as):
    return api_as(tenant, role=Role.AGENT, agent=agent)


def test_search_over_the_api(client, agent):
    store(agent, "Dana approved the $4,000 budget.")

    response = client.post(
        "/api/v1/memories/search/", {"query": "budget approval", "top_k": 3}, format="json"
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["results"][0]["content"] == "Dana approved the $4,000 budget."
    details = body["results"][0]["details"]
    assert details["session_id"] == "s1"
    assert details["updated_at"] == details["created_at"]
    assert body["semantic"] is True


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"query": "   "}, "empty_query"),
        ({"query": "x", "top_k": 0}, "invalid_top_k"),
        ({"query": "x", "top_k": 51}, "invalid_top_k"),
        ({"query": "x", "sources": ["agent_memory", "email"]}, "invalid_source"),
        ({"query": "x", "filters": {"tags": 5}}, "filter_invalid_value"),
        ({"query": "x", "filters": {"colour": "red"}}, "filter_unknown_field"),
        ({"query": "x", "filters": []}, "invalid_filters"),
        ({"query": "x", "weights": {"similarity": -1}}, "invalid_weights"),
        ({"query": "x", "weights": {"luck": 1}}, "invalid_weights"),
        ({"query": "x", "threshold": 2}, "invalid_threshold"),
        ({"query": "x", "embedding": [0.1] * 383}, "invalid_embedding"),
    ],
)
def test_bad_search_input_is_a_400_with_a_code(client, body, code):
    response = client.post("/api/v1/memories/search/", body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


def test_a_caller_may_send_the_query_vector_it_already_has(client, agent, monkeypatch):
    """The vector given ranks the semantic leg and the service embeds nothing: here it points
    at a memory sharing no word with the query text."""
    from memory.search import selectors as search

    direction = [0.0] * 384
    direction[7] = 1.0
    memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(content="the north star", embedding=direction),
            MemoryDraft(content="a southern cross", embedding=[0.0] * 7 + [-1.0] + [0.0] * 376),
        ],
        actor="system",
    )

    def no_embedding(text):
        raise AssertionError("the service embedded a query that came with its vector")

    monkeypatch.setattr(search, "embed_query", no_embedding)
    response = client.post(
        "/api/v1/memories/search/",
        {"query": "unrelated words", "embedding": direction, "top_k": 2, "threshold": 0.5},
        format="json",
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert [hit["content"] for hit in body["results"]] == ["the north star"]
    assert body["results"][0]["breakdown"]["cosine"] == pytest.approx(1.0)
    assert body["semantic"] is True


def test_an_agent_key_cannot_search_as_another_agent(client, other_agent):
    store(other_agent, "Binky's private plan")

    response = client.post(
        "/api/v1/memories/search/", {"agent": "Binky", "query": "plan"}, format="json"
    )

    assert response.status_code == 404


@pytest.mark.django_db(transaction=True)
def test_returned_memories_get_retrieval_statistics_from_the_worker_and_a_rebuild_keeps_them(
    tenant, agent, celery_worker
):
    from ledger.models import Event
    from ledger.projections import projection_rebuild
    from memory.episodic.projection import MemoryProjection

    found, _ = store(agent, "the vault code is 1234", "nothing to see", start=timezone.now())

    memories_search(agent=agent, query="vault code", top_k=1)

    deadline = time.monotonic() + 15
    while Memory.objects.get(pk=found.pk).retrieval_count == 0:
        assert time.monotonic() < deadline, "the worker did not record the retrieval"
        time.sleep(0.05)
    marked = Memory.objects.get(pk=found.pk)
    assert marked.last_retrieved_at is not None
    assert Event.objects.filter(tenant=tenant, kind="memory.retrieved").count() == 1
    Memory.objects.filter(pk=found.pk).update(retrieval_count=0, last_retrieved_at=None)

    projection_rebuild(projection=MemoryProjection(), tenant=tenant)

    rebuilt = Memory.objects.get(pk=found.pk)
    assert (rebuilt.retrieval_count, rebuilt.last_retrieved_at) == (1, marked.last_retrieved_at)


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_in_one_session_neither_deadlock_nor_skew_the_statistics(
    agent, other_agent
):
    from memory.episodic.lifecycle import memories_decay
    from tests.concurrency import run_concurrently

    seeded = store(agent, *[f"seed {i} shared words apples" for i in range(12)])

    def work(index: int) -> None:
        if index == 3:
            memories_decay(now=timezone.now() + timedelta(days=3650))
        elif index == 2:
            memory_delete(memory=Memory.objects.get(pk=seeded[4].pk), actor="system")
        else:
            for round_ in range(4):
                store(
                    agent,
                    f"writer {index} round {round_} shared words pears",
                    start=DAY + timedelta(minutes=5, seconds=index * 10 + round_),
                )

    run_concurrently(work, 4)

    assert stats_kept(agent) == stats_recounted(agent)
    assert Memory.objects.filter(agent=agent).count() == 12 - 1 + 8


@pytest.fixture
def private_reflection(agent):
    """Atlas's reflection over its private thoughts, which name a secret word; in the index."""
    return private_reflection_made(agent, thoughts=3)


@pytest.mark.parametrize("sources", [SOURCES, [AUDIT_LOG]], ids=["every source", "audit log"])
def test_a_private_reflection_is_found_by_no_other_agent(private_reflection, other_agent, sources):
    by_keyword = memories_search(
        agent=other_agent, query=SECRET_QUERY, sources=sources, top_k=50, threshold=-1
    )
    # The reflection's own vector as the query: the semantic leg's best possible match.
    by_meaning = memories_search(
        agent=other_agent,
        query="unrelated",
        sources=sources,
        top_k=50,
        threshold=-1,
        vector=list(private_reflection.embedding.embedding),
    )

    for outcome in (by_keyword, by_meaning):
        assert all(SECRET not in hit.content for hit in outcome.hits)
        assert all(hit.details.get("kind") != "agent.reflected" for hit in outcome.hits)


def test_its_own_agent_finds_its_private_reflection(private_reflection, agent):
    hits = memories_search(agent=agent, query=SECRET_QUERY, top_k=10).hits

    assert private_reflection.seq in {
        h.id for h in hits if h.details.get("kind") == "agent.reflected"
    }


def keyword_candidates(agent, query):
    """The agent-memory candidates of a query without a vector, as a search now would make
    them (with the time the query names)."""
    from memory.search.legs import memory_candidates
    from memory.search.temporal import query_time

    now = timezone.now()
    return memory_candidates(
        agent=agent,
        query=query,
        vector=None,
        filters=MemoryFilter(),
        now=now,
        when=query_time(query, now),
    )


def test_a_question_asking_when_marks_the_memories_that_name_a_time(agent):
    dated, plain = store(
        agent,
        "Caroline went to the LGBTQ support group yesterday.",
        "Caroline found the LGBTQ support group powerful.",
    )
    query = "When did Caroline go to the LGBTQ support group?"
    marks = {c.id: c.mentions_time for c in keyword_candidates(agent, query)}
    assert marks == {dated.pk: True, plain.pk: False}
    # A question that does not ask when marks nothing (and the SQL skips the pattern).
    other = "What did Caroline think of the LGBTQ support group?"
    assert not any(c.mentions_time for c in keyword_candidates(agent, other))


MARKED_TEXTS = [
    "I went to a support group yesterday",
    "We ran the race LAST SUNDAY",
    "I've known them for 4 years",
    "Back in August we moved",
    "a couple of weeks ago I started",
    "I love painting sunsets",
    "Maybe we may go",
    "Mondayish vibes",
    "Is that from 2022?",
    "Do you like it? [shares a photo of a dog]",
]


def test_the_kept_marks_follow_the_text_and_agree_with_python(agent):
    """``Memory.mentions_time`` is PostgreSQL's reading of the pattern the query parser reads in
    Python: both must say the same of every text, also after an edit."""
    from memory.search.legs import QUESTION_SQL_PATTERN
    from memory.search.temporal import TIME_EXPRESSION, TIME_EXPRESSION_SQL_PATTERN

    stored = store(agent, *MARKED_TEXTS)
    rows = Memory.objects.filter(pk__in=[m.pk for m in stored])
    assert {m.content: m.mentions_time for m in rows} == {
        text: bool(TIME_EXPRESSION.search(text)) for text in MARKED_TEXTS
    }
    assert [m.content for m in rows if m.asks_question] == [
        "Is that from 2022?",
        "Do you like it? [shares a photo of a dog]",
    ]

    edited = memory_update(
        memory=stored[5], actor="system", changes={"content": "Painted sunsets last week?"}
    )
    edited.refresh_from_db()
    assert (edited.mentions_time, edited.asks_question) == (True, True)

    # The migration wrote the patterns as they were then; the code's must still be the same.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proname, prosrc FROM pg_proc"
            " WHERE proname IN ('memory_mentions_time', 'memory_asks_question')"
        )
        sources = dict(cursor.fetchall())

    def quoted(pattern: str) -> str:
        return "'" + pattern.replace("'", "''") + "'"

    assert quoted(TIME_EXPRESSION_SQL_PATTERN) in sources["memory_mentions_time"]
    assert quoted(QUESTION_SQL_PATTERN) in sources["memory_asks_question"]


def test_memories_written_before_the_marks_were_kept_are_marked_by_their_text(agent):
    stored = store(agent, "We met the group yesterday", "Which group?", "The group was kind")
    # As the rows stood before migration memory.0025: no marks kept.
    Memory.objects.filter(pk__in=[m.pk for m in stored]).update(
        mentions_time=None, asks_question=None
    )
    candidates = keyword_candidates(agent, "When did we meet the group?")
    assert {c.id: (c.mentions_time, c.asks_question) for c in candidates} == {
        stored[0].pk: (True, False),
        stored[1].pk: (False, True),
        stored[2].pk: (False, False),
    }


def test_candidates_that_ask_a_question_are_marked(agent):
    texts = {
        "What pet do you have?": True,
        "Do you like it? [shares a photo of a dog on a sofa]": True,
        'She asked "Is the pet far?"': True,
        "He said \u201cIs that your pet?\u201d": True,
        "Why the pet? I wondered, then we got a dog.": False,
        "We got a pet [a dog?] last week.": False,
    }
    stored = store(agent, *texts)
    marks = {c.id: c.asks_question for c in keyword_candidates(agent, "pet dog")}
    assert marks == {memory.pk: asks for memory, asks in zip(stored, texts.values(), strict=True)}


def test_candidates_count_the_query_words_of_their_own_line_apart_from_the_window(agent):
    from memory.search.legs import memory_candidates

    before, saying, after = store(
        agent,
        "We went hiking on Saturday.",
        "The zebra at the zoo ate an apple, then another apple.",
        "Sounds like a fun day out.",
    )
    (elsewhere,) = store(agent, "An apple pie for dessert.", session="s2")
    now = timezone.now()
    found = {
        c.id: c
        for c in memory_candidates(
            agent=agent, query="zebra apple", vector=None, filters=MemoryFilter(), now=now
        )
    }
    # Per query lexeme ("appl", "zebra": the query's tsvector order), own line then window.
    counts = {pk: (c.keyword_terms.own, c.keyword_terms.window) for pk, c in found.items()}
    assert counts == {
        before.pk: ((0, 0), (2, 1)),
        saying.pk: ((2, 1), (2, 1)),
        after.pk: ((0, 0), (2, 1)),
        elsewhere.pk: ((1, 0), (1, 0)),
    }
    assert {pk: c.own_match for pk, c in found.items()} == {
        before.pk: False,
        saying.pk: True,
        after.pk: False,
        elsewhere.pk: True,
    }
    # The configured weight made the score: the turn that says the words scores highest.
    assert max(found.values(), key=lambda c: c.keyword).id == saying.pk


def test_lexeme_counts_are_read_from_postgresqls_text_of_a_tsvector():
    from memory.search.legs import tsvector_counts

    lexemes = ["it's", "a\\b", "two words", "x:y", "plain"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setweight(array_to_tsvector(%s::text[]), 'A')::text,"
            " to_tsvector('english', 'apple pie, apple tart, apple')::text",
            [lexemes],
        )
        unpositioned, positioned = cursor.fetchone()
    assert tsvector_counts(unpositioned) == dict.fromkeys(lexemes, 1)
    assert tsvector_counts(positioned) == {"appl": 3, "pie": 1, "tart": 1}
    assert tsvector_counts(None) == tsvector_counts("") == {}


def test_the_time_boost_ranks_the_dated_memory_first_for_a_when_question(agent, settings):
    dated, plain = store(
        agent,
        "We ran the charity race last Sunday, it was for mental health.",
        "The charity race for mental health was great, we ran it together.",
    )
    query = "When did they run the charity race for mental health?"
    settings.SEARCH_TIME_BOOST = 0.5
    hits = memories_search(agent=agent, query=query, record_retrieval=False).hits
    assert [h.id for h in hits][:2] == [dated.pk, plain.pk]


def test_feedback_is_each_candidates_mean_cosine_to_the_best_memories(agent, tenant, make_agent):
    from memory.search.legs import memory_feedback

    def axis(*weights):
        vector = [0.0] * 384
        for i, w in enumerate(weights):
            vector[i] = w
        return vector

    a, b, c = memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(content="alpha", embedding=axis(1.0)),
            MemoryDraft(content="beta", embedding=axis(0.0, 1.0)),
            MemoryDraft(content="gamma", embedding=axis(1.0, 1.0)),
        ],
        actor="system",
    )
    stranger = make_agent(tenant, name="Stranger")
    (foreign,) = memories_store(
        agent=stranger, drafts=[MemoryDraft(content="x", embedding=axis(1.0))], actor="system"
    )
    similar = memory_feedback(agent)([a.pk, b.pk], [a.pk, b.pk, c.pk, foreign.pk])
    assert similar.keys() == {a.pk, b.pk, c.pk}  # another agent's memory is never read
    assert similar[a.pk] == pytest.approx(0.5)
    assert similar[b.pk] == pytest.approx(0.5)
    assert similar[c.pk] == pytest.approx(math.sqrt(0.5))
    # Another agent's memory is no feedback either.
    assert memory_feedback(agent)([foreign.pk], [a.pk]) == {}
