"""The background jobs through real Celery: the test worker, a worker process killed with SIGKILL
mid-job, and a real beat process firing a job from the database schedule.

Boundaries of the clock (exactly at the deadline, just before, just after) are tested on the
services themselves: tests/memory/test_lifecycle.py (decay, TTL) and tests/trust/test_services.py
(regret inference).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from ledger.jobs import JOBS, job_schedules_ensure
from ledger.models import Event, JobRun
from memory.episodic.services import MemoryDraft, memories_store
from memory.models import Memory
from memory.tasks import (
    memories_decay_task,
    memories_enforce_quota_task,
    memories_expire_task,
)

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

# A queue of this test run's own, so a message left unacknowledged by an earlier run's killed
# worker (Redis redelivers those after an hour) never reaches this one.
KILL_QUEUE = f"jobs-kill-test-{os.getpid()}"


@pytest.fixture
def agent(tenant, make_agent, no_embedder):
    return make_agent(tenant, name="Creator1")


def clone(template: Memory, count: int, **columns: Any) -> None:
    """``count`` copies of a stored memory, set-based; ``columns`` overrides some values."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'memory_memory' AND column_name <> 'id'"
            " AND is_generated = 'NEVER'"
        )
        names = [row[0] for row in cursor.fetchall()]
        values = [f"%({name})s" if name in columns else name for name in names]
        cursor.execute(
            f"INSERT INTO memory_memory ({', '.join(names)})"  # noqa: S608 (catalog names)
            f" SELECT {', '.join(values)} FROM memory_memory, generate_series(1, %(n)s)"
            " WHERE id = %(template)s",
            {**columns, "n": count, "template": template.pk},
        )


def seeded(agent) -> None:
    """Work for all three lifecycle jobs: decayed, expired and over-quota memories."""
    now = timezone.now()
    (template,) = memories_store(
        agent=agent, drafts=[MemoryDraft(content="m", importance=0.9)], actor="x"
    )
    clone(template, 30, created_at=now - timedelta(weeks=60), importance=0.5)
    clone(template, 20, expires_at=now - timedelta(minutes=1))
    clone(template, 25, importance=0.7)


def state() -> tuple[list[tuple[Any, ...]], int]:
    memories = list(Memory.objects.order_by("pk").values_list("pk", "archived_at"))
    return memories, Event.objects.count()


def runs_of(name: str) -> list[str]:
    return list(JobRun.objects.filter(job=name).order_by("pk").values_list("status", flat=True))


