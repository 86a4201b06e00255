"""What the pages of every app share: who may open them, and whether an HTMX request gets a
partial or the whole page.

One URL answers with a whole page or with a named partial of the same template (django-htmx's
example). Because the answer depends on the ``HX-Request`` header, every page says so in ``Vary``:
a cache, or the browser's own, must never hand a partial to a full page load. HTMX restoring a page
from history after a cache miss sends ``HX-Request`` too, but wants the whole page.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.vary import vary_on_headers

from config.views import HtmxHttpRequest
from ledger.models import Membership, Role

View = Callable[..., HttpResponse]


def role_required(role: str | None) -> Callable[[View], View]:
    """Signed in (else the login page) with a seat in a tenant holding at least ``role`` (any
    seat when ``None``); 403 otherwise, so an action hidden from a role is refused on the server
    too. The response varies with ``HX-Request``."""

    def decorate(view: View) -> View:
        @wraps(view)
        @vary_on_headers("HX-Request")
        def wrapped(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            membership = request.membership
            if membership is None:
                raise PermissionDenied("You have no seat in a tenant.")
            if role is not None and not Role.allows(membership.role, role):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return login_required(wrapped)

    return decorate


def membership_required(view: View) -> View:
    """Any seat may read the dashboards; actions that need more use ``role_required``."""
    return role_required(None)(view)


def tenant_membership(request: HtmxHttpRequest) -> Membership:
    # role_required / membership_required ran first; this narrows the type for the view.
    assert request.membership is not None
    return request.membership


def partial_wanted(request: HtmxHttpRequest, target: str | None = None) -> bool:
    """An HTMX swap (into ``target``, when given) asks for a partial; HTMX restoring a page from
    history wants all of it."""
    if not request.htmx or request.htmx.history_restore_request:
        return False
    return target is None or request.htmx.target == target


def page_or_partial(
    request: HtmxHttpRequest,
    *,
    page: str,
    partial: str,
    context: dict[str, Any],
    status: int = 200,
) -> HttpResponse:
    """The named partial for an HTMX swap, else the whole page. The partial is rendered with
    ``swapped`` set, for what only a swap needs (out-of-band updates of the rest of the page)."""
    if partial_wanted(request):
        return render(request, partial, {**context, "swapped": True}, status=status)
    return render(request, page, context, status=status)
