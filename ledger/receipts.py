"""Receipts: every request that appended events is answered with where the chain then stood.

``Ledger-Receipt: <tenant slug>:<seq>:<hash>`` names the newest event the request appended (one
entry per tenant, comma-separated, should a request ever append to several). The hash commits to
every event before it, so a client that keeps receipts can later ask whether the ledger still
holds exactly that history (``receipt_verify``, ``POST /api/v1/events/verify-receipt/``): a
receipt from before a truncated or rewritten tail no longer verifies, even if no checkpoint was
made in between. The client's copy is the one store an attacker inside our machine cannot reach.

``events_append`` calls ``receipt_record`` for every append; it is kept only once the
transaction commits (an append that rolls back gets no receipt), and only inside a request
(``LedgerReceiptMiddleware`` opens the collection; Celery tasks and commands have none).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial

from django.db import transaction
from django.http import HttpRequest, HttpResponseBase

from config.api import ApiError
from ledger.models import Tenant
from ledger.selectors import event_chain_verify, event_hash_at, event_head_seq

HEADER = "Ledger-Receipt"
_RECEIPT = re.compile(
    r"^(?P<tenant>[-a-zA-Z0-9_]+):(?P<seq>[1-9][0-9]{0,17}):(?P<hash>[0-9a-f]{64})$"
)

# The receipts of the request being answered, by tenant id; None outside a request.
_collected: ContextVar[dict[int, Receipt] | None] = ContextVar("ledger_receipts", default=None)


@dataclass(frozen=True)
class Receipt:
    tenant: str
    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.tenant}:{self.seq}:{self.hash}"


def receipt_parse(text: str) -> Receipt:
    match = _RECEIPT.match(text.strip())
    if match is None:
        raise ApiError(
            code="invalid_receipt",
            message="A receipt reads <tenant>:<seq>:<hash>, as the Ledger-Receipt header gave it.",
        )
    return Receipt(match["tenant"], int(match["seq"]), match["hash"])


def receipt_record(*, tenant: Tenant, seq: int, digest: str) -> None:
    """Note an append for the current request's receipt, once the transaction commits."""
    collected = _collected.get()
    if collected is None:
        return
    transaction.on_commit(partial(_keep, collected, tenant.pk, Receipt(tenant.slug, seq, digest)))


def _keep(collected: dict[int, Receipt], tenant_id: int, receipt: Receipt) -> None:
    current = collected.get(tenant_id)
    if current is None or current.seq < receipt.seq:
        collected[tenant_id] = receipt


class LedgerReceiptMiddleware:
    """Adds ``Ledger-Receipt`` to the answer of every request that appended events."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        collected: dict[int, Receipt] = {}
        token = _collected.set(collected)
        try:
            response = self.get_response(request)
        finally:
            _collected.reset(token)
        if collected:
            response[HEADER] = ", ".join(str(collected[key]) for key in sorted(collected))
        return response


@dataclass(frozen=True)
class ReceiptReport:
    """Whether the ledger still holds the history a receipt names. ``code`` is "" when it does,
    ``receipt_mismatch`` when the event at the receipt's seq has another hash (history up to it
    was rewritten), ``ledger_truncated`` when the chain no longer reaches it, else the code of the
    first break found in the chain up to it (``ChainReport``)."""

    ok: bool
    receipt: str
    code: str = ""
    reason: str = ""


def receipt_verify(*, tenant: Tenant, receipt: Receipt) -> ReceiptReport:
    if receipt.tenant != tenant.slug:
        raise ApiError(
            code="invalid_receipt",
            message="This receipt was not issued to your tenant.",
        )
    stored = event_hash_at(tenant=tenant, seq=receipt.seq)
    if stored is None:
        last = event_head_seq(tenant=tenant)
        if last < receipt.seq:
            return ReceiptReport(
                False,
                str(receipt),
                "ledger_truncated",
                f"The chain ends at event #{last}; the receipt's event #{receipt.seq} was removed.",
            )
        return ReceiptReport(
            False, str(receipt), "event_missing", f"Event #{receipt.seq} is missing."
        )
    if stored != receipt.hash:
        return ReceiptReport(
            False,
            str(receipt),
            "receipt_mismatch",
            f"Event #{receipt.seq} no longer has the hash of the receipt: the history up to it "
            "was rewritten.",
        )
    report = event_chain_verify(tenant=tenant, until_seq=receipt.seq)
    if not report.ok:
        return ReceiptReport(
            False,
            str(receipt),
            report.code,
            f"The chain before the receipt's event is broken at event #{report.first_broken_seq}:"
            f" {report.reason}.",
        )
    return ReceiptReport(True, str(receipt))
