"""The web shell: login, the home page, navigation, static assets and error pages."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.template import loader
from pytest_django.asserts import assertContains, assertNotContains, assertRedirects

from ledger import services
from ledger.models import Event, Role

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


@pytest.fixture
def make_user(db):
    def make(username="ada", **fields):
        return get_user_model().objects.create_user(username=username, password=PASSWORD, **fields)

    return make


@pytest.fixture
def reviewer(tenant, make_user):
    user = make_user("ada")
    services.membership_grant(tenant=tenant, user=user, role=Role.REVIEWER)
    return user


def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get("/")

    assertRedirects(response, "/login/?next=/", fetch_redirect_response=False)


def test_the_login_page_has_labelled_fields_and_keeps_next(client):
    response = client.get("/login/?next=/api/docs/")

    assertContains(response, '<label for="id_username">Username</label>', html=True)
    assertContains(response, '<label for="id_password">Password</label>', html=True)
    assertContains(response, '<input type="hidden" name="next" value="/api/docs/">', html=True)
    assertNotContains(response, 'aria-label="Main"')


def test_it_shows_an_error_for_a_wrong_password(client, reviewer):
    response = client.post("/login/", {"username": "ada", "password": "wrong", "next": "/"})

    assert response.status_code == 200
    assertContains(response, 'role="alert"')
    assertContains(response, "Please enter a correct username and password")
    assert "_auth_user_id" not in client.session


def test_it_logs_in_and_shows_the_tenant_home_page(client, tenant, make_agent, reviewer):
    make_agent(tenant, name="Creator1")
    make_agent(tenant, name="Critic1")

    login = client.post("/login/", {"username": "ada", "password": PASSWORD, "next": "/"})
    response = client.get("/")

    assertRedirects(login, "/", fetch_redirect_response=False)
    assert response.status_code == 200
    assertContains(response, "<h1>Acme Research</h1>", html=True)
    assertContains(response, '<dd class="stat__value" id="agent-count">2</dd>', html=True)
    events = Event.objects.filter(tenant=tenant).count()
    assertContains(response, f'<dd class="stat__value" id="event-count">{events}</dd>', html=True)
    assertContains(response, "Creator1")
    assertContains(response, "Critic1")
    assertContains(response, "<strong>ada</strong>", html=True)
    assertContains(response, "Reviewer")


def test_the_nav_marks_the_current_page_and_never_links_to_missing_pages(client, reviewer):
    client.force_login(reviewer)

    response = client.get("/")

    assertContains(
        response, '<a class="site-nav__link" href="/" aria-current="page">Home</a>', html=True
    )
    assert response.content.decode().count('aria-current="page"') == 1
    nav = re.search(r'<nav class="site-nav".*?</nav>', response.content.decode(), re.S)
    assert nav is not None
    for href in re.findall(r'href="([^"]+)"', nav.group(0)):
        assert client.get(href).status_code != 404, href
    assertContains(response, "Review queue")
    # Every section has its page now; an item whose URL name does not exist yet still shows as
    # "coming soon" rather than a link.
    later = loader.render_to_string(
        "partials/nav_item.html", {"url_name": "nowhere:yet", "label": "Later", "section": "x"}
    )
    assert 'title="Coming soon"' in later
    assert "href" not in later


def test_it_shows_the_admin_link_only_to_staff(client, tenant, make_user):
    # The Django admin lets staff in only: a tenant admin without staff would get a refusal.
    reviewer = make_user("rev")
    services.membership_grant(tenant=tenant, user=reviewer, role=Role.REVIEWER)
    admin = make_user("boss")
    services.membership_grant(tenant=tenant, user=admin, role=Role.ADMIN)
    staff = make_user("ops", is_staff=True)

    seen = {}
    for user in (reviewer, admin, staff):
        client.force_login(user)
        seen[user.username] = 'href="/admin/"' in client.get("/").content.decode()

    assert seen == {"rev": False, "boss": False, "ops": True}


def test_it_loads_htmx_and_css_from_our_own_static_files(client, reviewer):
    client.force_login(reviewer)

    page = client.get("/").content.decode()

    scripts = re.findall(r'<script src="([^"]+)"', page)
    htmx = [src for src in scripts if "htmx" in src]
    stylesheets = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page)
    assert htmx, scripts
    assert all(src.startswith("/static/") for src in scripts + stylesheets)
    for src in htmx + stylesheets:
        assert client.get(src).status_code == 200, src
    assert """hx-headers='{"X-CSRFToken": \"""" in page


def test_it_logs_out_on_post_only(client, reviewer):
    client.force_login(reviewer)

    refused = client.get("/logout/")
    still_in = client.get("/")
    logged_out = client.post("/logout/")
    after = client.get("/")

    assert refused.status_code == 405
    assert still_in.status_code == 200
    assertRedirects(logged_out, "/login/", fetch_redirect_response=False)
    assertRedirects(after, "/login/?next=/", fetch_redirect_response=False)


def test_the_logout_button_is_a_form_with_a_csrf_token(client, reviewer):
    client.force_login(reviewer)

    page = client.get("/").content.decode()

    form = re.search(r'<form method="post" action="/logout/".*?</form>', page, re.S)
    assert form is not None
    assert 'name="csrfmiddlewaretoken"' in form.group(0)


def test_it_escapes_agent_names(client, tenant, make_agent, reviewer):
    make_agent(tenant, name="<script>alert(1)</script>")
    client.force_login(reviewer)

    response = client.get("/")

    assertContains(response, "&lt;script&gt;alert(1)&lt;/script&gt;")
    assertNotContains(response, "<script>alert(1)</script>")


def test_it_tells_a_person_without_a_tenant_whom_to_ask(client, make_user):
    client.force_login(make_user("newcomer"))

    response = client.get("/")

    assert response.status_code == 200
    assertContains(response, "Ask an admin to add you to a tenant.")
    assertContains(response, "No tenant")


def test_unknown_pages_get_the_html_404(client):
    response = client.get("/nope/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assertContains(response, "Page not found", status_code=404)
    assertContains(response, "<code>/nope/</code>", html=True, status_code=404)


def test_unknown_api_paths_get_the_json_404(client):
    response = client.get("/api/v1/nope/")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_the_500_page_renders_without_a_request():
    html = loader.get_template("500.html").render()

    assert "Something went wrong on our side" in html
    # The Content-Security-Policy refuses inline styles: the page's come from the stylesheet.
    assert "<style" not in html
    assert "css/app" in html
