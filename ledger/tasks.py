from __future__ import annotations

from celery import shared_task

from ledger.services import idempotency_records_expire


@shared_task(name="ledger.tasks.idempotency_records_expire", ignore_result=True, acks_late=True)
def idempotency_records_expire_task() -> int:
    return idempotency_records_expire()
