"""LangChain over the service: a retriever over memory search, and a chat message history.

    pip install "ledgered-memory[langchain]"

    from ledgered_memory.langchain import AgentMemoryChatMessageHistory, AgentMemoryRetriever

    retriever = AgentMemoryRetriever(top_k=4)  # AGENT_MEMORY_URL, AGENT_MEMORY_API_KEY
    history = AgentMemoryChatMessageHistory("support-42")

The retriever is the service's search (``POST /api/v1/memories/search/``): the agent's memories,
the ledger it may see and the knowledge base, ranked by similarity, recency, importance and
source priority. Each ``Document`` carries the hit's ``id``, ``score`` and ``source`` and the
source's details in its metadata.

The history keeps a conversation as memories of one session of the agent, one per message, in
order: their text is what the service embeds and searches (so what was said in a chat is found
by the agent's later searches), their metadata holds the whole message, which comes back as it
was stored. ``BaseChatMessageHistory`` and ``RunnableWithMessageHistory`` are deprecated since
langchain-core 1.6.4 (removed in 2.0, which the ``langchain`` extra's pin keeps out).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langchain_core.retrievers import BaseRetriever
from pydantic import PrivateAttr

from ledgered_memory import types
from ledgered_memory._adapters import (
    Clients,
    Plan,
    SessionAdapter,
    Turn,
    memories_search,
    memory_text,
)
from ledgered_memory._async import AsyncClient
from ledgered_memory._sync import Client

__all__ = ["AgentMemoryChatMessageHistory", "AgentMemoryRetriever"]


class AgentMemoryRetriever(BaseRetriever):
    """Documents from the service's search, best first.

    Attributes:
        client: The blocking client (``invoke``); the async one is opened beside it when first
            needed, and both come from the environment when neither is given.
        async_client: The asyncio client (``ainvoke``).
        agent: The agent who searches. Leave it out with an agent-scoped key; name it with a
            tenant-wide key.
        top_k: How many documents at most (the service allows 1 to 50 by default).
        sources: Which of ``agent_memory``, ``audit_log``, ``workflow_steps`` and
            ``knowledge_base`` to search; all of them when None.
        filters: Over the agent's memories: ``session_id``, ``memory_type``, ``tags`` (all of)
            and ``metadata`` (contains).
        threshold: The cosine below which a match sharing no word with the query is dropped;
            the service's configured one when None.
        weights: The ranking's weights (``similarity``, ``recency``, ``importance``,
            ``source_priority``); the service's when None.
    """

    client: Client | None = None
    async_client: AsyncClient | None = None
    agent: str | None = None
    top_k: int = 4
    sources: list[str] | None = None
    filters: dict[str, Any] | None = None
    threshold: float | None = None
    weights: dict[str, float] | None = None

    _clients: Clients = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._clients = Clients(self.client, self.async_client)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._clients.run(self._search(query))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return await self._clients.arun(self._search(query))

    def _search(self, query: str) -> Plan[list[Document]]:
        request: types.SearchRequest = {"query": query, "top_k": self.top_k}
        if self.agent is not None:
            request["agent"] = self.agent
        if self.sources is not None:
            request["sources"] = self.sources
        if self.filters is not None:
            request["filters"] = cast("types.MemoryFilter", self.filters)
        if self.threshold is not None:
            request["threshold"] = self.threshold
        if self.weights is not None:
            request["weights"] = cast("types.SearchWeightsRequest", self.weights)
        answer = yield from memories_search(**request)
        return [_document(hit) for hit in answer["results"]]


def _document(hit: types.SearchHit) -> Document:
    # Ids are per source (a memory id, an event's seq, a knowledge-base chunk id).
    return Document(
        id=f"{hit['source']}:{hit['id']}",
        page_content=hit["content"],
        metadata={
            **hit["details"],
            "id": hit["id"],
            "score": hit["score"],
            "source": hit["source"],
        },
    )


class AgentMemoryChatMessageHistory(SessionAdapter, BaseChatMessageHistory):
    """A chat's messages kept as memories of one session of the agent, oldest first.

    ``AgentMemoryChatMessageHistory(session_id, client=None, *, async_client=None, agent=None,
    memory_type="conversation")``: the arguments are ``SessionAdapter``'s (``memory_type``
    applies to every message, so one conversation shares one retention).

    Only the memories this history stored are its messages: other memories of the same session
    are neither read nor cleared. ``clear`` deletes them one by one.
    """

    kind = "langchain"

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return self._messages(self._clients.run(self._log.read()))

    async def aget_messages(self) -> list[BaseMessage]:
        return self._messages(await self._clients.arun(self._log.read()))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self._clients.run(self._log.append([_turn(message) for message in messages]))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await self._clients.arun(self._log.append([_turn(message) for message in messages]))

    def clear(self) -> None:
        self._clients.run(self._log.clear())

    async def aclear(self) -> None:
        await self._clients.arun(self._log.clear())

    def _messages(self, memories: list[types.Memory]) -> list[BaseMessage]:
        return messages_from_dict([self._log.payload(memory)["message"] for memory in memories])


def _role(message: BaseMessage) -> types.MemoryRoleEnum:
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage | FunctionMessage):
        return "tool_result"
    if isinstance(message, ChatMessage) and message.role in ("assistant", "system"):
        return "assistant" if message.role == "assistant" else "system"
    return "user"


def _turn(message: BaseMessage) -> Turn:
    text = str(message.text)
    if not text.strip() and isinstance(message, AIMessage) and message.tool_calls:
        text = "; ".join(_call(call["name"], call["args"]) for call in message.tool_calls)
    return Turn(
        role=_role(message),
        text=memory_text(text, f"({message.type} message)"),
        payload={"message": message_to_dict(message)},
    )


def _call(name: str, arguments: Mapping[str, Any]) -> str:
    return f"{name}({json.dumps(arguments, ensure_ascii=False, sort_keys=True)})"
