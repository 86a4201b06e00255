"""Changes to the background jobs' schedule made in the app (writes), with their ledger events.

What is safe here, and for whom (docs/jobs.md says the same): every job serves every tenant at
once (one decay sweep, one nightly chain verification for all), so a change made for one tenant
changes the service of all of them. The app therefore offers it only to a person who may already
make it for everyone: a tenant admin who is also staff with django-celery-beat's
``change_periodictask`` permission (the operator). A tenant admin without it reads the schedule
and changes nothing. Even the operator changes only what cannot hurt here: whether a job runs,
and its one interval or daily time within bounds; never the task a row runs, its arguments or
queue (the Django admin keeps those), and never pausing the two chain checks, whose silence
would hide tampering from every tenant. Each change is a ``job_schedule.updated`` event in every
tenant's ledger, since every tenant's service changed.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from rest_framework import status

from config.api import ApiError, Conflict
from ledger.jobs import CHAIN_VERIFY_JOB, CHECKPOINT_JOB, JOBS, Daily, Every
from ledger.models import Tenant
from ledger.services import event_append

JOB_SCHEDULE_UPDATED = "job_schedule.updated"
SCHEDULE_PERMISSION = "django_celery_beat.change_periodictask"
# Tamper evidence: these keep running whatever the app is asked.
JOBS_ALWAYS_ON = frozenset({CHAIN_VERIFY_JOB, CHECKPOINT_JOB})
EVERY_MINUTES_MAX = 24 * 60


def job_schedule_editable_by(*, user: AbstractBaseUser, role: str) -> bool:
    """A tenant admin who is staff allowed to change periodic tasks (see the module)."""
    return (
        role == "admin"
        and bool(getattr(user, "is_staff", False))
        and user.has_perm(SCHEDULE_PERMISSION)  # type: ignore[attr-defined]
    )


def _refused(message: str, code: str = "invalid_schedule") -> ApiError:
    return ApiError(code=code, message=message, status_code=status.HTTP_400_BAD_REQUEST)


def _describe(task: Any) -> dict[str, Any]:
    if task.interval is not None:
        return {"enabled": bool(task.enabled), "every_minutes": task.interval.every}
    return {
        "enabled": bool(task.enabled),
        "daily_at": f"{int(task.crontab.hour):02d}:{int(task.crontab.minute):02d}",
    }


def job_schedule_update(
    *,
    name: str,
    actor: str,
    enabled: bool,
    every_minutes: int | None = None,
    daily_at: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Set whether job ``name`` runs and its interval (an interval job) or its daily UTC time
    (a daily job). Returns the changes; no change, no event."""
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

    spec = JOBS.get(name)
    task = PeriodicTask.objects.select_related("interval", "crontab").filter(name=name).first()
    if spec is None or task is None:
        raise ApiError(
            code="not_found", message="No such job.", status_code=status.HTTP_404_NOT_FOUND
        )
    if not enabled and name in JOBS_ALWAYS_ON:
        raise Conflict(
            code="job_always_on",
            message=f"{name} checks every tenant's hash chain: it cannot be paused here.",
        )
    # A row an operator reshaped in the Django admin (a crontab on an interval job, several
    # hours) is left to the admin: the two fields here could not say what it does.
    if isinstance(spec.schedule, Every):
        if task.interval is None or task.interval.period != "minutes":
            raise _refused(f"{name}'s schedule was changed in the Django admin; edit it there.")
        if every_minutes is None or not 1 <= every_minutes <= EVERY_MINUTES_MAX:
            raise _refused(f"Every how many minutes: a whole number from 1 to {EVERY_MINUTES_MAX}.")
    elif isinstance(spec.schedule, Daily):
        if task.crontab is None or not (
            task.crontab.hour.isdigit() and task.crontab.minute.isdigit()
        ):
            raise _refused(f"{name}'s schedule was changed in the Django admin; edit it there.")
        if daily_at is None or not (0 <= daily_at[0] <= 23 and 0 <= daily_at[1] <= 59):
            raise _refused("The daily time is HH:MM in UTC.")
    before = _describe(task)
    with transaction.atomic():
        task.enabled = enabled
        if isinstance(spec.schedule, Every):
            task.interval, _ = IntervalSchedule.objects.get_or_create(
                every=every_minutes, period="minutes"
            )
        else:
            assert daily_at is not None
            task.crontab, _ = CrontabSchedule.objects.get_or_create(
                minute=str(daily_at[1]),
                hour=str(daily_at[0]),
                day_of_week="*",
                day_of_month="*",
                month_of_year="*",
                timezone="UTC",
            )
        after = _describe(task)
        changes = {key: value for key, value in after.items() if before.get(key) != value}
        if not changes:
            return {}
        # PeriodicTask.save() tells beat (PeriodicTasks.changed), which reloads within seconds.
        task.save()
        payload = {"job": name, "changes": changes, "previous": before}
        # Ascending ids, as tenant write locks are taken when several are (ledger.services).
        for tenant in Tenant.objects.order_by("pk"):
            event_append(tenant=tenant, kind=JOB_SCHEDULE_UPDATED, actor=actor, payload=payload)
    return changes
