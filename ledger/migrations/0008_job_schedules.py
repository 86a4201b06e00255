"""Seed the default schedule of every background job (editable afterwards in the admin)."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def seed(apps: Any, schema_editor: Any) -> None:
    from ledger.jobs import job_schedules_ensure

    job_schedules_ensure(
        periodic_task=apps.get_model("django_celery_beat", "PeriodicTask"),
        interval_schedule=apps.get_model("django_celery_beat", "IntervalSchedule"),
        crontab_schedule=apps.get_model("django_celery_beat", "CrontabSchedule"),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0007_job_runs"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
