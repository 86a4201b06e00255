"""``python manage.py create_api_key --tenant <slug> --name "..." --role ... [--agent NAME]``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.api import ApiError
from ledger.models import Agent, Role, Tenant
from ledger.services import SYSTEM_ACTOR, api_key_create


class Command(BaseCommand):
    requires_migrations_checks = True
    help = "Create an API key and print it once; only its hash is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Slug of the tenant the key is for.")
        parser.add_argument("--name", required=True, help="What the key is for, for people.")
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument(
            "--agent",
            help="Name of an agent in the tenant; the key then acts as that agent only (role "
            "agent or reviewer: an admin key is always tenant-wide).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug: str = options["tenant"]
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(
                f"No tenant '{slug}'. Create it with: python manage.py create_tenant {slug}"
            )
        agent: Agent | None = None
        if options["agent"]:
            agent = Agent.objects.for_tenant(tenant).filter(name=options["agent"]).first()
            if agent is None:
                raise CommandError(f"Tenant '{slug}' has no agent named '{options['agent']}'.")
        try:
            api_key, raw_key = api_key_create(
                tenant=tenant,
                name=options["name"],
                role=options["role"],
                agent=agent,
                actor=SYSTEM_ACTOR,
            )
        except ApiError as exc:
            raise CommandError(f"{exc.detail} ({exc.error_code})") from exc
        scope = f"acting as agent '{agent.name}'" if agent is not None else "tenant-wide"
        self.stdout.write(
            f"Created API key '{api_key.name}' for tenant '{tenant.slug}' "
            f"(role {api_key.role}, {scope}):"
        )
        self.stdout.write(raw_key)
        self.stdout.write("Store it now: it will not be shown again.")
