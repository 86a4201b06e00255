"""The People page (tenant admins): invite, change the role of and remove people; and the tenant
switch of a person with several seats. Every write is one seat service call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse, reverse_lazy
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from config.api import ApiError
from config.views import HtmxHttpRequest
from config.web import membership_required, partial_wanted, role_required, tenant_membership
from ledger.middleware import SESSION_TENANT_KEY
from ledger.models import Membership, Role
from ledger.people import services
from ledger.people.forms import InviteForm, RoleForm, SwitchForm
from ledger.people.selectors import PEOPLE_SHOWN, tenant_memberships
from ledger.services import actor_for_user


def _actor(request: HtmxHttpRequest) -> str:
    return actor_for_user(request.user)  # type: ignore[arg-type]


def _people_context(request: HtmxHttpRequest, **extra: Any) -> dict[str, Any]:
    membership = tenant_membership(request)
    seats = tenant_memberships(tenant=membership.tenant)
    return {
        "seats": list(seats[:PEOPLE_SHOWN]),
        "seat_count": seats.count(),
        "invite_form": InviteForm(),
        "role_choices": services.SEAT_ROLES,
        "me": membership,
        **extra,
    }


@role_required(Role.ADMIN)
@require_GET
def people_list(request: HtmxHttpRequest) -> HttpResponse:
    template = "ledger/partials/people.html" if partial_wanted(request) else "ledger/people.html"
    return render(request, template, _people_context(request))


def _answer(
    request: HtmxHttpRequest, act: Callable[[], str], *, invalid: str = "", **extra: Any
) -> HttpResponse:
    """Run the action; HTMX gets the people section re-rendered with what happened (or why not),
    swapped in place; without JavaScript, POST then redirect back with it as a message."""
    notice, error = "", invalid
    if not error:
        try:
            notice = act()
        except ApiError as refused:
            error = str(refused.detail)
    if partial_wanted(request):
        context = _people_context(request, notice=notice, error=error, **extra)
        return render(request, "ledger/partials/people.html", context, status=200)
    if error:
        messages.error(request, error)
    elif notice:
        messages.success(request, notice)
    return redirect("people:list")


@require_POST
@role_required(Role.ADMIN)
def people_invite(request: HtmxHttpRequest) -> HttpResponse:
    form = InviteForm(request.POST)
    link: dict[str, str] = {}

    def invite() -> str:
        data = form.cleaned_data
        invitation = services.membership_invite(
            tenant=tenant_membership(request).tenant,
            username=data["username"],
            email=data["email"],
            role=data["role"],
            actor=_actor(request),
        )
        username = invitation.membership.user.get_username()
        if invitation.set_password_path:
            link["url"] = request.build_absolute_uri(invitation.set_password_path)
            return f"Created an account for {username} with a seat as {data['role']}."
        return f"{username} now has a seat as {data['role']}."

    invalid = "" if form.is_valid() else _form_problem(form)
    response = _answer(request, invite, invalid=invalid, invite_link=link)
    if link and not partial_wanted(request):
        messages.info(request, f"Send them this link to choose a password: {link['url']}")
    return response


def _form_problem(form: InviteForm | RoleForm) -> str:
    return " ".join(
        f"{form[name].label}: {' '.join(str(e) for e in errors)}"
        for name, errors in form.errors.items()
    )


def _seat_of(request: HtmxHttpRequest, pk: int) -> Membership:
    seat: Membership = get_object_or_404(
        tenant_memberships(tenant=tenant_membership(request).tenant).select_related("tenant"),
        pk=pk,
    )
    return seat


@require_POST
@role_required(Role.ADMIN)
def people_role_change(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    seat = _seat_of(request, pk)
    form = RoleForm(request.POST)

    def change() -> str:
        role = form.cleaned_data["role"]
        services.membership_role_change(membership=seat, role=role, actor=_actor(request))
        return f"{seat.user.get_username()} is now {role}."

    return _answer(request, change, invalid="" if form.is_valid() else _form_problem(form))


@require_POST
@role_required(Role.ADMIN)
def people_remove(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    seat = _seat_of(request, pk)

    def remove() -> str:
        services.membership_remove(membership=seat, actor=_actor(request))
        return f"Removed {seat.user.get_username()} from {seat.tenant.name}."

    response = _answer(request, remove)
    if seat.user_id == request.user.pk and not Membership.objects.filter(pk=seat.pk).exists():
        # They removed their own seat: the page they are on is no longer theirs to see.
        response = redirect("home")
        if partial_wanted(request):
            response = HttpResponseClientRedirect(reverse("home"))
    return response


@require_POST
@membership_required
def tenant_switch(request: HtmxHttpRequest) -> HttpResponse:
    """Work in another tenant the person holds a seat in; the choice is checked again by the
    membership middleware on every request."""
    form = SwitchForm(request.POST)
    if not form.is_valid():
        raise Http404("No such tenant.")
    seat = next(
        (s for s in request.memberships if s.tenant_id == form.cleaned_data["tenant"]), None
    )
    if seat is None:
        # Someone else's tenant and a tenant that does not exist answer alike.
        raise Http404("No such tenant.")
    request.session[SESSION_TENANT_KEY] = seat.tenant_id
    messages.success(request, f"You are now working in {seat.tenant.name} as {seat.role}.")
    # The page they were on showed the other tenant's rows, whose ids mean nothing here.
    return redirect("home")


class SetPasswordView(auth_views.PasswordResetConfirmView):
    """Where a person invited with a new account chooses their password (the link is a Django
    password-reset token: single use, expires after PASSWORD_RESET_TIMEOUT)."""

    template_name = "registration/set_password.html"
    success_url = reverse_lazy("login")
    post_reset_login = False

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        messages.success(self.request, "Your password is set: sign in with it.")
        return response
