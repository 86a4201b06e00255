"""Writes to people's seats (``Membership``): grant, invite, change of role, removal.

Every change appends its ledger event in the same transaction as the row, whoever makes it: the
People page, ``manage.py membership`` and the Django admin all call these services. Each takes
the tenant's write lock first, so the "a tenant keeps at least one admin" check and the change
it guards cannot interleave with a concurrent change of another seat of the same tenant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.tokens import default_token_generator
from django.db import transaction
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from rest_framework import status

from config.api import ApiError, Conflict
from ledger.models import Membership, Role, Tenant
from ledger.names import SYSTEM_ACTOR
from ledger.services import event_append, tenant_write_lock

MEMBERSHIP_GRANTED = "membership.granted"
MEMBERSHIP_ROLE_CHANGED = "membership.role_changed"
MEMBERSHIP_REMOVED = "membership.removed"
MEMBERSHIP_KINDS = (MEMBERSHIP_GRANTED, MEMBERSHIP_ROLE_CHANGED, MEMBERSHIP_REMOVED)
SEAT_ROLES = (Role.REVIEWER.value, Role.ADMIN.value)


def _role_clean(role: str) -> str:
    if role not in SEAT_ROLES:
        raise ApiError(
            code="invalid_role",
            message=f"A person's role is one of {', '.join(SEAT_ROLES)}, not {role!r}.",
        )
    return role


def _last_admin_refused(membership: Membership, doing: str) -> None:
    """409 ``last_admin`` when ``membership`` is its tenant's only admin seat: nobody could manage
    the tenant's people afterwards (only an operator, through the Django admin)."""
    if membership.role != Role.ADMIN:
        return
    others = (
        Membership.objects.filter(tenant_id=membership.tenant_id, role=Role.ADMIN)
        .exclude(pk=membership.pk)
        .exists()
    )
    if not others:
        raise Conflict(
            code="last_admin",
            message=f"{membership.user.get_username()} is the tenant's only admin: make someone "
            f"else admin before you {doing}.",
        )


def membership_grant(
    *, tenant: Tenant, user: AbstractBaseUser, role: str, actor: str = SYSTEM_ACTOR
) -> Membership:
    """Give ``user`` a seat with ``role``; an existing seat gets the role (a role change, logged
    as one) or, holding it already, stays as it is without an event."""
    role = _role_clean(role)
    with transaction.atomic():
        tenant_write_lock(tenant)
        current = Membership.objects.filter(tenant=tenant, user_id=user.pk).first()
        if current is not None:
            return membership_role_change(membership=current, role=role, actor=actor)
        membership = Membership.objects.create(tenant=tenant, user_id=user.pk, role=role)
        event_append(
            tenant=tenant,
            kind=MEMBERSHIP_GRANTED,
            actor=actor,
            payload={"username": user.get_username(), "role": role},
        )
    return membership


@dataclass(frozen=True)
class Invitation:
    membership: Membership
    # Set when the invitation created the account: the path where its person sets a password
    # (Django's password-reset token, valid PASSWORD_RESET_TIMEOUT). Shown once, never stored.
    set_password_path: str = ""


def membership_invite(
    *, tenant: Tenant, username: str, role: str, actor: str, email: str = ""
) -> Invitation:
    """A seat for the person named ``username``, creating their account (without a usable
    password) when there is none. 409 ``already_member`` when they hold a seat here."""
    role = _role_clean(role)
    User: Any = get_user_model()
    username = username.strip()
    try:
        User.username_validator(username)
    except Exception as exc:
        raise ApiError(
            code="invalid_username",
            message=f"{username!r} is not a valid username: letters, digits and @/./+/-/_ only.",
        ) from exc
    with transaction.atomic():
        tenant_write_lock(tenant)
        user = User.objects.filter(username=username).first()
        created = user is None
        if user is None:
            user = User(username=username, email=email.strip())
            user.set_unusable_password()
            user.save()
        elif Membership.objects.filter(tenant=tenant, user=user).exists():
            raise Conflict(
                code="already_member",
                message=f"{username} already has a seat here; change their role instead.",
            )
        membership = Membership.objects.create(tenant=tenant, user=user, role=role)
        event_append(
            tenant=tenant,
            kind=MEMBERSHIP_GRANTED,
            actor=actor,
            payload={"username": username, "role": role, "account_created": created},
        )
    path = ""
    if created:
        path = reverse(
            "set_password",
            kwargs={
                "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
                "token": default_token_generator.make_token(user),
            },
        )
    return Invitation(membership=membership, set_password_path=path)


def membership_role_change(*, membership: Membership, role: str, actor: str) -> Membership:
    """Give the seat another role; the same role changes nothing and logs nothing."""
    role = _role_clean(role)
    with transaction.atomic():
        tenant_write_lock(membership.tenant)
        current = _seat_locked(membership)
        if current.role == role:
            return current
        if role != Role.ADMIN:
            _last_admin_refused(current, "take their admin role away")
        previous = current.role
        current.role = role
        current.save(update_fields=["role"])
        event_append(
            tenant=current.tenant,
            kind=MEMBERSHIP_ROLE_CHANGED,
            actor=actor,
            payload={
                "username": current.user.get_username(),
                "role": role,
                "previous_role": previous,
            },
        )
    return current


def membership_remove(*, membership: Membership, actor: str) -> None:
    """Take the seat away. The person's account stays (it may hold seats elsewhere); their
    sessions lose this tenant on their next request (the membership middleware)."""
    with transaction.atomic():
        tenant_write_lock(membership.tenant)
        current = _seat_locked(membership)
        _last_admin_refused(current, "remove them")
        username, role = current.user.get_username(), current.role
        current.delete()
        event_append(
            tenant=current.tenant,
            kind=MEMBERSHIP_REMOVED,
            actor=actor,
            payload={"username": username, "role": role},
        )


def _seat_locked(membership: Membership) -> Membership:
    """The seat as it is now (under the tenant lock), or 404 when it was removed meanwhile."""
    current: Membership | None = (
        Membership.objects.select_related("tenant", "user").filter(pk=membership.pk).first()
    )
    if current is None:
        raise ApiError(
            code="not_found",
            message="That seat no longer exists.",
            status_code=status.HTTP_404_NOT_FOUND,
        )
    return current
