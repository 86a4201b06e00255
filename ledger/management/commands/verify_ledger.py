from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.database import database_role_warnings
from config.progress import json_option_add, json_summary_write, progress_bar, progress_print
from ledger.anchors import anchored_tenants_missing, chain_checkpoint
from ledger.models import ChainVerification, Tenant
from ledger.names import SYSTEM_ACTOR
from ledger.selectors import ChainReport, event_chain_verify
from ledger.verification import chain_verification_record


def _tenant_summary(slug: str, report: ChainReport, *, signed_now: bool) -> dict[str, Any]:
    return {
        "tenant": slug,
        "ok": report.ok,
        "events_checked": report.events_checked,
        "head_seq": report.head_seq,
        "checkpoint_seq": report.checkpoint_seq,
        "checkpoint_at": report.checkpoint_at.isoformat() if report.checkpoint_at else None,
        "checkpoint_signed_now": signed_now and report.ok,
        "first_broken_seq": report.first_broken_seq,
        "code": report.code,
        "reason": report.reason,
    }


class Command(BaseCommand):
    help = (
        "Walk each tenant's hash chain, hold it against its signed checkpoints, and report the "
        "first broken link (deleted or rewritten events, a truncated or rehashed tail). Exit 1 "
        "if any."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="Only this tenant (slug)")
        parser.add_argument(
            "--checkpoint",
            action="store_true",
            help="Also sign the head of every chain that verifies into its checkpoint file",
        )
        json_option_add(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        for line in database_role_warnings():
            self.stderr.write(line)
        tenants = Tenant.objects.order_by("slug")
        if options["tenant"]:
            tenants = tenants.filter(slug=options["tenant"])
            if not tenants.exists():
                raise CommandError(f"No tenant '{options['tenant']}'.")
        as_json = options["json"]
        summaries: list[dict[str, Any]] = []
        broken = []
        with progress_bar(total=tenants.count(), description="verify", unit="tenant") as bar:
            for tenant in tenants:
                clock = time.monotonic()
                if options["checkpoint"]:
                    report = chain_checkpoint(tenant=tenant, full=True)
                else:
                    report = event_chain_verify(tenant=tenant)
                # The ledger page's chain panel shows this outcome as the latest on-demand check.
                chain_verification_record(
                    tenant=tenant,
                    report=report,
                    source=ChainVerification.Source.COMMAND,
                    checked_by=SYSTEM_ACTOR,
                    seconds=time.monotonic() - clock,
                )
                bar.update()
                summaries.append(
                    _tenant_summary(tenant.slug, report, signed_now=options["checkpoint"])
                )
                if not report.ok:
                    broken.append(tenant.slug)
                if not as_json:
                    progress_print(
                        self.stdout, self._line(tenant.slug, report, options["checkpoint"])
                    )
        gone: list[dict[str, Any]] = []
        if not options["tenant"]:
            for tenant_id, missing in anchored_tenants_missing().items():
                broken.append(f"#{tenant_id}")
                gone.append(
                    {"tenant_id": tenant_id, "code": missing.code, "reason": missing.reason}
                )
                if not as_json:
                    self.stdout.write(
                        f"tenant #{tenant_id}: BROKEN [{missing.code}]: {missing.reason}"
                    )
        if as_json:
            json_summary_write(
                self,
                {
                    "ok": not broken,
                    "tenants": summaries,
                    "tenants_gone": gone,
                    "events_checked": sum(item["events_checked"] for item in summaries),
                },
            )
        if broken:
            raise CommandError(f"Broken chains: {', '.join(broken)}", returncode=1)

    @staticmethod
    def _line(slug: str, report: ChainReport, signed_now: bool) -> str:
        if not report.ok:
            return (
                f"{slug}: BROKEN at seq {report.first_broken_seq} [{report.code}]: "
                f"{report.reason} ({report.events_checked} events verified before it)"
            )
        if signed_now:
            anchored = f"checkpoint #{report.head_seq} signed now"
        elif report.checkpoint_at is not None:
            anchored = (
                f"checkpoint #{report.checkpoint_seq} signed "
                f"{report.checkpoint_at:%Y-%m-%d %H:%M} UTC"
            )
        else:
            anchored = "no checkpoint yet"
        return f"{slug}: ok ({report.events_checked} events, head #{report.head_seq}; {anchored})"
