"""The MCP server driven by the ``mcp`` client library against the real server, with an
agent-scoped key: the ``ledgered-memory-mcp`` console script over stdio (as an MCP client such as
Claude Desktop starts it, outside this checkout) and ``manage.py mcp`` over streamable HTTP; and
the one line each says on stderr, with nothing on stdout, when it cannot start."""

from __future__ import annotations

import functools
import json
import os
import shutil
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
# Installed by `pip install ./clients/python` beside this interpreter (make setup does it).
SCRIPT = Path(sys.executable).with_name("ledgered-memory-mcp")
UVX = Path(sys.executable).with_name("uvx")  # the dev extra's uv


@pytest.fixture
def planner_key(admin) -> str:
    admin.agents_create(name="Planner")
    admin.agents_create(name="Other")
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


@pytest.fixture
def others_memory(admin, planner_key) -> int:
    """The id of a memory of agent "Other", which Planner's tools must neither list nor touch."""
    return admin.memories_create(agent="Other", content="Other's note: the vault code is 0000.")[
        "id"
    ]


async def _every_tool(session: ClientSession, *, others_memory: int) -> dict[str, Any]:
    listed = await session.list_tools()
    seen: dict[str, Any] = {"tools": {tool.name: tool.description for tool in listed.tools}}

    async def call(name: str, **arguments: Any) -> Any:
        return _payload(await session.call_tool(name, arguments))

    stored = await call(
        "store_memory", content="The staging database is restored every Monday.", tags=["ops"]
    )
    seen["stored"] = stored
    seen["search"] = await call("search_memories", query="when is staging restored?", top_k=3)
    doomed = await call("store_memory", content="The office plant needs water on Fridays.")
    seen["listed_memories"] = await call("list_memories", limit=1)
    seen["listed_next"] = await call(
        "list_memories", limit=1, cursor=seen["listed_memories"]["next_cursor"]
    )
    seen["updated"] = await call(
        "update_memory",
        memory_id=stored["id"],
        content="The staging database is restored every Tuesday.",
        importance=0.9,
        reason="the restore moved",
    )
    seen["deleted"] = await call("delete_memory", memory_id=doomed["id"], reason="wrong plant")
    seen["history"] = await call("memory_history", memory_id=stored["id"])
    seen["deleted_history"] = await call("memory_history", memory_id=doomed["id"])
    foreign_history = await session.call_tool("memory_history", {"memory_id": others_memory})
    seen["foreign_history"] = (foreign_history.isError, foreign_history.content[0].text)
    question = {"query": "when is staging restored?", "sources": ["agent_memory"]}
    seen["filtered_in"] = await call("search_memories", **question, filters={"tags": "ops"})
    seen["filtered_out"] = await call(
        "search_memories", **question, filters={"NOT": {"tags": {"in": ["ops"]}}}
    )
    seen["bulk_dry"] = await call("delete_memories", filter={"tags": "ops"}, dry_run=True)
    seen["bulk_updated"] = await call("update_memories", filter={"tags": "ops"}, tags_add=["seen"])
    seen["bulk_listed"] = await call("list_memories", filter={"tags": "seen"})
    await call("store_memory", content="A scratch note to throw away.", tags=["scratch"])
    seen["bulk_deleted"] = await call("delete_memories", filter={"tags": "scratch"})
    foreign = await session.call_tool("delete_memory", {"memory_id": others_memory})
    seen["foreign"] = (foreign.isError, foreign.content[0].text)
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
    old = await call("store_memory", content="Standups are at 9:30.")
    seen["replacing"] = await call(
        "store_memory", content="Standups are at 10:00 now.", supersedes=[old["id"]]
    )
    later = await call("store_memory", content="From June standups are at 10:30.")
    seen["superseding"] = await call(
        "supersede_memory", memory_id=later["id"], supersedes=[seen["replacing"]["id"]]
    )
    seen["standups"] = await call("search_memories", query="when are standups?", top_k=5)
    seen["standups_then"] = await call(
        "search_memories", query="when are standups?", top_k=5, include_superseded=True
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
    newest, older = seen["listed_memories"]["memories"], seen["listed_next"]["memories"]
    assert [m["content"] for m in newest] == ["The office plant needs water on Fridays."]
    assert [m["id"] for m in older] == [seen["stored"]["id"]]  # Other's memory is not listed
    assert seen["listed_next"]["next_cursor"] is None
    kept = Memory.objects.get(pk=seen["stored"]["id"])
    assert (
        kept.content
        == seen["updated"]["content"]
        == "The staging database is restored every Tuesday."
    )
    assert kept.importance == seen["updated"]["importance"] == 0.9
    assert seen["deleted"] == {"deleted": seen["listed_memories"]["memories"][0]["id"]}
    assert not Memory.objects.filter(pk=seen["deleted"]["deleted"]).exists()
    stored, updated = seen["history"]["changes"]
    assert (stored["kind"], updated["kind"]) == ("memory.stored", "memory.updated")
    assert updated["before"]["content"] == "The staging database is restored every Monday."
    assert updated["after"]["content"] == "The staging database is restored every Tuesday."
    assert (updated["actor"], updated["reason"]) == ("Planner", "the restore moved")
    assert seen["history"]["next_cursor"] is None
    removed = seen["deleted_history"]["changes"][-1]
    assert (removed["kind"], removed["reason"]) == ("memory.deleted", "wrong plant")
    assert removed["content_shredded"]
    assert "plant needs water" not in json.dumps(seen["deleted_history"])
    assert seen["foreign_history"][0]
    assert "not_found" in seen["foreign_history"][1]
    assert [hit["id"] for hit in seen["filtered_in"]] == [seen["stored"]["id"]]
    assert seen["filtered_out"] == []
    assert (seen["bulk_dry"]["matched"], seen["bulk_dry"]["done"]) == (1, 0)
    assert seen["bulk_updated"]["ids"] == [seen["stored"]["id"]]
    assert kept.tags == ["ops", "seen"]
    assert [m["id"] for m in seen["bulk_listed"]["memories"]] == [seen["stored"]["id"]]
    assert seen["bulk_deleted"]["done"] == 1
    assert not Memory.objects.filter(tags__contains=["scratch"]).exists()
    is_error, text = seen["foreign"]
    assert is_error
    assert "not_found" in text
    assert Memory.objects.filter(agent__name="Other").count() == 1
    assert "FAILED" in str(seen["filtered"]["content"])
    assert "step 1: ok" not in str(seen["filtered"]["content"])
    assert [i["id"] for i in seen["listed"]] == [seen["item"]["id"]]
    assert seen["recall"]["mode"] == "episodic"
    assert [c["name"] for c in seen["rubric"]["criteria"]] == ["correctness", "security", "clarity"]
    dissent = Dissent.objects.get(pk=seen["dissent"]["id"])
    assert dissent.agent.name == "Planner"
    assert dissent.rubric_citations == ["correctness"]
    replaced = seen["replacing"]["supersedes"]
    assert Memory.objects.get(pk=replaced[0]).superseded_by == seen["replacing"]["id"]
    assert seen["superseding"]["supersedes"] == [seen["replacing"]["id"]]
    standups = [hit["content"] for hit in seen["standups"] if "tandups" in hit["content"]]
    assert standups == ["From June standups are at 10:30."]
    assert len([h for h in seen["standups_then"] if "tandups" in h["content"]]) == 3
    assert seen["trust"]["agent"] == "Planner"
    assert seen["trust"]["dissents"] == 1
    assert 0 <= seen["trust"]["trust_score"] <= 1
    is_error, text = seen["missing"]
    assert is_error
    assert "not_found" in text


def test_the_console_script_serves_every_tool_over_stdio(
    service, planner_key, others_memory, tmp_path
):
    parameters = StdioServerParameters(
        command=str(SCRIPT), args=[], env=_env(service, planner_key), cwd=str(tmp_path)
    )
    script = functools.partial(_every_tool, others_memory=others_memory)
    seen = run_async(_session_run(stdio_client(parameters), script))
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


def test_uvx_starts_the_console_script_as_the_docs_say(
    service, planner_key, others_memory, tmp_path
):
    # A copy of the package: a build leaves build/ in the folder it builds (pip, uv alike).
    source = shutil.copytree(
        ROOT / "clients" / "python",
        tmp_path / "client",
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    parameters = StdioServerParameters(
        command=str(UVX),
        args=["--from", f"{source}[mcp]", "ledgered-memory-mcp"],
        env=_env(service, planner_key),
        cwd=str(tmp_path),
    )
    script = functools.partial(_every_tool, others_memory=others_memory)
    seen = run_async(_session_run(stdio_client(parameters), script))
    _check_every_tool(seen)


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


def test_the_streamable_http_server_exposes_every_tool(http_server, others_memory):
    script = functools.partial(_every_tool, others_memory=others_memory)
    seen = run_async(_session_run(streamable_http_client(http_server), script))
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


def _start_failure(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _assert_one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1
    assert done.stdout == ""  # an MCP client would read anything there as protocol
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("ledgered-memory-mcp: ")
    return lines[0]


def test_the_console_script_says_in_one_line_that_the_service_is_down(planner_key):
    port = _free_port()  # nothing listens there
    env = {**os.environ, "AGENT_MEMORY_URL": f"http://127.0.0.1:{port}"}
    env["AGENT_MEMORY_API_KEY"] = planner_key

    line = _assert_one_line(_start_failure(env))

    assert f"cannot reach the memory service at http://127.0.0.1:{port}" in line
    assert "AGENT_MEMORY_URL" in line


def test_the_console_script_says_in_one_line_that_the_key_is_wrong(service, planner_key):
    wrong = planner_key[:-4] + ("aaaa" if not planner_key.endswith("aaaa") else "bbbb")

    line = _assert_one_line(_start_failure(_env(service, wrong)))

    assert f"the memory service at {service.base_url} refused the API key" in line
    assert planner_key not in line
    assert wrong not in line


def test_the_console_script_refuses_a_tenant_wide_key(service, tenant_keys):
    line = _assert_one_line(_start_failure(_env(service, tenant_keys.admin)))

    assert "agent-scoped" in line


def test_the_console_script_says_that_the_key_is_missing(service):
    env = {k: v for k, v in os.environ.items() if k != "AGENT_MEMORY_API_KEY"}

    line = _assert_one_line(_start_failure({**env, "AGENT_MEMORY_URL": service.base_url}))

    assert "AGENT_MEMORY_API_KEY" in line
