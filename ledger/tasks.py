from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from celery import Task, shared_task

from ledger.jobs import (
    CHAIN_VERIFY_JOB,
    JOB_TASK_OPTIONS,
    Batch,
    JobFailed,
    job_progress,
    job_task_run,
)
from ledger.models import Tenant
from ledger.selectors import event_chain_verify
from ledger.services import idempotency_records_expire


@shared_task(name="ledger.tasks.idempotency_records_expire", **JOB_TASK_OPTIONS)
def idempotency_records_expire_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self,
        name="ledger.idempotency_expiry",
        batches=lambda: iter([Batch(rows=idempotency_records_expire(), more=False)]),
    )


def _chain_batches() -> Iterator[Batch]:
    """One tenant's chain per batch (verification streams it), resuming an unfinished run.

    A broken chain does not stop the walk: every tenant is checked, then the run fails naming how
    many chains broke; which tenants and where go to the operator only (``details``).
    """
    progress = job_progress(CHAIN_VERIFY_JOB)
    resume = not progress.get("done", True)
    after = int(progress.get("after_tenant", 0)) if resume else 0
    broken: list[dict[str, Any]] = list(progress.get("broken", [])) if resume else []
    for tenant in Tenant.objects.filter(pk__gt=after).order_by("pk"):
        report = event_chain_verify(tenant=tenant)
        if not report.ok:
            broken.append(
                {"tenant_id": tenant.pk, "seq": report.first_broken_seq, "reason": report.reason}
            )
        yield Batch(
            rows=report.events_checked,
            more=True,
            details={"after_tenant": tenant.pk, "broken": broken, "done": False},
        )
    if broken:
        raise JobFailed(f"{len(broken)} hash chain(s) broken", {"broken": broken, "done": True})
    yield Batch(rows=0, more=False, details={"done": True})


@shared_task(name="ledger.tasks.event_chains_verify", **JOB_TASK_OPTIONS)
def event_chains_verify_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(self, name=CHAIN_VERIFY_JOB, batches=_chain_batches)
