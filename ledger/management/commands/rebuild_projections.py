from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from config.progress import json_option_add, json_summary_write, progress_bar, progress_print
from ledger.models import Tenant
from ledger.projections import projection_rebuild, registered_projections


class _DryRunRollback(Exception):
    pass


class Command(BaseCommand):
    help = (
        "Replay the ledger into every registered projection (agents, memories, trust, indexes) "
        "and report whether each came out equal to what was there."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="Only this tenant (slug)")
        parser.add_argument("--projection", action="append", help="Only these projections")
        parser.add_argument(
            "--check",
            action="store_true",
            help="Rebuild inside a transaction that is rolled back; exit 1 if anything differs",
        )
        json_option_add(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        projections = registered_projections()
        if options["projection"]:
            wanted = set(options["projection"])
            unknown = wanted - {projection.name for projection in projections}
            if unknown:
                names = ", ".join(p.name for p in projections)
                raise CommandError(f"Unknown projection(s) {sorted(unknown)}; known: {names}")
            projections = [p for p in projections if p.name in wanted]
        tenants = Tenant.objects.order_by("slug")
        if options["tenant"]:
            tenants = tenants.filter(slug=options["tenant"])
        as_json = options["json"]
        results: list[dict[str, Any]] = []
        differing: list[str] = []
        total = tenants.count() * len(projections)
        try:
            with (
                transaction.atomic(),
                progress_bar(total=total, description="rebuild", unit="projection") as bar,
            ):
                for tenant in tenants:
                    for projection in projections:
                        equal = projection_rebuild(projection=projection, tenant=tenant)
                        bar.update()
                        results.append(
                            {"tenant": tenant.slug, "projection": projection.name, "equal": equal}
                        )
                        if not equal:
                            differing.append(f"{tenant.slug}/{projection.name}")
                        if not as_json:
                            verdict = "unchanged" if equal else "DIFFERED from the ledger"
                            progress_print(
                                self.stdout, f"{tenant.slug} / {projection.name}: {verdict}"
                            )
                if options["check"]:
                    raise _DryRunRollback
        except _DryRunRollback:
            if not as_json:
                self.stdout.write("--check: rolled back, nothing written.")
        if as_json:
            json_summary_write(
                self,
                {
                    "check": options["check"],
                    "written": not options["check"],
                    "ok": not differing,
                    "results": results,
                    "differing": differing,
                },
            )
        if differing and options["check"]:
            raise CommandError(f"Projections differ: {', '.join(differing)}", returncode=1)
        if differing and not as_json:
            self.stdout.write(f"Rebuilt to match the ledger: {', '.join(differing)}")
