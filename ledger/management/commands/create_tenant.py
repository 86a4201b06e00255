"""``python manage.py create_tenant <slug> --name "..."``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug

from config.api import ApiError
from ledger.services import SYSTEM_ACTOR, tenant_create


class Command(BaseCommand):
    requires_migrations_checks = True
    help = "Create a tenant (an organisation); its slug is how commands and URLs name it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="Short unique name: letters, digits, - and _.")
        parser.add_argument("--name", help="Display name (default: the slug).")

    def handle(self, *args: Any, **options: Any) -> None:
        slug: str = options["slug"]
        try:
            validate_slug(slug)
        except ValidationError as exc:
            raise CommandError(f"'{slug}' is not a valid slug: {' '.join(exc.messages)}") from exc
        try:
            tenant = tenant_create(name=options["name"] or slug, slug=slug, actor=SYSTEM_ACTOR)
        except ApiError as exc:
            raise CommandError(f"{exc.detail} ({exc.error_code})") from exc
        self.stdout.write(f"Created tenant '{tenant.slug}' ({tenant.name}).")
