from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.models import Tenant
from ledger.selectors import event_chain_verify


class Command(BaseCommand):
    help = "Walk each tenant's hash chain and report the first broken link. Exit 1 if any."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="Only this tenant (slug)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenants = Tenant.objects.order_by("slug")
        if options["tenant"]:
            tenants = tenants.filter(slug=options["tenant"])
            if not tenants.exists():
                raise CommandError(f"No tenant '{options['tenant']}'.")
        broken = []
        for tenant in tenants:
            report = event_chain_verify(tenant=tenant)
            if report.ok:
                self.stdout.write(f"{tenant.slug}: ok ({report.events_checked} events)")
            else:
                broken.append(tenant.slug)
                self.stdout.write(
                    f"{tenant.slug}: BROKEN at seq {report.first_broken_seq}: {report.reason} "
                    f"({report.events_checked} events verified before it)"
                )
        if broken:
            raise CommandError(f"Broken chains: {', '.join(broken)}", returncode=1)
