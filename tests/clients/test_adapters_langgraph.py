"""LangGraph's store contract, kept by AgentMemoryStore against the real service: graphs compiled
with it, its answers compared with LangGraph's own InMemoryStore on the same operations, and the
memories it leaves behind read from the database."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import pytest
from django.utils import timezone
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp
from langgraph.store.memory import InMemoryStore
from ledgered_memory import AsyncClient
from ledgered_memory.langgraph import AgentMemoryStore

from memory.models import Memory
from tests.clients.threads import run_async

MINUTE = timedelta(minutes=1)


@pytest.fixture
def store(tenant_keys, agent_key):
    with tenant_keys.client(agent_key) as client:
        yield AgentMemoryStore(client, index_fields=["text"])


def store_memories(**filters) -> list[Memory]:
    return list(Memory.objects.filter(metadata__has_key="langgraph", **filters).order_by("id"))


@dataclass
class Context:
    user_id: str


class State(TypedDict, total=False):
    facts: list[str]
    question: str
    recalled: Annotated[list[str], operator.add]


def remember(state: State, runtime: Runtime[Context]) -> State:
    namespace = ("users", runtime.context.user_id, "memories")
    for number, fact in enumerate(state.get("facts", [])):
        runtime.store.put(namespace, f"fact-{number}", {"text": fact})
    return {}


def recall(state: State, runtime: Runtime[Context]) -> State:
    namespace = ("users", runtime.context.user_id)
    hits = runtime.store.search(namespace, query=state["question"], limit=1)
    return {"recalled": [hit.value["text"] for hit in hits]}


def graph_with(store, nodes=(remember, recall)):
    builder = StateGraph(State, context_schema=Context)
    builder.add_node("remember", nodes[0])
    builder.add_node("recall", nodes[1])
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder.compile(store=store)


def test_a_graph_puts_memories_and_searches_them_semantically(store):
    graph = graph_with(store)
    facts = [
        "Alice is allergic to peanuts.",
        "Alice's team deploys on Tuesdays.",
        "Alice prefers answers in French.",
    ]

    graph.invoke({"facts": facts, "question": "x"}, context=Context(user_id="alice"))
    graph.invoke(
        {"facts": ["Bob is allergic to shellfish."], "question": "x"}, context=Context("bob")
    )
    answer = graph.invoke(
        {"question": "which language should replies be written in?"},
        context=Context(user_id="alice"),
    )

    assert answer["recalled"] == ["Alice prefers answers in French."]
    memories = store_memories()
    assert [m.content for m in memories] == [*facts, "Bob is allergic to shellfish."]
    assert {m.agent.name for m in memories} == {"Planner"}
    assert memories[0].metadata["langgraph"] == {
        "namespace": "users.alice.memories",
        "labels": {"0": "users", "1": "alice", "2": "memories"},
        "key": "fact-0",
        "value": {"text": "Alice is allergic to peanuts."},
        "indexed": True,
    }
    assert {m.memory_type for m in memories} == {"explicit"}
    assert {m.expires_at for m in memories} == {None}


async def remember_async(state: State, runtime: Runtime[Context]) -> State:
    namespace = ("users", runtime.context.user_id)
    for number, fact in enumerate(state.get("facts", [])):
        await runtime.store.aput(namespace, f"fact-{number}", {"text": fact})
    return {}


async def recall_async(state: State, runtime: Runtime[Context]) -> State:
    hits = await runtime.store.asearch(
        ("users", runtime.context.user_id), query=state["question"], limit=1
    )
    return {"recalled": [hit.value["text"] for hit in hits]}


def test_an_async_graph_uses_the_async_client(tenant_keys, agent_key):
    async def scenario():
        async with AsyncClient(base_url=tenant_keys.base_url, api_key=agent_key) as client:
            store = AgentMemoryStore(async_client=client, index_fields=["text"])

            graph = graph_with(store, (remember_async, recall_async))
            answer = await graph.ainvoke(
                {
                    "facts": ["Carol runs the billing service.", "Carol's laptop is a ThinkPad."],
                    "question": "who owns billing?",
                },
                context=Context(user_id="carol"),
            )
            item = await store.aget(("users", "carol"), "fact-1")
            await store.adelete(("users", "carol"), "fact-1")
            gone = await store.aget(("users", "carol"), "fact-1")
            return answer["recalled"], (item.value if item else None, gone)

    recalled, (value, gone) = run_async(scenario())

    assert recalled == ["Carol runs the billing service."]
    assert value == {"text": "Carol's laptop is a ThinkPad."}
    assert gone is None
    assert [m.content for m in store_memories()] == ["Carol runs the billing service."]


def test_a_put_on_an_existing_key_replaces_its_one_memory(store):
    store.put(("prefs",), "food", {"text": "Likes pizza", "spicy": False})
    first = store.get(("prefs",), "food")

    store.put(("prefs",), "food", {"text": "Likes sushi", "spicy": True})
    second = store.get(("prefs",), "food")

    memory = store_memories()
    assert len(memory) == 1
    assert memory[0].content == "Likes sushi"
    assert second.value == {"text": "Likes sushi", "spicy": True}
    assert (second.namespace, second.key) == (("prefs",), "food")
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert store.search(("prefs",), query="japanese food")[0].key == "food"


def test_delete_removes_the_memory_and_a_missing_key_is_none(store):
    store.put(("prefs",), "food", {"text": "Likes pizza"})

    store.delete(("prefs",), "food")
    store.delete(("prefs",), "never-stored")

    assert store.get(("prefs",), "food") is None
    assert store_memories() == []


# The same operations on LangGraph's InMemoryStore and on ours must answer the same.
ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("users", "alice", "prefs"), "color", {"text": "Alice likes red", "color": "red", "n": 1}),
    (("users", "alice", "prefs"), "size", {"text": "Alice wears M", "size": "M", "n": 5}),
    (("users", "alice", "notes"), "n1", {"text": "Standup at nine", "tags": ["a", "b"], "n": 3}),
    (("users", "bob", "prefs"), "color", {"text": "Bob likes red", "color": "red", "n": 2}),
    (("docs", "v1"), "readme", {"text": "Read me", "nested": {"kind": "doc", "level": 2}, "n": 4}),
    (("docs", "v2", "draft"), "readme", {"text": "Draft", "color": None, "n": 0}),
]
FILTERS = [
    None,
    {"color": "red"},
    {"color": {"$eq": "red"}},
    {"color": {"$ne": "red"}},
    {"n": {"$gt": 1}},
    {"n": {"$gte": 2, "$lt": 5}},
    {"n": 3, "tags": ["a", "b"]},
    {"tags": ["a"]},
    {"nested": {"kind": "doc"}},
    {"color": None},
]
PREFIXES = [(), ("users",), ("users", "alice"), ("users", "alice", "prefs"), ("docs",), ("nope",)]


@pytest.fixture
def both(store):
    reference = InMemoryStore()
    for namespace, key, value in ITEMS:
        reference.put(namespace, key, value)
    store.batch([PutOp(namespace, key, value) for namespace, key, value in ITEMS])
    return reference, store


@pytest.mark.parametrize("prefix", PREFIXES)
def test_filtered_search_finds_what_langgraphs_store_finds(both, prefix):
    reference, store = both
    for filter in FILTERS:
        expected = {(i.namespace, i.key) for i in reference.search(prefix, filter=filter)}
        found = store.search(prefix, filter=filter)
        assert {(i.namespace, i.key) for i in found} == expected, filter
        assert {i.score for i in found} <= {None}


def test_listing_namespaces_answers_what_langgraphs_store_answers(both):
    reference, store = both
    for options in [
        {},
        {"prefix": ("users",)},
        {"prefix": ("users", "*", "prefs")},
        {"suffix": ("prefs",)},
        {"suffix": ("*", "draft")},
        {"prefix": ("users",), "suffix": ("notes",)},
        {"max_depth": 1},
        {"prefix": ("users",), "max_depth": 2},
        {"limit": 2, "offset": 1},
        {"prefix": ("nope",)},
    ]:
        assert store.list_namespaces(**options) == reference.list_namespaces(**options), options


def test_gets_in_a_batch_see_the_puts_before_them(both):
    _, store = both
    ops = [
        GetOp(("users", "alice", "prefs"), "color"),
        PutOp(("users", "alice", "prefs"), "color", {"text": "Alice likes blue", "color": "blue"}),
        GetOp(("users", "alice", "prefs"), "color"),
        PutOp(("users", "alice", "prefs"), "color", None),
        GetOp(("users", "alice", "prefs"), "color"),
        GetOp(("users", "carol"), "color"),
    ]

    before, put, after, deleted, gone, never = store.batch(ops)

    assert before.value == ITEMS[0][2]
    assert put is None
    assert deleted is None
    assert after.value == {"text": "Alice likes blue", "color": "blue"}
    assert gone is None
    assert never is None


def test_semantic_search_keeps_to_the_prefix_the_filter_and_the_page(both):
    _, store = both

    alice = store.search(("users", "alice"), query="what colour does she like?")
    red = store.search((), query="who likes red?", filter={"color": "red"})
    above_one = store.search(("users",), query="who likes red?", filter={"n": {"$gt": 1}})
    second = store.search((), query="who likes red?", filter={"color": "red"}, offset=1)

    assert alice[0].key == "color"
    assert {i.namespace[:2] for i in alice} == {("users", "alice")}
    assert all(isinstance(i.score, float) for i in alice)
    assert alice == sorted(alice, key=lambda i: -i.score)
    assert {(i.namespace, i.key) for i in red} == {
        (("users", "alice", "prefs"), "color"),
        (("users", "bob", "prefs"), "color"),
    }
    assert all(i.value["n"] > 1 for i in above_one)
    assert [(i.namespace, i.key) for i in second] == [(i.namespace, i.key) for i in red[1:]]


def test_an_item_put_with_index_false_is_left_out_of_semantic_search(store):
    store.put(("notes",), "secret", {"text": "The vault code is 1234"}, index=False)
    store.put(("notes",), "plain", {"text": "The vault is in the basement"})
    store.put(("notes",), "other", {"title": "No text field here"})

    found = store.search(("notes",), query="vault code")
    listed = store.search(("notes",))

    assert [i.key for i in found] == ["plain"]
    assert {i.key for i in listed} == {"secret", "plain", "other"}
    other = Memory.objects.get(metadata__langgraph__key="other")
    assert other.content == '{"title": "No text field here"}'


def test_an_index_list_chooses_the_text_the_service_embeds(store):
    store.put(
        ("docs",),
        "d1",
        {"title": "Runbook", "sections": [{"body": "Restart the cache."}, {"body": "Page ops."}]},
        index=["title", "sections[*].body"],
    )

    assert store_memories()[0].content == "Runbook\nRestart the cache.\nPage ops."


def test_a_ttl_becomes_the_memorys_expiry_and_reads_move_it_late_in_its_life(store):
    store.put(("sessions",), "s1", {"text": "Draft reply"}, ttl=60)
    memory = store_memories()[0]
    assert memory.expires_at - timezone.now() == pytest.approx(timedelta(hours=1), abs=MINUTE)

    store.get(("sessions",), "s1")  # early in its life: no write
    memory.refresh_from_db()
    early = memory.expires_at

    Memory.objects.filter(pk=memory.pk).update(expires_at=timezone.now() + timedelta(minutes=10))
    store.get(("sessions",), "s1", refresh_ttl=False)
    unmoved = Memory.objects.get(pk=memory.pk).expires_at
    store.search(("sessions",), query="draft reply")
    moved = Memory.objects.get(pk=memory.pk).expires_at

    assert early == memory.expires_at
    assert unmoved - timezone.now() < timedelta(minutes=11)
    assert moved - timezone.now() == pytest.approx(timedelta(hours=1), abs=MINUTE)

    store.put(("sessions",), "s1", {"text": "Final reply"}, ttl=None)
    assert Memory.objects.get(pk=memory.pk).expires_at is None


def test_the_ttl_config_gives_puts_a_default_ttl(tenant_keys, agent_key):
    with tenant_keys.client(agent_key) as client:
        store = AgentMemoryStore(client, ttl={"default_ttl": 30, "refresh_on_read": False})
        store.put(("cache",), "k", {"v": 1})

    memory = store_memories()[0]
    assert memory.metadata["langgraph"]["ttl"] == 30
    assert memory.expires_at - timezone.now() == pytest.approx(timedelta(minutes=30), abs=MINUTE)


def test_an_expired_item_is_gone(store):
    store.put(("cache",), "k", {"text": "stale"}, ttl=5)
    Memory.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    assert store.get(("cache",), "k") is None
    assert store.search(("cache",)) == []
    assert store.list_namespaces() == []


def test_an_archived_item_is_still_found_by_key_and_a_put_revives_it(store):
    store.put(("prefs",), "food", {"text": "Likes pizza"})
    Memory.objects.update(archived_at=timezone.now())

    archived = store.get(("prefs",), "food")
    by_query = store.search(("prefs",), query="pizza")
    store.put(("prefs",), "food", {"text": "Likes pasta"})

    assert archived.value == {"text": "Likes pizza"}
    assert by_query == []
    [memory] = store_memories()
    assert (memory.content, memory.archived_at) == ("Likes pasta", None)
    assert store.search(("prefs",), query="pasta")[0].key == "food"


def test_an_archived_item_late_in_its_ttl_is_read_without_moving_it(store):
    # The API changes active memories only; reading must not fail on one the service archived.
    store.put(("cache",), "k", {"text": "warm"}, ttl=60)
    soon = timezone.now() + timedelta(minutes=10)
    Memory.objects.update(archived_at=timezone.now(), expires_at=soon)

    assert store.get(("cache",), "k").value == {"text": "warm"}
    assert [i.key for i in store.search(("cache",))] == ["k"]
    assert Memory.objects.get().expires_at == soon


def test_racing_puts_of_a_new_key_leave_one_memory_after_the_next_put(tenant_keys, agent_key):
    # Two writers that both found no memory for the key each stored one.
    with tenant_keys.client(agent_key) as client:
        for text in ("first", "second"):
            client.memories_create(
                content=text,
                metadata={
                    "langgraph": {
                        "namespace": "n",
                        "labels": {"0": "n"},
                        "key": "k",
                        "value": {"text": text},
                        "indexed": True,
                    }
                },
            )
        store = AgentMemoryStore(client)
        seen = store.get(("n",), "k")
        store.put(("n",), "k", {"text": "third"})

    assert seen.value == {"text": "second"}
    assert [m.content for m in store_memories()] == ['{"text": "third"}']


def test_a_tenant_key_names_the_agent(tenant_keys, agent_key, admin):
    store = AgentMemoryStore(admin, agent="Other")
    store.put(("prefs",), "food", {"text": "Likes pizza"})

    assert [m.agent.name for m in store_memories()] == ["Other"]
    assert store.get(("prefs",), "food").value == {"text": "Likes pizza"}
    assert store.search(("prefs",), query="pizza")[0].key == "food"


@pytest.mark.parametrize("namespace", [("a.b",), ("",), ("a", "x\x00y")])
def test_a_label_langgraph_forbids_is_refused_before_anything_is_written(store, namespace):
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("fine",), "k", {"v": 1}), PutOp(namespace, "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(namespace, "k")])

    assert store_memories() == []


def test_an_unknown_filter_operator_is_refused(store):
    with pytest.raises(ValueError, match=r"\$regex"):
        store.search(("a",), filter={"name": {"$regex": "x"}})
