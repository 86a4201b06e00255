from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.database import database_role_warnings
from ledger.anchors import anchored_tenants_missing, chain_checkpoint
from ledger.models import ChainVerification, Tenant
from ledger.names import SYSTEM_ACTOR
from ledger.selectors import event_chain_verify
from ledger.verification import chain_verification_record


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

    def handle(self, *args: Any, **options: Any) -> None:
        for line in database_role_warnings():
            self.stderr.write(line)
        tenants = Tenant.objects.order_by("slug")
        if options["tenant"]:
            tenants = tenants.filter(slug=options["tenant"])
            if not tenants.exists():
                raise CommandError(f"No tenant '{options['tenant']}'.")
        broken = []
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
            if report.ok:
                if options["checkpoint"]:
                    anchored = f"checkpoint #{report.head_seq} signed now"
                elif report.checkpoint_at is not None:
                    anchored = (
                        f"checkpoint #{report.checkpoint_seq} signed "
                        f"{report.checkpoint_at:%Y-%m-%d %H:%M} UTC"
                    )
                else:
                    anchored = "no checkpoint yet"
                self.stdout.write(
                    f"{tenant.slug}: ok ({report.events_checked} events, head #{report.head_seq}; "
                    f"{anchored})"
                )
            else:
                broken.append(tenant.slug)
                self.stdout.write(
                    f"{tenant.slug}: BROKEN at seq {report.first_broken_seq} [{report.code}]: "
                    f"{report.reason} ({report.events_checked} events verified before it)"
                )
        if not options["tenant"]:
            for tenant_id, gone in anchored_tenants_missing().items():
                broken.append(f"#{tenant_id}")
                self.stdout.write(f"tenant #{tenant_id}: BROKEN [{gone.code}]: {gone.reason}")
        if broken:
            raise CommandError(f"Broken chains: {', '.join(broken)}", returncode=1)
