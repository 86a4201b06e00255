"""The MCP server (``manage.py mcp``) driven by the ``mcp`` client library over stdio and
streamable HTTP, against the real server, with an agent-scoped key."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from ledgered_memory.mcp_server import TOOL_OPERATIONS
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from memory.models import Memory
from tests.clients.threads import run_async
from tests.live_server import _free_port
from trust.models import Dissent

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def planner_key(admin) -> str:
    admin.agents_create(name="Planner")
    admin.rubric_create(
        criteria=[{"name": "correctness"}, {"name": "security"}, {"name": "clarity"}]
    )
    return admin.api_keys_create(name="planner", role="agent", agent="Planner")["key"]


def _env(service, key: str) -> dict[str, str]:
    return {**os.environ, "AGENT_MEMORY_URL": service.base_url, "AGENT_MEMORY_API_KEY": key}


def _payload(result: Any) -> Any:
    assert not result.isError, result.content
    structured = result.structuredContent
    if structured is not None:
        return structured["result"] if set(structured) == {"result"} else structured
    return json.loads(result.content[0].text)


async def _session_run(transport: AbstractAsyncContextManager[Any], script) -> Any:
    async with transport as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        return await script(session)


async def _every_tool(session: ClientSession) -> dict[str, Any]:
    listed = await session.list_tools()
    seen: dict[str, Any] = {"tools": {tool.name: tool.description for tool in listed.tools}}

    async def call(name: str, **arguments: Any) -> Any:
        return _payload(await session.call_tool(name, arguments))

    stored = await call(
        "store_memory", content="The staging database is restored every Monday.", tags=["ops"]
    )
    seen["stored"] = stored
    seen["search"] = await call("search_memories", query="when is staging restored?", top_k=3)
    log = "\n".join(f"step {n}: ok" for n in range(100)) + "\nstep 100: FAILED timeout"
    item = await call("store_content", content=log, run_id="run-1", type="action_result")
    seen["item"] = item
    seen["filtered"] = await call(
        "retrieve_content", item_id=item["id"], transform="filtered", match="FAILED"
    )
    seen["listed"] = await call("query_content", run_id="run-1")
    seen["recall"] = await call("recall", run_id="run-1")
    seen["rubric"] = await call("get_rubric")
    seen["dissent"] = await call(
        "log_dissent",
        text="The retry loop hides the timeout; the failure must be reported, not swallowed.",
        rubric_citations=["correctness"],
    )
    seen["trust"] = await call("get_my_trust")
    missing = await session.call_tool("retrieve_content", {"item_id": "nope"})
    seen["missing"] = (missing.isError, missing.content[0].text)
    return seen


def _check_every_tool(seen: dict[str, Any]) -> None:
    assert set(seen["tools"]) == set(TOOL_OPERATIONS)
    assert all(len(description) > 80 for description in seen["tools"].values())
    assert Memory.objects.get(pk=seen["stored"]["id"]).agent.name == "Planner"
    assert seen["search"][0]["id"] == seen["stored"]["id"]
    assert "FAILED" in str(seen["filtered"]["content"])
    assert "step 1: ok" not in str(seen["filtered"]["content"])
    assert [i["id"] for i in seen["listed"]] == [seen["item"]["id"]]
    assert seen["recall"]["mode"] == "episodic"
    assert [c["name"] for c in seen["rubric"]["criteria"]] == ["correctness", "security", "clarity"]
    dissent = Dissent.objects.get(pk=seen["dissent"]["id"])
    assert dissent.agent.name == "Planner"
    assert dissent.rubric_citations == ["correctness"]
    assert seen["trust"]["agent"] == "Planner"
    assert seen["trust"]["dissents"] == 1
    assert 0 <= seen["trust"]["trust_score"] <= 1
    is_error, text = seen["missing"]
    assert is_error
    assert "not_found" in text


def test_the_stdio_server_exposes_every_tool(service, planner_key):
    parameters = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--transport", "stdio"],
        env=_env(service, planner_key),
        cwd=str(ROOT),
    )
    seen = run_async(_session_run(stdio_client(parameters), _every_tool))
    _check_every_tool(seen)


def _wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "the MCP HTTP server did not listen"
            time.sleep(0.2)


@pytest.fixture
def http_server(service, planner_key) -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "mcp", "--transport", "http", "--port", str(port)],
        cwd=ROOT,
        env=_env(service, planner_key),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_listening(process, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_the_streamable_http_server_exposes_every_tool(http_server):
    seen = run_async(_session_run(streamable_http_client(http_server), _every_tool))
    _check_every_tool(seen)


def test_it_refuses_a_tenant_wide_key(service, tenant_keys):
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp", "--transport", "stdio"],
        cwd=ROOT,
        env=_env(service, tenant_keys.admin),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "agent-scoped" in done.stderr
