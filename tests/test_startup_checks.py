"""A deployment the search cannot serve refuses to start, saying why (config/checks.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core import checks as django_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from config import checks
from memory.embeddings.local_embedder import DIMENSIONS

ROOT = Path(__file__).resolve().parent.parent


def deployment_errors(databases=None):
    return [
        message.msg
        for message in django_checks.run_checks(databases=databases, tags=[checks.TAG])
        if message.is_serious()
    ]


def test_every_vector_column_of_the_code_is_the_local_models_size():
    columns = checks.vector_columns()

    # Guards the finder: memories, KB chunks, dissents at least.
    assert {"memory_memory", "memory_knowledgechunk", "trust_dissentembedding"} <= {
        t for t, _, _ in columns
    }
    assert {dimensions for _, _, dimensions in columns} == {DIMENSIONS}


@pytest.mark.django_db
def test_the_shipped_deployment_passes_every_check():
    assert deployment_errors(databases=["default"]) == []
    checks.deployment_verify()


@pytest.mark.django_db
@pytest.mark.parametrize("backend", ["local", "openai"])
def test_other_embedding_dimensions_stop_the_service(settings, backend):
    settings.EMBEDDING_BACKEND = backend
    settings.EMBEDDING_DIMENSIONS = 768

    (error,) = deployment_errors()

    assert "EMBEDDING_DIMENSIONS=768" in error
    assert f"hold {DIMENSIONS} dimensions" in error
    with pytest.raises(checks.DeploymentMismatch, match="refuses to start"):
        checks.deployment_verify()


def test_runserver_and_every_command_hit_the_settings_check(settings):
    settings.EMBEDDING_DIMENSIONS = 1536

    with pytest.raises(SystemCheckError, match=r"agent_memory\.E001.*EMBEDDING_DIMENSIONS=1536"):
        call_command("check")


@pytest.mark.parametrize(
    ("version", "refused"),
    [("0.7.4", True), ("0.5.1", True), ("0.8.0", False), ("0.8.1", False), ("0.10.0", False)],
)
def test_pgvector_before_iterative_scans_is_refused(version, refused):
    problem = checks.pgvector_version_problem(version)

    assert (problem is not None) is refused
    if refused:
        assert f"pgvector {version} is too old" in problem
        assert "0.8.0" in problem


def test_a_server_without_pgvector_is_refused():
    assert "not available" in checks.pgvector_version_problem(None)


@pytest.mark.django_db
def test_the_version_is_read_from_the_server():
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        (installed,) = cursor.fetchone()

        assert checks.pgvector_version(cursor) == installed
    assert checks.pgvector_version_problem(installed) is None


@pytest.mark.django_db
def test_a_column_sized_otherwise_in_the_database_is_refused():
    # The code expecting 768 where the database (made by the migrations) holds vector(384).
    problems = checks.database_problems(columns=[("memory_memory", "embedding", 768)])

    (problem,) = problems
    assert "memory_memory.embedding is vector(384) in the database, vector(768) in the code" in (
        problem
    )


@pytest.mark.django_db
def test_the_test_database_has_no_migration_pending():
    # Else the column comparison above would have been skipped, proving nothing.
    assert checks.migrations_pending() is False


@pytest.mark.django_db
def test_tables_not_made_yet_pass():
    assert checks.database_problems(columns=[("not_migrated_yet", "embedding", 768)]) == []


def _start(
    command: list[str], tmp_path: Path, **overrides: str
) -> subprocess.CompletedProcess[str]:
    # Nothing to reach: the settings check alone must stop them, and the unreachable database
    # must not (an outage is no mismatch).
    env = {
        **os.environ,
        "EMBEDDING_DIMENSIONS": "768",
        "AGENT_MEMORY_DATA_DIR": str(tmp_path),
        "DATABASE_URL": "postgresql://nobody:nothing@127.0.0.1:9/nothing",
        "REDIS_URL": "redis://127.0.0.1:9/0",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        **overrides,
    }
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow
def test_gunicorn_and_runserver_stop_at_loading_the_application(tmp_path):
    result = _start([sys.executable, "-c", "import config.wsgi"], tmp_path)

    assert result.returncode != 0
    assert "refuses to start" in result.stderr
    assert "EMBEDDING_DIMENSIONS=768" in result.stderr


@pytest.mark.slow
def test_web_processes_hand_pythons_lock_over_within_a_millisecond(tmp_path):
    # A search beside a batch store in the same process waits for the lock at every return from
    # the database or the embedder (config/wsgi.py).
    result = _start(
        [sys.executable, "-c", "import sys, config.wsgi; print(sys.getswitchinterval())"],
        tmp_path,
        EMBEDDING_DIMENSIONS="384",
    )

    assert result.returncode == 0, result.stderr
    assert float(result.stdout.split()[-1]) == pytest.approx(0.001)


@pytest.mark.slow
def test_the_celery_worker_stops_before_taking_a_task(tmp_path):
    result = _start([sys.executable, "-m", "celery", "-A", "config", "worker"], tmp_path)

    assert result.returncode != 0
    assert "refuses to start" in result.stderr
    assert "EMBEDDING_DIMENSIONS=768" in result.stderr


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def _niceness(pid: int) -> int:
    # Field 19 of /proc/<pid>/stat; the command name (field 2) may hold spaces, so split after it.
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_a_worker_in_its_own_process_leaves_that_process_priority_alone(settings):
    # The solo pool (the tests' own worker) sends worker_process_init in the worker's main
    # process; only a forked pool process may lower its priority.
    from config import celery

    settings.WORKER_NICENESS = 10
    settings.BACKGROUND_IDLE_POLICY = True
    before = (os.nice(0), os.sched_getscheduler(0))
    celery._worker_main_recorded()
    celery._background_priority()

    assert (os.nice(0), os.sched_getscheduler(0)) == before


@pytest.mark.slow
@pytest.mark.parametrize("niceness", ["10"])
def test_the_workers_pool_runs_tasks_at_the_configured_niceness(tmp_path, niceness):
    env = {
        **os.environ,
        "WORKER_NICENESS": niceness,
        "BACKGROUND_IDLE_POLICY": "true",
        "AGENT_MEMORY_DATA_DIR": str(tmp_path),
        # The pool starts before the worker reaches its broker: nothing needs to answer.
        "DATABASE_URL": "postgresql://nobody:nothing@127.0.0.1:9/nothing",
        "REDIS_URL": "redis://127.0.0.1:9/0",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "prefork"]
    worker = subprocess.Popen(
        [*command, "--concurrency", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so the pool goes with it
    )
    try:
        deadline = time.monotonic() + 90
        while len(pool := _children(worker.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # worker_process_init runs just after the fork
        assert len(pool) == 2, "the worker's pool did not start"
        assert _niceness(worker.pid) == os.nice(0)
        assert os.sched_getscheduler(worker.pid) == os.sched_getscheduler(0)
        children = _children(worker.pid)
        assert [_niceness(child) for child in children] == [max(os.nice(0), int(niceness))] * 2
        # A request's thread takes the core from a task at once.
        assert [os.sched_getscheduler(child) for child in children] == [os.SCHED_IDLE] * 2
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
