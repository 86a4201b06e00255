"""What the commands that act on one tenant share: its ``--tenant`` option and the lookup."""

from __future__ import annotations

from django.core.management.base import CommandError, CommandParser

from ledger.models import Tenant


def tenant_option_add(parser: CommandParser) -> None:
    parser.add_argument("--tenant", required=True, help="Tenant slug")


def tenant_named(slug: str) -> Tenant:
    """The tenant of that slug, or the command's error saying how to make one."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise CommandError(
            f"No tenant '{slug}'. Create it with: python manage.py create_tenant {slug}"
        )
    return tenant
