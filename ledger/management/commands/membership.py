"""``python manage.py membership list|invite|role|remove --tenant <slug> ...``: people's seats.

The same services as the People page and the Django admin, so each change is a ledger event
(actor ``system``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.api import ApiError
from ledger.models import Membership, Tenant
from ledger.people.services import (
    SEAT_ROLES,
    membership_invite,
    membership_remove,
    membership_role_change,
)
from ledger.services import SYSTEM_ACTOR


class Command(BaseCommand):
    requires_migrations_checks = True
    help = (
        "List, invite, change the role of, or remove the people of a tenant. Every change is a "
        "ledger event."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="The tenant's people and their roles.")
        listing.add_argument("--tenant", required=True, help="Slug of the tenant.")
        invite = actions.add_parser(
            "invite",
            help="Give a person a seat, creating their account when they have none (then print "
            "the path where they set their password).",
        )
        role = actions.add_parser("role", help="Change the role of a person's seat.")
        remove = actions.add_parser("remove", help="Take a person's seat away.")
        for sub in (invite, role, remove):
            sub.add_argument("--tenant", required=True, help="Slug of the tenant.")
            sub.add_argument("--user", required=True, help="The person's username.")
        for sub in (invite, role):
            sub.add_argument("--role", required=True, choices=SEAT_ROLES)
        invite.add_argument("--email", default="", help="For a new account.")

    def handle(self, *args: Any, **options: Any) -> None:
        slug: str = options["tenant"]
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"No tenant '{slug}'.")
        action: str = options["action"]
        try:
            if action == "list":
                self._list(tenant)
            elif action == "invite":
                self._invite(tenant, options)
            else:
                seat = self._seat(tenant, options["user"])
                if action == "role":
                    membership_role_change(
                        membership=seat, role=options["role"], actor=SYSTEM_ACTOR
                    )
                    self.stdout.write(f"{options['user']} is now {options['role']} in '{slug}'.")
                else:
                    membership_remove(membership=seat, actor=SYSTEM_ACTOR)
                    self.stdout.write(f"Removed {options['user']} from '{slug}'.")
        except ApiError as exc:
            raise CommandError(f"{exc.detail} ({exc.error_code})") from exc

    def _list(self, tenant: Tenant) -> None:
        seats = Membership.objects.for_tenant(tenant).select_related("user")
        for seat in seats.order_by("user__username"):
            self.stdout.write(f"{seat.user.get_username()}\t{seat.role}")

    def _invite(self, tenant: Tenant, options: dict[str, Any]) -> None:
        invitation = membership_invite(
            tenant=tenant,
            username=options["user"],
            role=options["role"],
            email=options["email"],
            actor=SYSTEM_ACTOR,
        )
        self.stdout.write(f"{options['user']} has a seat in '{tenant.slug}' as {options['role']}.")
        if invitation.set_password_path:
            self.stdout.write(
                "New account: they choose a password at this path of the site (valid for the "
                f"password-reset lifetime, once): {invitation.set_password_path}"
            )

    def _seat(self, tenant: Tenant, username: str) -> Membership:
        seat: Membership | None = (
            Membership.objects.for_tenant(tenant)
            .select_related("tenant", "user")
            .filter(user__username=username)
            .first()
        )
        if seat is None:
            raise CommandError(f"{username} has no seat in '{tenant.slug}'.")
        return seat
