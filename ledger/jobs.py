"""Background jobs (SPEC 9): the registry, the runner that records every run, and the schedule.

A job is a generator of bounded batches: each batch is one short transaction in the owning app's
service (set-based SQL, conditions re-checked by the UPDATE/DELETE itself), and yields how many
rows it touched and whether work is left. ``job_run`` drives it:

- It takes a PostgreSQL advisory lock per job with ``pg_try_advisory_lock``. A second run of the
  same job while one holds the lock does nothing and is recorded as ``skipped``; the services'
  conditional writes make even an overlapping run safe, the lock only saves the wasted work.
  The lock is session-level, so a worker killed with SIGKILL releases it when PostgreSQL sees its
  connection close.
- It loops over batches within a time budget (``JOB_TIME_BUDGET_SECONDS``) and, when the budget
  runs out with work left, says so: the task then queues its own continuation (saleor's
  "bounded batches that re-queue themselves"). Each batch commits on its own, so a killed run
  keeps every batch it finished and loses only the one in flight, which rolled back.
- It records start, end, rows touched, duration and error in a ``JobRun`` row, and updates the
  row count after every batch so a long run shows progress. A run found still ``running`` by the
  next holder of the lock died mid-run and is marked ``abandoned``.

Each app registers its jobs (``job_register``) in its ``AppConfig.ready``, with the spec kept as
a constant beside the task it names, so the ledger app depends on no other app.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from celery import Task
from django.conf import settings
from django.db import connection
from django.utils import timezone

from ledger.models import JobRun, Tenant

logger = logging.getLogger(__name__)

# The Celery options of every job task. Every job is safe to repeat (conditional writes in short
# transactions), so a message is acknowledged only after the task ran: a worker killed mid-run
# leaves it to be delivered again, and the redelivered run finds the finished batches done.
JOB_TASK_OPTIONS: dict[str, Any] = {
    "bind": True,
    "acks_late": True,
    "ignore_result": True,
    "soft_time_limit": settings.JOB_SOFT_TIME_LIMIT_SECONDS,
    "time_limit": settings.JOB_HARD_TIME_LIMIT_SECONDS,
}

# A job that failed (or died) in each of its last this-many runs is unhealthy in /healthz.
UNHEALTHY_AFTER_FAILURES = 3
LAST_RUNS_SHOWN = 5
RUNS_KEPT_DAYS = 30
CHAIN_VERIFY_JOB = "ledger.chain_verify"
CHECKPOINT_JOB = "ledger.checkpoint"


class Batch(NamedTuple):
    rows: int
    more: bool
    # Where the job got to (a watermark), kept with the run so the next run starts from there.
    details: dict[str, Any] | None = None


class JobFailed(Exception):
    """Raised by a job that finished its work but found something wrong (a broken chain).

    ``message`` must not name a tenant (every tenant's admins read it through the API);
    ``details`` goes to the operator only.
    """

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


@dataclass(frozen=True)
class Every:
    """An interval schedule, seeded as a django-celery-beat IntervalSchedule."""

    minutes: int


@dataclass(frozen=True)
class Daily:
    """A once-a-day schedule at hour:minute UTC, seeded as a CrontabSchedule."""

    hour: int
    minute: int = 0


@dataclass(frozen=True)
class JobSpec:
    name: str
    task: str
    description: str
    schedule: Every | Daily


# Every job of every app, by name. Each app registers its own in ``AppConfig.ready`` (so this
# module names no task of memory or trust); admins change the default schedules in the Django
# admin (Periodic tasks) without a deploy.
JOBS: dict[str, JobSpec] = {}


def job_register(*specs: JobSpec) -> None:
    """Add jobs to the registry. Registering the same spec again (a second ``ready``) is a no-op;
    another spec under a taken name is a programming error."""
    for spec in specs:
        known = JOBS.setdefault(spec.name, spec)
        if known != spec:
            raise ValueError(f"job {spec.name!r} is already registered as {known!r}")


CHAIN_VERIFY = JobSpec(
    CHAIN_VERIFY_JOB,
    "ledger.tasks.event_chains_verify",
    "Verify every tenant's hash chain against its checkpoints and sign the verified head; "
    "a broken chain fails the run.",
    Daily(hour=3),
)
CHECKPOINT = JobSpec(
    CHECKPOINT_JOB,
    "ledger.tasks.chains_checkpoint",
    "Verify what each chain appended since its last checkpoint and sign its head into "
    "the checkpoint files outside the database.",
    Every(minutes=5),
)
IDEMPOTENCY_EXPIRY = JobSpec(
    "ledger.idempotency_expiry",
    "ledger.tasks.idempotency_records_expire",
    "Delete Idempotency-Key records past their lifetime.",
    Every(minutes=60),
)


@dataclass
class JobOutcome:
    job: str
    status: str
    rows: int = 0
    more: bool = False
    error: str = ""


def _lock_key(name: str) -> str:
    return f"agent-memory:job:{name}"


def _try_lock(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [_lock_key(name)])
        return bool(cursor.fetchone()[0])


def _unlock(name: str) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [_lock_key(name)])
    except Exception:  # a dead connection released the lock already
        logger.warning("could not release the lock of job %s", name, exc_info=True)
        connection.close()


def job_run(
    *,
    name: str,
    batches: Callable[[], Iterator[Batch]],
    budget_seconds: float | None = None,
) -> JobOutcome:
    """Run one job under its lock, batch after batch within the budget; record the run."""
    budget = settings.JOB_TIME_BUDGET_SECONDS if budget_seconds is None else budget_seconds
    locked = _try_lock(name)
    # The clock is read once the lock is held, so a run's recorded interval lies inside its hold
    # of the lock and two runs of one job never overlap in JobRun (bench/cluster.py checks it).
    started = timezone.now()
    if not locked:
        JobRun.objects.create(
            job=name,
            status=JobRun.Status.SKIPPED,
            started_at=started,
            finished_at=started,
            duration_seconds=0.0,
        )
        return JobOutcome(job=name, status=JobRun.Status.SKIPPED)
    clock = time.monotonic()
    try:
        # We hold the lock, so any run still marked running lost its worker mid-run.
        JobRun.objects.filter(job=name, status=JobRun.Status.RUNNING).update(
            status=JobRun.Status.ABANDONED,
            finished_at=started,
            error="the worker stopped mid-run; a later run continues the work",
        )
        # Runs are kept for a while, not forever: about 800 rows a day across the jobs.
        JobRun.objects.filter(
            job=name, started_at__lt=started - timedelta(days=RUNS_KEPT_DAYS)
        ).delete()
        run = JobRun.objects.create(job=name, status=JobRun.Status.RUNNING, started_at=started)
        rows = 0
        more = False
        progress: dict[str, Any] = {}
        try:
            for batch in batches():
                rows += batch.rows
                more = batch.more
                if batch.details is not None:
                    progress = batch.details
                # Committed after each batch, which committed first: the progress never claims
                # work a killed run did not keep.
                JobRun.objects.filter(pk=run.pk).update(rows_touched=rows, details=progress)
                if more and time.monotonic() - clock >= budget:
                    break
            else:
                more = False
        except JobFailed as exc:
            _finish(
                run,
                JobRun.Status.FAILED,
                rows,
                clock,
                error=exc.message,
                details={**progress, **exc.details},
            )
            return JobOutcome(job=name, status=JobRun.Status.FAILED, rows=rows, error=exc.message)
        except BaseException as exc:
            # The API shows the exception's type only: its message may carry tenant data.
            _finish(
                run,
                JobRun.Status.FAILED,
                rows,
                clock,
                error=type(exc).__name__,
                details={**progress, "traceback": traceback.format_exc()[-8000:]},
            )
            raise
        _finish(run, JobRun.Status.SUCCEEDED, rows, clock, details=progress, requeued=more)
        return JobOutcome(job=name, status=JobRun.Status.SUCCEEDED, rows=rows, more=more)
    finally:
        _unlock(name)


def _finish(
    run: JobRun,
    status: str,
    rows: int,
    clock: float,
    *,
    error: str = "",
    details: dict[str, Any] | None = None,
    requeued: bool = False,
) -> None:
    try:
        JobRun.objects.filter(pk=run.pk).update(
            status=status,
            finished_at=timezone.now(),
            rows_touched=rows,
            duration_seconds=round(time.monotonic() - clock, 3),
            error=error,
            details=details or {},
            requeued=requeued,
        )
    except Exception:  # the database itself failed: the next run marks this one abandoned
        logger.exception("could not record the end of job run %s", run.pk)


def job_task_run(
    task: Task[Any, Any], *, name: str, batches: Callable[[], Iterator[Batch]]
) -> dict[str, Any]:
    """The body of every job task: run the job, and queue its continuation if work is left.

    The continuation goes back to the queue the task came from, so a worker serving a dedicated
    queue keeps its job there.
    """
    outcome = job_run(name=name, batches=batches)
    if outcome.more:
        delivery = getattr(task.request, "delivery_info", None) or {}
        queue = delivery.get("routing_key")
        # With the Redis transport a queue's routing key is its name.
        if queue:
            task.apply_async(queue=str(queue))
        else:
            task.apply_async()
    return {
        "job": outcome.job,
        "status": outcome.status,
        "rows": outcome.rows,
        "more": outcome.more,
    }


def job_progress(name: str) -> dict[str, Any]:
    """The progress the job's latest run recorded (its watermark), whatever way it ended."""
    details = (
        JobRun.objects.filter(job=name)
        .exclude(details={})
        .order_by("-started_at", "-pk")
        .values_list("details", flat=True)
        .first()
    )
    return dict(details) if isinstance(details, dict) else {}


def job_task_sweep(
    task: Task[Any, Any], *, name: str, service: Callable[..., int]
) -> dict[str, Any]:
    """A job task over a service taking ``batch_size``, called until a batch comes back short."""
    return job_task_run(
        task,
        name=name,
        batches=lambda: batches_until_short(
            lambda n: service(batch_size=n), batch_size=settings.JOB_BATCH_SIZE
        ),
    )


def batches_until_short(step: Callable[[int], int], *, batch_size: int) -> Iterator[Batch]:
    """Call a bounded service until a batch comes back short (nothing, or the last few rows)."""
    while True:
        rows = step(batch_size)
        more = rows >= batch_size
        yield Batch(rows=rows, more=more)
        if not more:
            return


# --- Schedule ---------------------------------------------------------------------------------


def job_schedules_ensure(
    *, periodic_task: Any = None, interval_schedule: Any = None, crontab_schedule: Any = None
) -> int:
    """Create the periodic task of every registered job that has none yet; returns how many.

    Existing rows are left alone, so an admin's edits survive restarts; a job is stopped by
    disabling its row, since a deleted row comes back with its default schedule. Takes the model
    classes so a data migration can pass its historical ones.
    """
    if periodic_task is None:
        from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

        periodic_task, interval_schedule, crontab_schedule = (
            PeriodicTask,
            IntervalSchedule,
            CrontabSchedule,
        )
    created = 0
    for spec in JOBS.values():
        if periodic_task.objects.filter(name=spec.name).exists():
            continue
        fields: dict[str, Any] = {
            "name": spec.name,
            "task": spec.task,
            "description": spec.description,
        }
        if isinstance(spec.schedule, Every):
            fields["interval"], _ = interval_schedule.objects.get_or_create(
                every=spec.schedule.minutes, period="minutes"
            )
        else:
            fields["crontab"], _ = crontab_schedule.objects.get_or_create(
                minute=str(spec.schedule.minute),
                hour=str(spec.schedule.hour),
                day_of_week="*",
                day_of_month="*",
                month_of_year="*",
                timezone="UTC",
            )
        periodic_task.objects.create(**fields)
        created += 1
    return created


# --- Status -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobStatus:
    name: str
    task: str
    description: str
    schedule: str
    enabled: bool
    next_due_at: datetime | None
    last_runs: list[JobRun]
    healthy: bool


def _unhealthy(runs: list[JobRun]) -> bool:
    finished = [
        run for run in runs if run.status not in (JobRun.Status.SKIPPED, JobRun.Status.RUNNING)
    ][:UNHEALTHY_AFTER_FAILURES]
    return len(finished) == UNHEALTHY_AFTER_FAILURES and all(
        run.status in (JobRun.Status.FAILED, JobRun.Status.ABANDONED) for run in finished
    )


def _recent_runs(name: str, limit: int) -> list[JobRun]:
    return list(JobRun.objects.filter(job=name).order_by("-started_at", "-pk")[:limit])


def jobs_failing() -> list[str]:
    """Jobs whose last three finished runs all failed or died (skipped runs do not count)."""
    return [
        name
        for name in JOBS
        # Skipped runs are cheap rows; 20 leaves room for many of them between real runs.
        if _unhealthy(_recent_runs(name, 20))
    ]


def _next_due(task: Any, now: datetime) -> datetime | None:
    """When beat next sends the task, computed as beat does (django_celery_beat ModelEntry):
    a task that never ran counts from when its row last changed, so a daily cron created at
    06:00 is next due at its hour tomorrow, not "now"; before a future start_time, that time."""
    if not task.enabled:
        return None
    if task.last_run_at is None and task.start_time is not None and task.start_time > now:
        return task.start_time  # type: ignore[no-any-return]
    last = task.last_run_at or task.date_changed or now
    remaining: timedelta = task.schedule.remaining_estimate(last)
    # Celery measures ``remaining`` from its own clock, read a moment after ``now``: rounded to
    # the second, a 03:00 run reads 03:00, not 02:59:59.98.
    due = now + remaining + timedelta(milliseconds=500)
    return max(now, due.replace(microsecond=0))


def job_periodic_tasks() -> dict[str, Any]:
    """The beat rows (PeriodicTask, with their schedules) of the registered jobs, by name."""
    from django_celery_beat.models import PeriodicTask

    rows = PeriodicTask.objects.filter(name__in=list(JOBS)).select_related("interval", "crontab")
    return {task.name: task for task in rows}


def job_statuses(*, now: datetime | None = None) -> list[JobStatus]:
    """Every registered job: its schedule as beat has it, its last runs, when it is next due."""
    moment = now or timezone.now()
    periodic = job_periodic_tasks()
    statuses = []
    for name, spec in JOBS.items():
        task = periodic.get(name)
        runs = _recent_runs(name, 20)
        if task is None:
            schedule, enabled, next_due = "not scheduled", False, None
        else:
            schedule = str(task.interval or task.crontab or "one-off")
            enabled, next_due = bool(task.enabled), _next_due(task, moment)
        statuses.append(
            JobStatus(
                name=name,
                task=spec.task,
                description=spec.description,
                schedule=schedule,
                enabled=enabled,
                next_due_at=next_due,
                last_runs=runs[:LAST_RUNS_SHOWN],
                healthy=not _unhealthy(runs),
            )
        )
    return statuses


@dataclass(frozen=True)
class ChainCheck:
    """What the nightly chain verification last said about one tenant's chain."""

    # "verified", "broken", "unchecked" (no finished check covered the tenant yet) or "failed"
    # (the last check stopped with an error before it could say).
    state: str
    checked_at: datetime | None = None
    broken_seq: int | None = None
    reason: str = ""
    running_since: datetime | None = None


def chain_check_status(*, tenant: Tenant, job: str = CHAIN_VERIFY_JOB) -> ChainCheck:
    """The tenant's chain as of the last complete run of ``job`` (the nightly verification, or
    the frequent checkpoint job, which checks what was appended since the last checkpoint).

    A complete run (``details.done``) walked every tenant and lists the broken ones; only this
    tenant's entry is read, so nothing about another tenant shows. Two index reads of JobRun.
    """
    runs = JobRun.objects.filter(job=job).order_by("-started_at", "-pk")
    latest = runs.exclude(status=JobRun.Status.SKIPPED).first()
    running_since = latest.started_at if latest and latest.status == JobRun.Status.RUNNING else None
    complete = runs.filter(
        status__in=[JobRun.Status.SUCCEEDED, JobRun.Status.FAILED], details__done=True
    ).first()
    if complete is None or complete.started_at < tenant.created_at:
        if latest is not None and latest.status == JobRun.Status.FAILED and not running_since:
            return ChainCheck("failed", checked_at=latest.finished_at, reason=latest.error)
        return ChainCheck("unchecked", running_since=running_since)
    for broken in complete.details.get("broken", []):
        if broken.get("tenant_id") == tenant.pk:
            return ChainCheck(
                "broken",
                checked_at=complete.finished_at,
                broken_seq=broken.get("seq"),
                reason=str(broken.get("reason", "")),
                running_since=running_since,
            )
    return ChainCheck("verified", checked_at=complete.finished_at, running_since=running_since)
