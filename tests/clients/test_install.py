"""``pip install ./clients/python`` into a fresh virtual environment, as someone outside the
service installs the client: it brings neither Django nor the service, imports, and its console
script, without the ``mcp`` extra, says in one line what to install instead of a traceback."""

from __future__ import annotations

import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a new virtual environment holding only the client and its httpx."""
    folder = tmp_path_factory.mktemp("client-venv")
    # A copy: setuptools builds in the source folder, and a build/ left in the checkout would be
    # a second ledgered_memory for mypy.
    source = shutil.copytree(
        ROOT / "clients" / "python",
        folder / "source",
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    venv.create(folder, with_pip=True)
    subprocess.run(
        [folder / "bin" / "python", "-m", "pip", "install", "--quiet", str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return folder / "bin"


def test_the_client_installs_and_imports_without_django(fresh_install):
    check = (
        "import importlib.util, ledgered_memory, ledgered_memory.types as t; "
        "from ledgered_memory import Client, AsyncClient; "
        "print(importlib.util.find_spec('django') is None, callable(Client.memories_search), "
        "hasattr(AsyncClient, 'trust_get'), 'Memory' in t.__all__)"
    )

    done = subprocess.run(
        [fresh_install / "python", "-c", check],
        cwd=fresh_install,  # not the checkout, whose folders would import from the source tree
        capture_output=True,
        text=True,
        check=True,
    )

    assert done.stdout.split() == ["True", "True", "True", "True"]


def test_the_console_script_without_the_mcp_extra_names_the_extra(fresh_install):
    done = subprocess.run(
        [fresh_install / "ledgered-memory-mcp"],
        cwd=fresh_install,
        env={"AGENT_MEMORY_API_KEY": "amk_unused", "PATH": str(fresh_install)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "pip install 'ledgered-memory[mcp]'" in done.stderr
