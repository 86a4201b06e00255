from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from ledger.selectors import membership_chosen, memberships_for_user

# The session key of the tenant a person with several seats chose to work in (a tenant id).
SESSION_TENANT_KEY = "ledger.tenant_id"


class TenantMembershipMiddleware:
    """Attach the signed-in person's seats and the one they work in to browser requests.

    The chosen tenant lives in the session, and is checked against the person's seats on every
    request: a seat removed since the choice falls back to their oldest seat, so a session never
    reaches a tenant its person left. API requests authenticate per request with a key instead;
    this only looks at the session user.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        seats = (
            memberships_for_user(user=user) if user is not None and user.is_authenticated else []
        )
        chosen = request.session.get(SESSION_TENANT_KEY) if seats else None
        membership = membership_chosen(seats, tenant_id=chosen)
        if chosen is not None and membership is not None and membership.tenant_id != chosen:
            del request.session[SESSION_TENANT_KEY]
        request.memberships = seats  # type: ignore[attr-defined]
        request.membership = membership  # type: ignore[attr-defined]
        return self.get_response(request)
