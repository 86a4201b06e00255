"""LangChain's retriever and chat message history over the real service, used the way LangChain
uses them: in chains with a fake chat model, under RunnableWithMessageHistory."""

from __future__ import annotations

import warnings

import pytest
from django.utils import timezone
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnablePassthrough
from langchain_core.runnables.history import RunnableWithMessageHistory
from ledgered_memory import AsyncClient
from ledgered_memory.langchain import AgentMemoryChatMessageHistory, AgentMemoryRetriever

from memory.models import Memory
from tests.clients.threads import run_async


@pytest.fixture
def planner(tenant_keys, agent_key):
    with tenant_keys.client(agent_key) as client:
        yield client


class PromptSeen(BaseCallbackHandler):
    """What the chat model was given."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.prompts += ["\n".join(str(m.content) for m in batch) for batch in messages]


def test_a_chain_answers_from_the_memories_the_retriever_finds(planner):
    planner.memories_create(content="The staging database is restored every Monday at 06:00.")
    planner.memories_create(content="Deploys go out on Tuesdays.")
    retriever = AgentMemoryRetriever(client=planner, top_k=1, sources=["agent_memory"])
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer from these notes:\n{context}"), ("human", "{question}")]
    )
    model = FakeListChatModel(responses=["Mondays at 06:00."])
    chain = (
        {
            "context": retriever | (lambda docs: "\n".join(d.page_content for d in docs)),
            "question": RunnablePassthrough(),
        }
        | prompt
        | model
    )
    seen = PromptSeen()

    answer = chain.invoke("When is staging restored?", config={"callbacks": [seen]})
    documents = retriever.invoke("When is staging restored?")

    assert answer.content == "Mondays at 06:00."
    assert "restored every Monday" in seen.prompts[0]
    assert "Tuesdays" not in seen.prompts[0]
    [document] = documents
    memory = Memory.objects.get(content__startswith="The staging database")
    assert document.id == f"agent_memory:{memory.pk}"
    assert document.metadata["id"] == memory.pk
    assert document.metadata["source"] == "agent_memory"
    assert 0 < document.metadata["score"] <= 1
    assert document.metadata["memory_type"] == memory.memory_type


def test_the_async_retriever_searches_the_knowledge_base_too(tenant_keys, agent_key, admin):
    admin.kb_documents_create(
        title="Release checklist",
        body="Before a release, run the migrations check.\n\nThen tag the commit.",
        publish=True,
    )

    async def scenario():
        async with AsyncClient(base_url=tenant_keys.base_url, api_key=agent_key) as client:
            retriever = AgentMemoryRetriever(async_client=client, sources=["knowledge_base"])
            return await retriever.ainvoke("what comes before a release?")

    documents = run_async(scenario())

    assert documents[0].metadata["source"] == "knowledge_base"
    assert documents[0].metadata["title"] == "Release checklist"
    assert "migrations check" in documents[0].page_content


def test_the_retriever_passes_filters_and_a_tenant_key_names_the_agent(admin, agent_key):
    admin.memories_create(agent="Planner", content="Invoice 7 is overdue.", session_id="s1")
    admin.memories_create(agent="Planner", content="Invoice 8 is overdue.", session_id="s2")
    admin.memories_create(agent="Other", content="Invoice 9 is overdue.", session_id="s1")
    retriever = AgentMemoryRetriever(
        client=admin, agent="Planner", sources=["agent_memory"], filters={"session_id": "s1"}
    )

    documents = retriever.invoke("which invoice is overdue?")

    assert [d.page_content for d in documents] == ["Invoice 7 is overdue."]


def history_chain(planner, responses):
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # LangChain's own, since 1.3.3
        return RunnableWithMessageHistory(
            prompt | FakeListChatModel(responses=responses),
            lambda session_id: AgentMemoryChatMessageHistory(session_id, planner),
            input_messages_key="question",
            history_messages_key="history",
        )


def test_runnable_with_message_history_keeps_the_conversation_in_order(planner):
    chain = history_chain(planner, ["Hello Dana.", "Your name is Dana."])
    seen = PromptSeen()
    config = {"configurable": {"session_id": "chat-1"}, "callbacks": [seen]}

    chain.invoke({"question": "Hi, I am Dana."}, config=config)
    second = chain.invoke({"question": "What is my name?"}, config=config)

    assert second.content == "Your name is Dana."
    assert "Hi, I am Dana." in seen.prompts[1]
    assert "Hello Dana." in seen.prompts[1]
    history = AgentMemoryChatMessageHistory("chat-1", planner)  # a new object: read back
    assert isinstance(history, BaseChatMessageHistory)
    assert [(m.type, m.content) for m in history.messages] == [
        ("human", "Hi, I am Dana."),
        ("ai", "Hello Dana."),
        ("human", "What is my name?"),
        ("ai", "Your name is Dana."),
    ]
    rows = Memory.objects.filter(session_id="chat-1").order_by("id")
    assert [(m.role, m.content) for m in rows] == [
        ("user", "Hi, I am Dana."),
        ("assistant", "Hello Dana."),
        ("user", "What is my name?"),
        ("assistant", "Your name is Dana."),
    ]
    assert {m.agent.name for m in rows} == {"Planner"}
    assert {m.memory_type for m in rows} == {"conversation"}
    assert AgentMemoryChatMessageHistory("chat-2", planner).messages == []


def test_every_kind_of_message_comes_back_as_it_was_stored(planner):
    messages = [
        SystemMessage("You are terse."),
        HumanMessage(content=[{"type": "text", "text": "Weather in Paris?"}], id="h1"),
        AIMessage(
            content="",
            tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "call-1"}],
        ),
        ToolMessage(content="18 C and sunny", tool_call_id="call-1", name="weather"),
        AIMessage(content="18 C and sunny.", response_metadata={"model": "fake"}),
        ChatMessage(role="assistant", content="(aside)"),
    ]
    history = AgentMemoryChatMessageHistory("chat-3", planner)

    history.add_messages(messages[:3])
    history.add_message(messages[3])
    history.add_messages(messages[4:])

    assert history.messages == messages
    rows = Memory.objects.filter(session_id="chat-3").order_by("id")
    assert [(m.role, m.content) for m in rows] == [
        ("system", "You are terse."),
        ("user", "Weather in Paris?"),
        ("assistant", 'weather({"city": "Paris"})'),
        ("tool_result", "18 C and sunny"),
        ("assistant", "18 C and sunny."),
        ("assistant", "(aside)"),
    ]


def test_clear_removes_this_historys_messages_only(planner):
    history = AgentMemoryChatMessageHistory("chat-4", planner)
    history.add_messages([HumanMessage("one"), AIMessage("two")])
    planner.memories_create(
        content="Stored through the API in the same session.", session_id="chat-4"
    )
    AgentMemoryChatMessageHistory("chat-5", planner).add_messages([HumanMessage("elsewhere")])

    history.clear()

    assert history.messages == []
    assert sorted(Memory.objects.values_list("content", flat=True)) == [
        "Stored through the API in the same session.",
        "elsewhere",
    ]


def test_archived_messages_stay_in_the_history(planner):
    history = AgentMemoryChatMessageHistory("chat-6", planner)
    history.add_messages([HumanMessage("old"), AIMessage("older reply"), HumanMessage("new")])
    Memory.objects.filter(content="older reply").update(archived_at=timezone.now())

    assert [m.content for m in history.messages] == ["old", "older reply", "new"]


def test_the_async_history_adds_reads_and_clears(tenant_keys, agent_key):
    async def scenario():
        async with AsyncClient(base_url=tenant_keys.base_url, api_key=agent_key) as client:
            history = AgentMemoryChatMessageHistory("chat-7", async_client=client)
            await history.aadd_messages([HumanMessage("ping"), AIMessage("pong")])
            read = await history.aget_messages()
            await history.aclear()
            return read, await history.aget_messages()

    read, after = run_async(scenario())

    assert read == [HumanMessage("ping"), AIMessage("pong")]
    assert after == []
    assert not Memory.objects.exists()


def test_what_was_said_in_a_chat_is_found_by_the_retriever(planner):
    AgentMemoryChatMessageHistory("chat-8", planner).add_messages(
        [HumanMessage("My invoices should go to billing@example.com."), AIMessage("Noted.")]
    )

    documents = AgentMemoryRetriever(client=planner, sources=["agent_memory"]).invoke(
        "where do invoices go?"
    )

    assert documents[0].page_content == "My invoices should go to billing@example.com."
    assert documents[0].metadata["session_id"] == "chat-8"
