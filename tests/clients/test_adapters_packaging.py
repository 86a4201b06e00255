"""The framework adapters are optional extras of the client: the client installs and imports
without them, the project's dev extra tests them at the versions the extras allow, and none of
them brings a machine-learning runtime along."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("langgraph", "langchain", "openai-agents")
# What an adapter must never pull in: each is hundreds of megabytes.
HEAVY = {"torch", "tensorflow", "jax", "jaxlib", "transformers", "sentence-transformers"}


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def test_the_dev_extra_installs_every_adapter_extra_at_the_same_pins():
    client = _project(ROOT / "clients" / "python" / "pyproject.toml")["optional-dependencies"]
    dev = {_name(r): r for r in _project(ROOT / "pyproject.toml")["optional-dependencies"]["dev"]}

    for extra in EXTRAS:
        for requirement in client[extra]:
            assert dev.get(_name(requirement)) == requirement, (extra, requirement)


def test_the_client_imports_without_any_framework():
    frameworks = ("langgraph", "langchain_core", "agents", "openai")
    check = f"import sys, ledgered_memory; print([m for m in {frameworks!r} if m in sys.modules])"

    loaded = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True
    ).stdout.strip()

    assert loaded == "[]"


def test_no_adapter_extra_pulls_in_a_machine_learning_runtime():
    client = _project(ROOT / "clients" / "python" / "pyproject.toml")["optional-dependencies"]
    pending = [Requirement(r) for extra in EXTRAS for r in client[extra]]
    seen: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = _name(str(requirement))
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        pending += [Requirement(r) for r in metadata.requires(name) or []]

    assert seen >= {"langgraph", "langchain-core", "openai-agents"}
    assert not seen & HEAVY
