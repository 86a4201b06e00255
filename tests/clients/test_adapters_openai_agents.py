"""The OpenAI Agents SDK's Session protocol, kept by AgentMemorySession against the real service:
agents run by the SDK's Runner (a scripted model stands in for OpenAI's, whose SDK ships no fake)
with their conversation, tool calls included, kept in the service and given back to the model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from django.utils import timezone
from ledgered_memory import AsyncClient
from ledgered_memory.openai_agents import AgentMemorySession
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from memory.models import Memory
from tests.clients.threads import run_async

NO_TRACING = RunConfig(tracing_disabled=True)


def said(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg-{abs(hash(text))}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def calls(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc-{call_id}", type="function_call", name=name, arguments=arguments, call_id=call_id
    )


class ScriptedModel(Model):
    """Answers each model call with the next scripted output, and records what it was given."""

    def __init__(self, *turns: list[Any]) -> None:
        self.turns = list(turns)
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        self.inputs.append(list(input) if isinstance(input, list) else [input])
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs) -> AsyncIterator[Any]:
        raise NotImplementedError


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"18 C and sunny in {city}"


def run_session(tenant_keys, agent_key, scenario):
    async def main():
        async with AsyncClient(base_url=tenant_keys.base_url, api_key=agent_key) as client:
            return await scenario(client)

    return run_async(main())


def test_a_runner_keeps_the_conversation_and_its_tool_calls_in_the_session(tenant_keys, agent_key):
    model = ScriptedModel(
        [calls("weather", '{"city": "Paris"}', "call-1")],
        [said("It is 18 C and sunny in Paris.")],
        [said("You asked about Paris.")],
    )
    agent = Agent(name="Planner", instructions="Be brief.", model=model, tools=[weather])

    async def scenario(client):
        session: Session = AgentMemorySession("run-1", async_client=client)
        first = await Runner.run(agent, "Weather in Paris?", session=session, run_config=NO_TRACING)
        second = await Runner.run(
            agent, "Which city did I ask about?", session=session, run_config=NO_TRACING
        )
        return first.final_output, second.final_output, await session.get_items()

    first, second, items = run_session(tenant_keys, agent_key, scenario)

    assert (first, second) == ("It is 18 C and sunny in Paris.", "You asked about Paris.")
    last_input = model.inputs[-1]
    assert [item.get("type", "message") for item in last_input] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    assert last_input[0]["content"] == "Weather in Paris?"
    assert items[:-1] == last_input
    assert items[-1]["role"] == "assistant"
    rows = Memory.objects.filter(session_id="run-1").order_by("id")
    assert [(m.role, m.content) for m in rows] == [
        ("user", "Weather in Paris?"),
        ("assistant", 'weather({"city": "Paris"})'),
        ("tool_result", "18 C and sunny in Paris"),
        ("assistant", "It is 18 C and sunny in Paris."),
        ("user", "Which city did I ask about?"),
        ("assistant", "You asked about Paris."),
    ]
    assert {m.agent.name for m in rows} == {"Planner"}
    assert {m.memory_type for m in rows} == {"conversation"}


ITEMS: list[Any] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "input_text", "text": "Hello"}]},
    {"role": "developer", "content": "Answer in French."},
    {"type": "reasoning", "id": "rs-1", "summary": [{"type": "summary_text", "text": "Greet."}]},
    {"type": "function_call", "call_id": "c1", "name": "ping", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": ""},
    {"role": "assistant", "content": "Bonjour."},
]


def test_items_come_back_exactly_in_order_with_limits_pop_and_clear(tenant_keys, agent_key):
    async def scenario(client):
        session = AgentMemorySession("run-2", async_client=client)
        await session.add_items(ITEMS[:4])
        await session.add_items(ITEMS[4:])
        everything = await session.get_items()
        newest_two = await session.get_items(limit=2)
        none = await session.get_items(limit=0)
        popped = await session.pop_item()
        after_pop = await session.get_items()
        limited = AgentMemorySession(
            "run-2", async_client=client, session_settings=SessionSettings(limit=1)
        )
        default_limit = await limited.get_items()
        await session.clear_session()
        return (
            everything,
            newest_two,
            none,
            popped,
            after_pop,
            default_limit,
            (
                await session.get_items(),
                await session.pop_item(),
            ),
        )

    everything, newest_two, none, popped, after_pop, default_limit, (cleared, empty_pop) = (
        run_session(tenant_keys, agent_key, scenario)
    )

    assert everything == ITEMS
    assert newest_two == ITEMS[-2:]
    assert none == []
    assert popped == ITEMS[-1]
    assert after_pop == ITEMS[:-1]
    assert default_limit == [ITEMS[-2]]
    assert cleared == []
    assert empty_pop is None
    assert not Memory.objects.exists()


def test_each_item_is_a_memory_the_service_can_search(tenant_keys, agent_key):
    async def scenario(client):
        await AgentMemorySession("run-3", async_client=client).add_items(ITEMS)
        return await client.memories_search(query="reasoning about greeting", top_k=10)

    run_session(tenant_keys, agent_key, scenario)

    rows = Memory.objects.filter(session_id="run-3").order_by("id")
    assert [(m.role, m.content) for m in rows] == [
        ("system", "Be brief."),
        ("user", "Hello"),
        ("system", "Answer in French."),
        ("assistant", "Greet."),
        ("assistant", "ping({})"),
        ("tool_result", '{"call_id": "c1", "output": "", "type": "function_call_output"}'),
        ("assistant", "Bonjour."),
    ]


def test_the_session_keeps_to_its_own_memories_and_sees_archived_ones(
    tenant_keys, agent_key, admin
):
    admin.memories_create(agent="Planner", content="Stored through the API.", session_id="run-4")

    async def store(client):
        await AgentMemorySession("run-4", async_client=client).add_items(ITEMS[:2])

    async def read_and_clear(client):
        session = AgentMemorySession("run-4", async_client=client)
        read = await session.get_items()
        await session.clear_session()
        return read

    run_session(tenant_keys, agent_key, store)
    Memory.objects.filter(content="Be brief.").update(archived_at=timezone.now())

    assert run_session(tenant_keys, agent_key, read_and_clear) == ITEMS[:2]
    assert list(Memory.objects.values_list("content", flat=True)) == ["Stored through the API."]


def test_a_blocking_client_and_a_tenant_key_work_too(tenant_keys, agent_key, admin):
    session = AgentMemorySession("run-5", admin, agent="Other")

    async def scenario():
        await session.add_items(ITEMS[:1])
        return await session.get_items()

    assert run_async(scenario()) == ITEMS[:1]
    assert [m.agent.name for m in Memory.objects.all()] == ["Other"]


@pytest.mark.parametrize("session_id", ["x" * 201])
def test_a_session_id_the_service_refuses_fails_loudly(tenant_keys, agent_key, session_id):
    from ledgered_memory import BadRequestError

    async def scenario(client):
        await AgentMemorySession(session_id, async_client=client).add_items(ITEMS[:1])

    with pytest.raises(BadRequestError):
        run_session(tenant_keys, agent_key, scenario)
    assert not Memory.objects.exists()
