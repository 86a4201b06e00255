"""Who may call an API action: the key's role, and for an agent-scoped key, the action's reach.

A view states the role each action needs (``read_role``, ``write_role``, ``role_by_action``) and
which of its actions are *agent-bound* (``agent_bound_actions``): actions that read and write only
what the caller's agent may reach (its own rows, and what the tenant shares with every agent),
because the view narrows its queryset and the agents it acts for to an agent-scoped key's agent.

Every other action is *tenant-wide* (agents, API keys, rubric and governance, recall settings,
trust import, jobs, judging an agent's work, ...) and an agent-scoped key is refused it whatever
its role, with 403 ``agent_scoped_key``. Tenant-wide is the default, so an action a view forgets
to classify is closed to agent-scoped keys rather than open to them.
"""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from config.api import ApiError
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


def is_agent_bound(view: Any, request: Request) -> bool:
    """Whether this request keeps an agent-scoped key within its agent."""
    action_map: dict[str, str] | None = getattr(view, "action_map", None)
    if action_map is not None and str(request.method).lower() not in action_map:
        return True  # no action runs: 405 method_not_allowed, as for every key
    bound: frozenset[str] = getattr(view, "agent_bound_actions", frozenset())
    return getattr(view, "action", None) in bound


def agent_scoped_key_refused(principal: ApiPrincipal) -> ApiError:
    agent = principal.agent
    assert agent is not None
    return ApiError(
        code="agent_scoped_key",
        message=f"This key acts as agent {agent.name!r} and this action reaches beyond that "
        "agent (the tenant, or another agent); it needs a tenant-wide key.",
        status_code=status.HTTP_403_FORBIDDEN,
    )


class HasRequiredRole(BasePermission):
    """Any valid key; an agent-scoped key only on agent-bound actions; and the role the view asks
    for this action.

    The reach is checked before the role, so an agent-scoped key learns the same thing from every
    tenant-wide action whatever its role: that it is agent-scoped.
    """

    message = "This API key's role is not allowed to do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request.user
        if not isinstance(principal, ApiPrincipal):
            return False
        if principal.agent is not None and not is_agent_bound(view, request):
            raise agent_scoped_key_refused(principal)
        return Role.allows(principal.role, required_role(view, request))
