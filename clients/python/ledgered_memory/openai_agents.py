"""The OpenAI Agents SDK's session, kept by the service: ``AgentMemorySession``.

    pip install "ledgered-memory[openai-agents]"

    from agents import Agent, Runner
    from ledgered_memory.openai_agents import AgentMemorySession

    session = AgentMemorySession("support-42")  # AGENT_MEMORY_URL, AGENT_MEMORY_API_KEY
    result = await Runner.run(agent, "Where is my order?", session=session)

A session is the service's session of one agent: each input item (a message, a tool call, its
output, a reasoning summary) is one memory, in order, whose text the service embeds and searches
and whose metadata holds the item as the SDK gave it, so ``get_items`` answers it back exactly.
It implements the SDK's ``Session`` protocol (``get_items``, ``add_items``, ``pop_item``,
``clear_session``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit

from ledgered_memory import types
from ledgered_memory._adapters import SessionAdapter, Turn, memory_text
from ledgered_memory._async import AsyncClient
from ledgered_memory._sync import Client

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["AgentMemorySession"]


class AgentMemorySession(SessionAdapter):
    """An Agents SDK session kept as memories of one session of the agent, oldest first.

    ``AgentMemorySession(session_id, client=None, *, async_client=None, agent=None,
    memory_type="conversation", session_settings=None)``: the arguments are
    ``SessionAdapter``'s (the session calls the asyncio client; a blocking one given lends it
    its URL, key, timeout and retries), and the SDK's ``SessionSettings``, whose ``limit`` is
    ``get_items``'s default.

    Only the memories this session stored are its items: other memories of the same session
    are neither read nor cleared. ``clear_session`` deletes them one by one.
    """

    kind = "openai_agents"

    def __init__(
        self,
        session_id: str,
        client: Client | None = None,
        *,
        async_client: AsyncClient | None = None,
        agent: str | None = None,
        memory_type: str | None = "conversation",
        session_settings: SessionSettings | None = None,
    ) -> None:
        super().__init__(
            session_id, client, async_client=async_client, agent=agent, memory_type=memory_type
        )
        self.session_settings = session_settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in the order they were added; with a limit, the newest ones."""
        limit = resolve_session_limit(limit, self.session_settings)
        memories = await self._clients.arun(self._log.read(limit))
        return [self._item(memory) for memory in memories]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        await self._clients.arun(self._log.append([_turn(item) for item in items]))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and answer it (None when the session is empty)."""
        memory = await self._clients.arun(self._log.pop())
        return None if memory is None else self._item(memory)

    async def clear_session(self) -> None:
        await self._clients.arun(self._log.clear())

    def _item(self, memory: types.Memory) -> TResponseInputItem:
        return cast("TResponseInputItem", self._log.payload(memory)["item"])


def _role(item: dict[str, Any]) -> types.MemoryRoleEnum:
    role = item.get("role")
    if role in ("user", "assistant", "system"):
        return cast("types.MemoryRoleEnum", role)
    if role == "developer":
        return "system"
    if str(item.get("type", "")).endswith("_output"):  # function_call_output and its kin
        return "tool_result"
    return "assistant"  # the model's tool calls, reasoning and other output items


def _text(item: dict[str, Any]) -> str:
    """What the service embeds for an item: its words, however the item holds them."""
    if item.get("type") == "function_call":
        return f"{item.get('name')}({item.get('arguments', '')})"
    for field in ("content", "output", "summary"):
        value = item.get(field)
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            parts = [p.get("text") or p.get("refusal") for p in value if isinstance(p, dict)]
            return "\n".join(part for part in parts if isinstance(part, str))
    return ""


def _turn(item: TResponseInputItem) -> Turn:
    plain = cast(dict[str, Any], item)
    whole = json.dumps(plain, ensure_ascii=False, sort_keys=True)
    return Turn(role=_role(plain), text=memory_text(_text(plain), whole), payload={"item": plain})
