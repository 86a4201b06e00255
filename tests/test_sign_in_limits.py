"""Sign-in limits (config.ratelimit), one policy for /login/ and /admin/login/, on the real Redis:
a username locks after LOGIN_RATE_LIMIT failures; an address past LOGIN_ADDRESS_RATE_LIMIT locks
only for the usernames that failed from it; everyone else's right password still works. The
address is REMOTE_ADDR unless TRUSTED_PROXY_COUNT says our proxies set X-Forwarded-For.
"""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory, override_settings

from config.ratelimit import client_address

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse 42"
LIMITS = {
    "LOGIN_RATE_LIMIT": 3,
    "LOGIN_ADDRESS_RATE_LIMIT": 6,
    "LOGIN_RATE_LIMIT_WINDOW_SECONDS": 300,
}


@pytest.fixture
def rita(django_user_model):
    return django_user_model.objects.create_user(username="rita", password=PASSWORD)


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password=PASSWORD)


def _sign_in(client, path, username, password, **headers):
    return client.post(path, {"username": username, "password": password}, **headers)


def _spray(client, path, usernames, **headers):
    """One wrong password for each username: the answer is the form again, never a refusal."""
    for username in usernames:
        assert _sign_in(client, path, username, "guess", **headers).status_code == 200


# --- /admin/login/ is limited like /login/ ----------------------------------------------------


@override_settings(**LIMITS)
def test_the_admin_login_refuses_even_the_right_password_after_repeated_failures(client, root):
    for _ in range(3):
        assert _sign_in(client, "/admin/login/", "root", "guess").status_code == 200

    refused = _sign_in(client, "/admin/login/", "root", PASSWORD)

    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 300
    assert b'href="/admin/login/"' in refused.content
    assert "_auth_user_id" not in client.session


@override_settings(**LIMITS)
def test_failures_on_either_sign_in_page_count_for_both(client, root):
    _sign_in(client, "/login/", "root", "guess")
    _sign_in(client, "/login/", "ROOT", "guess")
    _sign_in(client, "/admin/login/", "root", "guess")

    assert _sign_in(client, "/admin/login/", "root", PASSWORD).status_code == 429
    assert _sign_in(client, "/login/", "root", PASSWORD).status_code == 429


@override_settings(**LIMITS)
def test_the_admin_login_still_signs_in_with_the_right_password(client, root):
    response = _sign_in(client, "/admin/login/", "root", PASSWORD)

    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(root.pk)


# --- Others' failures on the same address -----------------------------------------------------


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
@override_settings(**LIMITS)
def test_the_right_password_of_someone_who_did_not_fail_is_accepted_from_a_busy_address(
    client, root, path
):
    # Far past both limits from this address: one username locked, the address over its limit.
    _spray(client, path, ["mallory"] * 3 + [f"user{n}" for n in range(20)])
    assert _sign_in(client, path, "mallory", "guess").status_code == 429

    response = _sign_in(Client(), path, "root", PASSWORD)

    assert response.status_code == 302


@override_settings(**LIMITS)
def test_an_address_over_its_limit_may_not_retry_the_usernames_that_failed_there(rita):
    attacker = Client(REMOTE_ADDR="198.51.100.7")
    _spray(attacker, "/login/", ["rita", "u1", "u2", "u3", "u4", "u5"])

    from_there = _sign_in(attacker, "/login/", "rita", PASSWORD)
    from_elsewhere = _sign_in(Client(REMOTE_ADDR="198.51.100.8"), "/login/", "rita", PASSWORD)
    untried = _sign_in(attacker, "/login/", "u6", "guess")

    assert from_there.status_code == 429
    assert from_elsewhere.status_code == 302
    assert untried.status_code == 200  # checked (and wrong), not refused


@override_settings(**LIMITS)
def test_the_username_limit_counts_case_and_width_variants_together(rita):
    variants = ["RITA", "Rita", "\uff52\uff49\uff54\uff41"]  # the last in fullwidth letters
    for number, variant in enumerate(variants):
        _sign_in(Client(REMOTE_ADDR=f"198.51.100.{number}"), "/login/", variant, "guess")

    response = _sign_in(Client(REMOTE_ADDR="198.51.100.99"), "/login/", "rita", PASSWORD)

    assert response.status_code == 429


# --- Where the client's address comes from ------------------------------------------------------


@override_settings(**LIMITS, TRUSTED_PROXY_COUNT=0)
def test_x_forwarded_for_is_ignored_unless_a_trusted_proxy_is_configured(rita):
    client = Client(REMOTE_ADDR="198.51.100.7")
    for number, username in enumerate(["rita", "u1", "u2", "u3", "u4", "u5"]):
        _sign_in(client, "/login/", username, "guess", HTTP_X_FORWARDED_FOR=f"203.0.113.{number}")

    response = _sign_in(client, "/login/", "rita", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.99")

    assert response.status_code == 429  # every attempt counted against 198.51.100.7


@override_settings(**LIMITS, TRUSTED_PROXY_COUNT=1)
def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(rita):
    proxy = Client(REMOTE_ADDR="10.0.0.2")
    attacker = {"HTTP_X_FORWARDED_FOR": "203.0.113.7"}
    _spray(proxy, "/login/", ["rita", "u1", "u2", "u3", "u4", "u5"], **attacker)

    from_attacker = _sign_in(proxy, "/login/", "rita", PASSWORD, **attacker)
    from_rita = _sign_in(proxy, "/login/", "rita", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.8")

    assert from_attacker.status_code == 429
    assert from_rita.status_code == 302


@override_settings(**LIMITS, TRUSTED_PROXY_COUNT=1)
def test_a_spoofed_forwarded_entry_does_not_let_a_client_pick_its_address(rita):
    proxy = Client(REMOTE_ADDR="10.0.0.2")
    # The client sends its own X-Forwarded-For; our proxy appends the real address after it.
    for number, username in enumerate(["rita", "u1", "u2", "u3", "u4", "u5"]):
        forwarded = f"192.0.2.{number}, 203.0.113.7"
        _sign_in(proxy, "/login/", username, "guess", HTTP_X_FORWARDED_FOR=forwarded)

    response = _sign_in(
        proxy, "/login/", "rita", PASSWORD, HTTP_X_FORWARDED_FOR="192.0.2.200, 203.0.113.7"
    )

    assert response.status_code == 429


@pytest.mark.parametrize(
    ("proxies", "remote", "forwarded", "address"),
    [
        (0, "198.51.100.7", "203.0.113.7", "198.51.100.7"),
        (1, "10.0.0.2", "192.0.2.1, 203.0.113.7", "203.0.113.7"),
        (2, "10.0.0.3", "192.0.2.1, 203.0.113.7, 10.0.0.2", "203.0.113.7"),
        # Fewer entries than proxies: the request did not come through them all.
        (2, "10.0.0.3", "203.0.113.7", "10.0.0.3"),
        (1, "10.0.0.2", "", "10.0.0.2"),
        # Ports, and IPv6 by the /64 a subscriber holds (and IPv4 written as IPv6).
        (1, "10.0.0.2", "203.0.113.7:51234", "203.0.113.7"),
        (1, "10.0.0.2", "[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"),
        (0, "2001:db8:1:2:bbbb::9", "", "2001:db8:1:2::/64"),
        (0, "::ffff:198.51.100.7", "", "198.51.100.7"),
    ],
)
def test_the_client_address(proxies, remote, forwarded, address):
    request = RequestFactory().post("/login/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)

    with override_settings(TRUSTED_PROXY_COUNT=proxies):
        assert client_address(request) == address