def wait_for(predicate: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


LIFECYCLE = [
    (memories_decay_task, "memory.decay"),
    (memories_expire_task, "memory.ttl"),
    (memories_enforce_quota_task, "memory.quota"),
]


@pytest.mark.parametrize(("task", "name"), LIFECYCLE, ids=[name for _, name in LIFECYCLE])
def test_a_job_run_twice_by_the_worker_leaves_the_state_of_one_run(
    task, name, agent, celery_worker, settings
):
    settings.MEMORY_QUOTA_PER_AGENT = 40
    seeded(agent)

    task.delay()
    wait_for(lambda: runs_of(name) == ["succeeded"])
    once = state()
    task.delay()
    wait_for(lambda: runs_of(name) == ["succeeded", "succeeded"])

    assert state() == once
    touched = list(JobRun.objects.filter(job=name).order_by("pk").values_list("rows_touched"))
    assert touched[0][0] > 0
    assert touched[1][0] == 0


@pytest.mark.parametrize(("task", "name"), LIFECYCLE, ids=[name for _, name in LIFECYCLE])
def test_two_runs_at_once_leave_the_state_of_one_run(task, name, agent, settings):
    settings.MEMORY_QUOTA_PER_AGENT = 40
    seeded(agent)
    start = threading.Barrier(2)

    def run() -> None:
        try:
            start.wait(10)
            task.apply()
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    both = state()
    task.apply()  # what one more run finds left: nothing

    assert state() == both
    rows = sorted(JobRun.objects.filter(job=name).values_list("status", "rows_touched"))
    touched = [count for status, count in rows if status == "succeeded"]
    # One run did the work; the other was skipped at the lock or found nothing left.
    assert sorted(touched)[-1] > 0
    assert sum(touched) == sorted(touched)[-1]


def test_every_job_runs_through_the_worker(agent, celery_worker):
    from config.celery import app

    for spec in JOBS.values():
        app.send_task(spec.task)

    wait_for(lambda: set(JobRun.objects.values_list("job", flat=True)) == set(JOBS), 120)
    wait_for(lambda: not JobRun.objects.filter(status="running").exists())
    assert set(JobRun.objects.values_list("status", flat=True)) == {"succeeded"}


# --- A worker process killed mid-job ---------------------------------------------------------


def _worker_env(**extra: str) -> dict[str, str]:
    database = connection.settings_dict
    url = (
        f"postgresql://{urllib.parse.quote(str(database['USER']))}"
        f":{urllib.parse.quote(str(database['PASSWORD'] or ''), safe='')}@"
        f"{urllib.parse.quote(str(database['HOST']), safe='')}"
        f"{':' + str(database['PORT']) if database['PORT'] else ''}/{database['NAME']}"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "AGENT_MEMORY_DATA_DIR": str(Path(settings.DATA_DIR).resolve()),
            "DATABASE_URL": url,
            "REDIS_URL": settings.REDIS_URL,
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
    )
    return env


_worker_names = itertools.count()


def _worker(queue: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    # The solo pool runs the task in the worker process itself, so SIGKILL stops the task too.
    return subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo",
            "--queues", queue, "--hostname", f"kill-test-{os.getpid()}-{next(_worker_names)}@%h",
            "--without-mingle", "--without-gossip", "--loglevel", "INFO",
        ],
        cwd=settings.BASE_DIR,
        env=_worker_env(**env),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def test_a_worker_killed_mid_job_leaves_work_the_next_run_completes_exactly_once(agent, tmp_path):
    batch = 500
    now = timezone.now()
    (template,) = memories_store(
        agent=agent, drafts=[MemoryDraft(content="m", importance=0.9)], actor="x"
    )
    clone(template, 20_000, created_at=now - timedelta(weeks=60), importance=0.5)
    log = tmp_path / "worker.log"
    worker = _worker(KILL_QUEUE, log, JOB_BATCH_SIZE=str(batch))
    try:
        memories_decay_task.apply_async(queue=KILL_QUEUE)
        wait_for(
            lambda: JobRun.objects.filter(
                job="memory.decay", status="running", rows_touched__gte=4 * batch
            ).exists(),
            120,
        )
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    finally:
        _stop(worker)
    archived_at_kill = Memory.objects.filter(archived_at__isnull=False).count()
    # The batch in flight rolled back whole: only complete batches were kept.
    assert 0 < archived_at_kill < 20_000
    assert archived_at_kill % batch == 0, archived_at_kill

    restarted = _worker(KILL_QUEUE, log, JOB_BATCH_SIZE=str(batch))
    try:
        memories_decay_task.apply_async(queue=KILL_QUEUE)  # the next scheduled run
        wait_for(lambda: runs_of("memory.decay") == ["abandoned", "succeeded"], 180)
    finally:
        _stop(restarted)

    archived = set(Memory.objects.filter(archived_at__isnull=False).values_list("pk", flat=True))
    assert len(archived) == 20_000
    assert not Memory.objects.filter(archived_at__isnull=True, importance=0.5).exists()
    logged = [
        memory_id
        for payload in Event.objects.filter(kind="memory.archived").values_list(
            "payload", flat=True
        )
        for memory_id in payload["memory_ids"]
    ]
    assert len(logged) == len(set(logged)) == 20_000  # nothing logged twice, nothing missed
    assert set(logged) == archived
    last = JobRun.objects.filter(job="memory.decay").order_by("pk").last()
    assert last is not None
    assert last.rows_touched == 20_000 - archived_at_kill


# --- Beat ------------------------------------------------------------------------------------


def test_beat_fires_a_job_from_the_database_schedule(celery_worker, tmp_path):
    job_schedules_ensure()
    PeriodicTask.objects.filter(name__in=list(JOBS)).update(enabled=False)
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period="seconds")
    task = PeriodicTask.objects.get(name="ledger.idempotency_expiry")
    task.interval = every_second
    task.enabled = True
    task.save()
    log = tmp_path / "beat.log"
    beat = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
            "--scheduler", settings.CELERY_BEAT_SCHEDULER, "--pidfile=",
        ],
        cwd=settings.BASE_DIR,
        env=_worker_env(),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: len(runs_of("ledger.idempotency_expiry")) >= 2, 60)
    finally:
        _stop(beat)

    assert set(runs_of("ledger.idempotency_expiry")) <= {"succeeded", "skipped"}
    assert not JobRun.objects.exclude(job="ledger.idempotency_expiry").exists()
