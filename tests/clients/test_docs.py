"""The fenced ``python`` blocks of docs/client.md and docs/mcp.md, run in order (one namespace per
page, like a reader pasting them into one session) against the real server."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.clients.test_mcp import SCRIPT, _wait_listening
from tests.clients.threads import in_fresh_thread
from tests.live_server import _free_port

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks(page: str) -> list[str]:
    return BLOCK.findall((ROOT / "docs" / page).read_text())


def _run_blocks(page: str, monkeypatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(ROOT)
    blocks = _blocks(page)
    assert blocks, f"no python blocks in {page}"
    namespace: dict[str, object] = {"__name__": f"docs_{page}"}
    for number, source in enumerate(blocks, 1):
        # dont_inherit: not this file's `from __future__ import annotations`, which a reader
        # pasting the block does not have (a dataclass needs its annotations evaluated).
        code = compile(source, f"{page} block {number}", "exec", dont_inherit=True)
        try:
            in_fresh_thread(functools.partial(exec, code, namespace))
        except Exception as exc:  # name the block, its source is in the traceback's file name
            pytest.fail(f"{page} block {number} failed: {exc!r}\n{source}")


def test_the_client_docs_run(service, tenant_keys, monkeypatch, capsys):
    _run_blocks(
        "client.md",
        monkeypatch,
        {"AGENT_MEMORY_URL": service.base_url, "AGENT_MEMORY_API_KEY": tenant_keys.admin},
    )
    printed = capsys.readouterr().out
    assert "restored from backup every Monday" in printed
    assert "FAILED disk full" in printed


def test_the_mcp_docs_run(service, tenant_keys, admin, monkeypatch, capsys):
    admin.agents_create(name="Planner")
    key = admin.api_keys_create(name="planner", role="agent", agent="Planner")["key"]
    env = {"AGENT_MEMORY_URL": service.base_url, "AGENT_MEMORY_API_KEY": key}
    port = _free_port()
    http = subprocess.Popen(
        [SCRIPT, "--transport", "http", "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(http, port)
        _run_blocks(
            "mcp.md", monkeypatch, {**env, "AGENT_MEMORY_MCP_URL": f"http://127.0.0.1:{port}/mcp"}
        )
    finally:
        http.terminate()
        http.wait(timeout=20)
    printed = capsys.readouterr().out
    assert "'get_my_trust'" in printed
    assert "French" in printed
    assert "ERROR line 3" in printed


def test_the_mcp_client_configurations_start_the_installed_console_script():
    """The Claude Desktop and Cursor blocks name this distribution, its mcp extra and the console
    script it installs (uvx and pipx themselves are not on CI's machine)."""
    distribution = metadata.distribution("ledgered-memory")
    scripts = {e.name for e in distribution.entry_points if e.group == "console_scripts"}
    blocks = re.findall(r"^```json\n(.*?)^```", (ROOT / "docs" / "mcp.md").read_text(), re.M | re.S)
    launchers = []
    for block in blocks:
        for server in json.loads(block)["mcpServers"].values():
            launcher, args = server["command"], server["args"]
            launchers.append(launcher)
            spec = {"uvx": ["--from"], "pipx": ["run", "--spec"]}[launcher]
            assert args[: len(spec)] == spec
            requirement = Requirement(args[len(spec)])
            assert requirement.name == distribution.metadata["Name"]
            assert requirement.extras == {"mcp"}
            assert "mcp" in distribution.metadata.get_all("Provides-Extra", [])
            assert args[len(spec) + 1 :] == [SCRIPT.name]
            assert set(server["env"]) == {"AGENT_MEMORY_URL", "AGENT_MEMORY_API_KEY"}
    assert SCRIPT.name in scripts
    assert sorted(launchers) == ["pipx", "uvx"]


def test_the_integrations_docs_run(service, agent_key, monkeypatch, capsys):
    _run_blocks(
        "integrations.md",
        monkeypatch,
        {"AGENT_MEMORY_URL": service.base_url, "AGENT_MEMORY_API_KEY": agent_key},
    )
    printed = capsys.readouterr().out
    assert "['diet: Alice is allergic to peanuts. (" in printed
    assert "[('users', 'alice', 'notes')]" in printed
    assert re.search(r"agent_memory:\d+ agent_memory [01]\.\d+ The staging database", printed)
    assert "('ai', 'Your name is Dana.')]" in printed
    assert "{'role': 'assistant', 'content': 'Order 1234 is in transit" in printed


def test_the_coverage_table_lists_every_operation():
    from ledgered_memory._operations import OPERATIONS

    table = (ROOT / "docs" / "client.md").read_text()
    for operation_id, (method, path, name) in OPERATIONS.items():
        assert f"| `{operation_id}` | `{method} {path}` | `{name}`" in table, operation_id
