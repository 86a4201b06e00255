"""The deployment files agree with the code: docker-compose.yml, the README and the settings.

Environment variable names are parsed from the source (``env_str("NAME"``, ``os.environ.get(...``),
never listed here, so a setting added to the code without the README, or a compose variable the
code never reads, fails a test. No database is needed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COMPOSE_FILE = ROOT / "docker-compose.yml"
APP_SERVICES = ("migrate", "web", "worker", "beat")
LONG_RUNNING_APP_SERVICES = ("web", "worker", "beat")
README_FIRST_SCREEN_LINES = 40

# Folders whose code is not the service: its tests, benchmarks, and things that are not ours.
_NOT_SERVICE_CODE = {"tests", "bench", "migrations", ".venv", "var", "node_modules", "build"}
_ENV_READ = re.compile(
    r"""(?:\benv_(?:str|bool|int|float|list|path|networks)\(|\b(?:os\.)?environ\.get\(|\bos\.getenv\("""
    r"""|\b(?:os\.)?environ\[)\s*["']([A-Z][A-Z0-9_]*)["']"""
)


@cache
def variables_read_by_code() -> frozenset[str]:
    """Every environment variable that settings, management commands or other service code read."""
    names: set[str] = set()
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if any(part in _NOT_SERVICE_CODE or part.startswith(".") for part in parts):
            continue
        names.update(_ENV_READ.findall(path.read_text(encoding="utf-8")))
    return frozenset(names)


@cache
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def service(name: str) -> dict[str, Any]:
    services = compose()["services"]
    assert name in services, f"docker-compose.yml has no service {name!r}"
    definition = services[name]
    assert isinstance(definition, dict)
    return definition


def environment(name: str) -> dict[str, str]:
    raw = service(name).get("environment") or {}
    if isinstance(raw, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {key: "" if value is None else str(value) for key, value in raw.items()}


def readme_lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def fenced_code_lines(lines: list[str]) -> list[str]:
    """Non-blank, non-comment lines inside ``` fences."""
    inside = False
    found = []
    for line in lines:
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        stripped = line.strip()
        if inside and stripped and not stripped.startswith("#"):
            found.append(stripped)
    return found


def readme_configuration_variables() -> set[str]:
    """The names in the first column of the tables under the README's Configuration heading."""
    names: set[str] = set()
    in_section = False
    for line in readme_lines():
        if line.startswith("## "):
            in_section = line.removeprefix("## ").strip().lower().startswith("configuration")
            continue
        match = re.match(r"\|\s*`([A-Z][A-Z0-9_]*)`\s*\|", line)
        if in_section and match:
            names.add(match.group(1))
    return names


def compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


# --- docker-compose.yml -------------------------------------------------------------------------


def test_the_code_reads_the_core_settings_from_the_environment():
    # Guards the parser itself: if it finds nothing, the comparisons below prove nothing.
    assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "AGENT_MEMORY_DATA_DIR"} <= (
        variables_read_by_code()
    )


@pytest.mark.parametrize("name", APP_SERVICES)
def test_compose_sets_only_variables_the_code_reads(name):
    unknown = set(environment(name)) - variables_read_by_code()

    assert not unknown, f"{name} sets variables no code reads: {sorted(unknown)}"


@pytest.mark.parametrize("name", APP_SERVICES)
def test_compose_points_the_app_at_its_own_database_and_redis(name):
    env = environment(name)

    database = urlsplit(env["DATABASE_URL"])
    redis = urlsplit(env["REDIS_URL"])

    assert database.scheme in {"postgres", "postgresql"}
    assert (database.hostname, database.port) == ("db", 5432)
    assert (redis.scheme, redis.hostname, redis.port) == ("redis", "redis", 6379)
    assert {"db", "redis"} <= set(compose()["services"])


@pytest.mark.parametrize("name", LONG_RUNNING_APP_SERVICES)
def test_app_services_start_after_migrate_succeeds_and_backends_are_healthy(name):
    depends_on = service(name)["depends_on"]

    assert depends_on["migrate"]["condition"] == "service_completed_successfully"
    assert depends_on["db"]["condition"] == "service_healthy"
    assert depends_on["redis"]["condition"] == "service_healthy"


def test_backends_have_healthchecks_and_volumes():
    for name in ("db", "redis"):
        assert service(name).get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert service(name).get("volumes"), f"{name} keeps its data in no volume"


def test_app_services_are_built_from_the_dockerfile():
    for name in APP_SERVICES:
        build = service(name)["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        assert (ROOT / context / "Dockerfile").is_file()


def test_compose_config_is_valid():
    command = compose_command()
    if command is None:
        pytest.skip("no compose binary on PATH (neither `docker compose` nor `docker-compose`)")

    result = subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr


# --- README -------------------------------------------------------------------------------------


def test_readme_first_screen_shows_exactly_the_two_newcomer_commands():
    first_screen = readme_lines()[:README_FIRST_SCREEN_LINES]

    assert fenced_code_lines(first_screen) == ["make up", "make test"]


def test_every_variable_in_the_readme_table_is_read_by_the_code():
    documented = readme_configuration_variables()

    assert documented, "the README has no configuration table"
    unread = documented - variables_read_by_code()
    assert not unread, f"README documents variables no code reads: {sorted(unread)}"


def test_every_variable_the_code_reads_is_in_the_readme_table():
    undocumented = variables_read_by_code() - readme_configuration_variables()

    assert not undocumented, f"README's configuration table misses: {sorted(undocumented)}"
