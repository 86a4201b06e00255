"""Seats: the services, the People page, the command, the Django admin, and the tenant switch.
Every change is a ledger event whichever way it is made."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from pytest_django.asserts import assertContains, assertNotContains

from config.api import ApiError
from ledger.models import Event, Membership, Role
from ledger.people import services as people

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true", "HX-Target": "people"}


def events(tenant, kind):
    return list(Event.objects.filter(tenant=tenant, kind=kind).order_by("seq"))


def make_user(username, **fields):
    return get_user_model().objects.create_user(username=username, password="pw-12345678", **fields)


# --- services ---------------------------------------------------------------------------------


def test_it_logs_a_grant_a_role_change_and_a_removal(tenant):
    alice = make_user("alice")
    people.membership_grant(tenant=tenant, user=make_user("boss"), role=Role.ADMIN)
    seat = people.membership_grant(tenant=tenant, user=alice, role=Role.REVIEWER, actor="human:x")
    people.membership_role_change(membership=seat, role=Role.ADMIN, actor="human:x")
    people.membership_role_change(membership=seat, role=Role.ADMIN, actor="human:x")  # no-op
    people.membership_remove(membership=seat, actor="human:x")

    assert [e.payload for e in events(tenant, "membership.granted")][-1] == {
        "username": "alice",
        "role": "reviewer",
    }
    (changed,) = events(tenant, "membership.role_changed")
    assert changed.payload == {"username": "alice", "role": "admin", "previous_role": "reviewer"}
    assert changed.actor == "human:x"
    (removed,) = events(tenant, "membership.removed")
    assert removed.payload == {"username": "alice", "role": "admin"}
    assert not Membership.objects.filter(tenant=tenant, user=alice).exists()


def test_it_keeps_the_last_admin(tenant):
    seat = people.membership_grant(tenant=tenant, user=make_user("only"), role=Role.ADMIN)
    before = Event.objects.filter(tenant=tenant).count()

    for act in (
        lambda: people.membership_remove(membership=seat, actor="human:only"),
        lambda: people.membership_role_change(membership=seat, role=Role.REVIEWER, actor="x"),
    ):
        with pytest.raises(ApiError) as refused:
            act()
        assert refused.value.error_code == "last_admin"
        assert refused.value.status_code == 409
    assert Membership.objects.get(pk=seat.pk).role == Role.ADMIN
    assert Event.objects.filter(tenant=tenant).count() == before


def test_an_invite_creates_an_account_without_a_password(tenant):
    invitation = people.membership_invite(
        tenant=tenant, username="newcomer", role=Role.REVIEWER, actor="human:boss"
    )
    user = invitation.membership.user
    assert not user.has_usable_password()
    assert invitation.set_password_path.startswith("/welcome/")
    assert events(tenant, "membership.granted")[-1].payload == {
        "username": "newcomer",
        "role": "reviewer",
        "account_created": True,
    }
    with pytest.raises(ApiError) as again:
        people.membership_invite(tenant=tenant, username="newcomer", role="admin", actor="x")
    assert again.value.error_code == "already_member"


def test_the_invited_person_sets_a_password_once(tenant, client):
    path = people.membership_invite(
        tenant=tenant, username="newcomer", role=Role.REVIEWER, actor="x"
    ).set_password_path
    form = client.get(path, follow=True)
    assertContains(form, "Choose your password")
    answer = client.post(
        form.redirect_chain[-1][0],
        {"new_password1": "a fine long password", "new_password2": "a fine long password"},
    )
    assert answer.status_code == 302
    assert client.login(username="newcomer", password="a fine long password")
    assertContains(client.get(path, follow=True), "has been used or has expired")


def test_it_refuses_a_role_a_seat_cannot_have(tenant):
    with pytest.raises(ApiError) as refused:
        people.membership_grant(tenant=tenant, user=make_user("a"), role=Role.AGENT)
    assert refused.value.error_code == "invalid_role"


# --- the People page ----------------------------------------------------------------------------


def test_only_admins_open_the_people_page(reviewer_client, tenant_admin_client):
    assert reviewer_client.get("/people/").status_code == 403
    assert (
        reviewer_client.post("/people/invite/", {"username": "x", "role": "admin"}).status_code
        == 403
    )
    page = tenant_admin_client.get("/people/")
    assertContains(page, "Invite someone")
    assertContains(page, 'href="/people/"')  # the nav item, admins only
    assertNotContains(reviewer_client.get("/ledger/"), 'href="/people/"')


def test_an_admin_invites_changes_and_removes_in_place(tenant, tenant_admin_client):
    make_user("carol", email="carol@example.com")
    answer = tenant_admin_client.post(
        "/people/invite/", {"username": "carol", "role": "reviewer"}, headers=HTMX
    )
    assertContains(answer, "carol now has a seat as reviewer.")
    assertContains(answer, 'id="people"')
    seat = Membership.objects.get(tenant=tenant, user__username="carol")
    granted = events(tenant, "membership.granted")[-1]
    assert granted.actor.startswith("human:admin-acme")

    answer = tenant_admin_client.post(f"/people/{seat.pk}/role/", {"role": "admin"}, headers=HTMX)
    assertContains(answer, "carol is now admin.")
    assert events(tenant, "membership.role_changed")[-1].payload["role"] == "admin"

    answer = tenant_admin_client.post(f"/people/{seat.pk}/remove/", headers=HTMX)
    assertContains(answer, "Removed carol")
    assert events(tenant, "membership.removed")[-1].payload["username"] == "carol"


def test_a_refusal_is_shown_and_writes_nothing(tenant, tenant_admin_client):
    me = Membership.objects.get(tenant=tenant, role=Role.ADMIN)
    before = Event.objects.filter(tenant=tenant).count()
    answer = tenant_admin_client.post(f"/people/{me.pk}/remove/", headers=HTMX)
    assertContains(answer, "only admin")
    answer = tenant_admin_client.post("/people/invite/", {"username": "bad name!", "role": "admin"})
    assert answer.status_code == 302
    assert Event.objects.filter(tenant=tenant).count() == before


def test_an_invite_shows_the_new_accounts_link_once(tenant, tenant_admin_client):
    answer = tenant_admin_client.post(
        "/people/invite/",
        {"username": "dave", "email": "d@example.com", "role": "reviewer"},
        headers=HTMX,
    )
    assertContains(answer, "/welcome/")
    assertNotContains(tenant_admin_client.get("/people/"), "/welcome/")


def test_another_tenants_seat_is_a_404(tenant, other_tenant, tenant_admin_client):
    theirs = people.membership_grant(tenant=other_tenant, user=make_user("g"), role=Role.ADMIN)
    assert tenant_admin_client.post(f"/people/{theirs.pk}/remove/").status_code == 404
    assert (
        tenant_admin_client.post(f"/people/{theirs.pk}/role/", {"role": "reviewer"}).status_code
        == 404
    )
    assert Membership.objects.filter(pk=theirs.pk).exists()


def test_agent_text_in_usernames_is_escaped(tenant, tenant_admin_client):
    people.membership_grant(tenant=tenant, user=make_user("x<b>y"), role=Role.REVIEWER)
    page = tenant_admin_client.get("/people/")
    assertNotContains(page, "x<b>y")
    assertContains(page, "x&lt;b&gt;y")


# --- command ----------------------------------------------------------------------------------


def test_the_command_invites_changes_lists_and_removes(tenant, capsys):
    people.membership_grant(tenant=tenant, user=make_user("boss"), role=Role.ADMIN)
    call_command("membership", "invite", "--tenant", "acme", "--user", "erin", "--role", "reviewer")
    assert "/welcome/" in capsys.readouterr().out
    call_command("membership", "role", "--tenant", "acme", "--user", "erin", "--role", "admin")
    call_command("membership", "list", "--tenant", "acme")
    assert "erin\tadmin" in capsys.readouterr().out
    call_command("membership", "remove", "--tenant", "acme", "--user", "erin")
    kinds = [e.kind for e in Event.objects.filter(tenant=tenant, actor="system").order_by("seq")]
    assert kinds[-3:] == ["membership.granted", "membership.role_changed", "membership.removed"]
    with pytest.raises(CommandError, match="only admin"):
        call_command("membership", "remove", "--tenant", "acme", "--user", "boss")


# --- Django admin -------------------------------------------------------------------------------


def test_seats_made_in_the_django_admin_are_ledger_events(tenant):
    staff = get_user_model().objects.create_superuser("ops", password="pw-12345678")
    frank = make_user("frank")
    client = Client()
    client.force_login(staff)

    client.post(
        "/admin/ledger/membership/add/", {"tenant": tenant.pk, "user": frank.pk, "role": "admin"}
    )
    seat = Membership.objects.get(tenant=tenant, user=frank)
    # The tenant's only admin keeps the role, in the admin too, and nothing is logged.
    refused = client.post(
        f"/admin/ledger/membership/{seat.pk}/change/", {"role": "reviewer"}, follow=True
    )
    assertContains(refused, "only admin")
    assert Membership.objects.get(pk=seat.pk).role == Role.ADMIN
    people.membership_grant(tenant=tenant, user=make_user("boss"), role=Role.ADMIN)
    client.post(f"/admin/ledger/membership/{seat.pk}/change/", {"role": "reviewer"})
    client.post(f"/admin/ledger/membership/{seat.pk}/delete/", {"post": "yes"})

    mine = Event.objects.filter(tenant=tenant, actor="human:ops").order_by("seq")
    assert [e.kind for e in mine] == [
        "membership.granted",
        "membership.role_changed",
        "membership.removed",
    ]
    assert not Membership.objects.filter(pk=seat.pk).exists()


# --- tenant switch ------------------------------------------------------------------------------


def test_a_person_with_two_seats_switches_tenant(tenant, other_tenant, client):
    user = make_user("gina")
    people.membership_grant(tenant=tenant, user=user, role=Role.REVIEWER)
    people.membership_grant(tenant=other_tenant, user=user, role=Role.ADMIN)
    client.force_login(user)
    assertContains(client.get("/"), 'id="tenant-switch"')
    assert client.get("/people/").status_code == 403  # a reviewer in the oldest seat

    assert client.post("/people/switch/", {"tenant": other_tenant.pk}).status_code == 302
    page = client.get("/people/")
    assert page.status_code == 200
    assertContains(page, "Globex")

    # A seat removed since the choice: the middleware falls back to the seat that is left.
    Membership.objects.filter(tenant=other_tenant, user=user).delete()
    assert client.get("/people/").status_code == 403
    assert client.get("/ledger/").context["request"].membership.tenant == tenant


def test_a_switch_to_a_tenant_without_a_seat_is_a_404(tenant, other_tenant, reviewer_client):
    assert reviewer_client.post("/people/switch/", {"tenant": other_tenant.pk}).status_code == 404
    assert reviewer_client.post("/people/switch/", {"tenant": "x"}).status_code == 404


def test_an_admin_who_removes_their_own_seat_is_sent_home(tenant, tenant_admin_client):
    people.membership_grant(tenant=tenant, user=make_user("other-admin"), role=Role.ADMIN)
    me = Membership.objects.get(tenant=tenant, user__username__startswith="admin-")
    answer = tenant_admin_client.post(f"/people/{me.pk}/remove/", headers=HTMX)
    assert answer["HX-Redirect"] == "/"
    assert not Membership.objects.filter(pk=me.pk).exists()
    assert tenant_admin_client.get("/people/").status_code == 403
