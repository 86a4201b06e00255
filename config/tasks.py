from __future__ import annotations

from celery import shared_task

from config.health import worker_heartbeat_record


@shared_task(name="config.tasks.worker_heartbeat", ignore_result=True)
def worker_heartbeat() -> None:
    worker_heartbeat_record()
