"""Role checks for API keys. A view states the role an action needs; this enforces it."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from ledger.auth import ApiPrincipal
from ledger.models import Role


def required_role(view: Any, request: Request) -> str:
    """The role a view needs for this request: per action if given, else read/write defaults."""
    by_action: dict[str, str] = getattr(view, "role_by_action", {})
    action = getattr(view, "action", None)
    if action in by_action:
        return by_action[action]
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return str(getattr(view, "read_role", Role.AGENT))
    return str(getattr(view, "write_role", Role.AGENT))


class HasRequiredRole(BasePermission):
    """Any valid key, and the role the view asks for this action."""

    message = "This API key's role is not allowed to do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request.user
        if not isinstance(principal, ApiPrincipal):
            return False
        return Role.allows(principal.role, required_role(view, request))
