from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import (
    before_task_publish,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_ready,
)

from config import logs
from config.cpu_priority import background_priority_take

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agent_memory")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.imports = ("config.tasks",)
app.autodiscover_tasks()


@worker_ready.connect
def _beat_on_start(**_: object) -> None:
    # A heartbeat right away, so /healthz sees the worker without waiting for beat's first tick.
    app.send_task("config.tasks.worker_heartbeat")


@worker_init.connect
def _verify_deployment(**_: object) -> None:
    # Celery logs and swallows an exception from a signal handler; SystemExit stops the worker.
    from django.db import connections

    from config.checks import DeploymentMismatch, deployment_verify

    try:
        deployment_verify()
    except DeploymentMismatch as exc:
        raise SystemExit(str(exc)) from exc
    finally:
        # The prefork pool forks after this: a connection shared by the children would mix
        # their queries on one socket.
        connections.close_all()


# The worker's main process, recorded at worker_init: the solo pool sends worker_process_init
# in it too, and a worker started inside another program (the tests' solo worker) must not
# lower that program's priority.
_worker_main_pid = 0


@worker_init.connect
def _worker_main_recorded(**_: object) -> None:
    global _worker_main_pid
    _worker_main_pid = os.getpid()


@worker_process_init.connect
def _background_priority(**_: object) -> None:
    # Only forked pool processes, which run the tasks; the main process keeps its priority.
    from django.conf import settings

    if os.getpid() != _worker_main_pid:
        background_priority_take(settings.WORKER_NICENESS)


@worker_process_init.connect
def _tracing_started(**_: object) -> None:
    from config.tracing import tracing_start

    tracing_start()


@before_task_publish.connect
def _request_id_sent(headers: dict[str, Any] | None = None, **_: object) -> None:
    if headers is not None:
        logs.task_headers_add(headers)


# Task metrics (config.metrics), imported on first use: that module reads the settings, which are
# not loaded yet when this one is imported. The request id the message carried is the task's
# while it runs (and is cleared after, the worker's next task may have none).
@task_prerun.connect
def _task_started(task_id: str = "", task: Any = None, **_: object) -> None:
    from config import metrics

    metrics.celery_task_started(task_id)
    logs.request_id_set(logs.task_request_id(task))


@task_postrun.connect
def _task_finished(task_id: str = "", task: Any = None, state: str = "", **_: object) -> None:
    from config import metrics

    metrics.celery_task_finished(task_id=task_id, task_name=getattr(task, "name", "?"), state=state)
    logs.request_id_set("")
