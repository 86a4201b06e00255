"""The TypeScript client (clients/typescript) against the real server: its types are generated
from this server's OpenAPI schema, compiled with its tests and example (a type error fails the
build), and its tests run by Node's test runner, as `npm run generate`, `build` and `test` do.
`make setup` runs `npm ci` in that folder."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from drf_spectacular.generators import SchemaGenerator

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
# docs/client.md's TypeScript block, compiled with the example (git ignores this file).
FROM_DOCS = PACKAGE / "examples" / "from_docs.ts"


def _docs_block() -> str:
    blocks = re.findall(
        r"^```ts\n(.*?)^```", (ROOT / "docs" / "client.md").read_text(), re.M | re.S
    )
    assert len(blocks) == 1
    # In the package itself its name is its source: the reader's import, pointed there.
    return blocks[0].replace('from "ledgered-memory"', 'from "../src/index.js"')


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=PACKAGE,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def built(service) -> None:
    if not (PACKAGE / "node_modules" / ".package-lock.json").exists():
        pytest.fail("clients/typescript has no node_modules: run make setup (npm ci there)")
    FROM_DOCS.write_text(_docs_block())
    for script in ("generate", "build"):
        done = _run(["npm", "run", "--silent", script], {"AGENT_MEMORY_URL": service.base_url})
        assert done.returncode == 0, f"npm run {script}:\n{done.stdout}\n{done.stderr}"


def test_the_generated_types_have_every_operation(built):
    schema = SchemaGenerator().get_schema(request=None, public=True)
    published = {
        operation["operationId"]
        for path, methods in schema["paths"].items()
        if path.startswith("/api/v1/")
        for operation in methods.values()
    }

    generated = re.findall(r"^    (\w+): \{$", (PACKAGE / "src" / "schema.ts").read_text(), re.M)

    assert published <= set(generated)


def test_the_typescript_client_passes_its_node_tests(built, tenant_keys):
    env = {"AGENT_MEMORY_URL": tenant_keys.base_url, "AGENT_MEMORY_API_KEY": tenant_keys.admin}

    done = _run(["npm", "test", "--silent"], env)

    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert re.search(r"^# fail 0$", report, re.MULTILINE), report[-8000:]
    passed = re.search(r"^# pass (\d+)$", report, re.MULTILINE)
    assert passed is not None
    assert int(passed.group(1)) >= 9, report[-8000:]


def test_the_typescript_example_runs(built, service, agent_key):
    done = _run(
        ["npm", "run", "--silent", "example"],
        {"AGENT_MEMORY_URL": service.base_url, "AGENT_MEMORY_API_KEY": agent_key},
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^stored memory \d+ for Planner$", done.stdout, re.MULTILINE)
    assert "The customer wants the report in French." in done.stdout
    assert re.search(r"^memory \d+ is gone: not_found$", done.stdout, re.MULTILINE)
    assert re.search(r"^ledger receipt \S+:\d+:\S+$", done.stdout, re.MULTILINE)


def test_the_typescript_block_of_the_client_docs_runs(built, service, agent_key):
    done = _run(
        ["node", "dist/examples/from_docs.js"],
        {"AGENT_MEMORY_URL": service.base_url, "AGENT_MEMORY_API_KEY": agent_key},
    )

    assert done.returncode == 0, done.stdout + done.stderr


def test_the_typescript_sources_are_formatted():
    done = _run(["npm", "run", "--silent", "format:check"], {})

    assert done.returncode == 0, done.stdout + done.stderr
