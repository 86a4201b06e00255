from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from ledger.selectors import membership_for_user


class TenantMembershipMiddleware:
    """Attach the signed-in person's membership (tenant and role) to browser requests.

    API requests authenticate per request with a key instead; this only looks at the session user.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        request.membership = (  # type: ignore[attr-defined]
            membership_for_user(user=user) if user is not None and user.is_authenticated else None
        )
        return self.get_response(request)
