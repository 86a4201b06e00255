from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init, worker_ready

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
