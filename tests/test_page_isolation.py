"""Isolation matrix of the browser pages (issue 9): every page and page action of the trust,
memory, ledger and jobs sections, as an anonymous visitor, as a person without a seat, as an
admin of another tenant, and, for admin-only actions, as a reviewer.

The API's matrix is tests/ledger/test_isolation.py; this one is for the pages. A page added to
a section's URLs without a row here fails ``test_every_page_is_in_the_matrix``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from ledger.models import Agent, Event, Role, Tenant
from ledger.people.services import membership_grant
from tests.memory.private_reflection import SECRET_LINE, SECRET_QUERY, private_reflection_made
from tests.trust.governance_rows import flag_row, override_row, proposal_row

pytestmark = pytest.mark.django_db

SECTIONS = ("trust", "memory", "ledger", "jobs", "people")


@dataclass(frozen=True)
class Page:
    name: str  # namespace:url_name
    method: str = "get"
    victim: str = ""  # what the URL's pk names: agent, override, flag, proposal
    data: tuple[tuple[str, str], ...] = ()
    admin_only: bool = False

    def path(self, pk: int | None) -> str:
        route = {
            "trust:overview": "/trust/",
            "trust:agent": "/trust/agents/{pk}/",
            "trust:agent_export": "/trust/agents/{pk}/export.json",
            "trust:review_queue": "/trust/review/",
            "trust:override_revert": "/trust/overrides/{pk}/revert",
            "trust:override_revert_withdraw": "/trust/overrides/{pk}/revert/withdraw",
            "trust:override_confirm": "/trust/overrides/{pk}/confirm",
            "trust:overrides": "/trust/review/overrides/",
            "trust:overrides_confirm": "/trust/review/overrides/confirm",
            "trust:override_detail": "/trust/review/overrides/{pk}/",
            "trust:override_step": "/trust/review/overrides/{pk}/confirm",
            "trust:flag_review": "/trust/flags/{pk}/review",
            "trust:proposal_decide": "/trust/proposals/{pk}/decide",
            "memory:explorer": "/memory/",
            "memory:token_savings": "/memory/token-savings/",
            "ledger:browser": "/ledger/",
            "ledger:verify": "/ledger/verify/",
            "jobs:status": "/jobs/",
            "jobs:schedule": "/jobs/schedule/",
            "people:list": "/people/",
            "people:invite": "/people/invite/",
            "people:role": "/people/{pk}/role/",
            "people:remove": "/people/{pk}/remove/",
            "people:switch": "/people/switch/",
        }[self.name]
        return route.format(pk=pk)


PAGES = (
    Page("trust:overview"),
    Page("trust:agent", victim="agent"),
    Page("trust:agent_export", victim="agent"),
    Page("trust:review_queue"),
    Page("trust:override_revert", "post", victim="override"),
    Page("trust:override_revert_withdraw", "post", victim="override"),
    Page("trust:override_confirm", "post", victim="override"),
    Page("trust:overrides"),
    # Another tenant's ids in a bulk confirm refuse the batch (tests/trust/test_review_flow.py).
    Page("trust:overrides_confirm", "post", data=(("ids", "1"),)),
    Page("trust:override_detail", victim="override"),
    Page("trust:override_step", "post", victim="override"),
    Page("trust:flag_review", "post", victim="flag", data=(("decision", "dismissed"),)),
    Page(
        "trust:proposal_decide",
        "post",
        victim="proposal",
        data=(("decision", "accept"),),
        admin_only=True,
    ),
    Page("memory:explorer"),
    Page("memory:token_savings"),
    Page("ledger:browser"),
    Page("ledger:verify", "post", admin_only=True),
    Page("jobs:status"),
    # Operators only (staff with the beat permission): every tenant admin here is refused.
    Page("jobs:schedule", "post", data=(("name", "memory.decay"),), admin_only=True),
    Page("people:list", admin_only=True),
    Page("people:invite", "post", data=(("username", "x"), ("role", "admin")), admin_only=True),
    Page("people:role", "post", victim="membership", data=(("role", "admin"),), admin_only=True),
    Page("people:remove", "post", victim="membership", admin_only=True),
    # The tenant a person switches to: another tenant's id is a 404 like any other.
    Page("people:switch", "post", victim="tenant"),
)


def section_url_names() -> set[str]:
    names: set[str] = set()
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLResolver) and entry.namespace in SECTIONS:
            for pattern in entry.url_patterns:
                if isinstance(pattern, URLPattern) and pattern.name:
                    names.add(f"{entry.namespace}:{pattern.name}")
    return names


def test_every_page_is_in_the_matrix():
    assert section_url_names() == {page.name for page in PAGES}


def victims(tenant: Tenant, agent: Agent) -> dict[str, int]:
    return {
        "agent": agent.pk,
        "override": override_row(agent, timezone.now()).pk,
        "flag": flag_row(agent).pk,
        "proposal": proposal_row(tenant).pk,
        "membership": membership_grant(
            tenant=tenant,
            user=get_user_model().objects.create_user(username=f"seated-{tenant.slug}"),
            role=Role.REVIEWER,
        ).pk,
        "tenant": tenant.pk,
    }


@pytest.fixture
def theirs(other_tenant: Tenant, make_agent: Callable[..., Agent]) -> dict[str, int]:
    return victims(other_tenant, make_agent(other_tenant, name="Theirs"))


@pytest.fixture
def mine(tenant: Tenant, make_agent: Callable[..., Agent]) -> dict[str, int]:
    return victims(tenant, make_agent(tenant, name="Mine"))


def request(client: Client, page: Page, pk: int | None) -> Any:
    call = client.post if page.method == "post" else client.get
    data = dict(page.data)
    if page.victim == "tenant":
        data["tenant"] = str(pk)
    return call(page.path(pk), data)


def ledger_size(tenant: Tenant) -> int:
    return Event.objects.filter(tenant=tenant).count()


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_an_anonymous_visitor_is_sent_to_log_in(client, page, mine, tenant):
    before = ledger_size(tenant)

    response = request(client, page, mine.get(page.victim))

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert ledger_size(tenant) == before


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_person_without_a_seat_is_refused(client, page, mine, tenant):
    user = get_user_model().objects.create_user(username="seatless", password="pw-12345678")
    client.force_login(user)
    before = ledger_size(tenant)

    response = request(client, page, mine.get(page.victim))

    assert response.status_code == 403
    assert ledger_size(tenant) == before


@pytest.mark.parametrize("page", [p for p in PAGES if p.victim], ids=lambda page: page.name)
def test_another_tenants_ids_are_not_found(client_as, page, tenant, other_tenant, theirs):
    client = client_as(tenant, Role.ADMIN)
    before = ledger_size(other_tenant)

    response = request(client, page, theirs[page.victim])

    assert response.status_code == 404
    # Nothing about the other tenant's row leaks into the answer, and nothing was written.
    assert "Theirs" not in response.content.decode()
    assert ledger_size(other_tenant) == before


@pytest.mark.parametrize("page", [p for p in PAGES if p.admin_only], ids=lambda page: page.name)
def test_a_reviewer_cannot_take_admin_actions(client_as, page, tenant, mine):
    client = client_as(tenant, Role.REVIEWER)
    before = ledger_size(tenant)

    response = request(client, page, mine.get(page.victim))

    assert response.status_code == 403
    assert ledger_size(tenant) == before


# --- Private kinds, and what the service makes of them (issue 18, item 5) ----------------------
# A person reads the whole ledger, private thoughts included, so the ledger page shows a private
# reflection to every seat alike; the memory explorer searches as one agent, and shows what that
# agent may see.


@pytest.fixture
def alice_and_bob(tenant: Tenant, make_agent: Callable[..., Agent]) -> tuple[Agent, Agent]:
    alice = make_agent(tenant, name="Alice")
    private_reflection_made(alice)
    return alice, make_agent(tenant, name="Bob")


@pytest.mark.parametrize("role", [Role.REVIEWER, Role.ADMIN])
def test_the_explorer_shows_no_agent_another_agents_private_reflection(
    client_as, tenant, alice_and_bob, role
):
    alice, bob = alice_and_bob
    client = client_as(tenant, role)
    search = {"q": SECRET_QUERY, "sources": "audit_log"}

    as_bob = client.get("/memory/", {"agent": bob.pk, **search})
    as_alice = client.get("/memory/", {"agent": alice.pk, **search})

    assert as_bob.status_code == as_alice.status_code == 200
    assert SECRET_LINE not in as_bob.content.decode()
    assert "agent.reflected" in as_alice.content.decode()


@pytest.mark.parametrize("role", [Role.REVIEWER, Role.ADMIN])
def test_the_ledger_page_shows_private_reflections_to_people_as_it_shows_private_thoughts(
    client_as, tenant, alice_and_bob, role
):
    thought = Event.objects.filter(kind="agent.thought").first()
    reflection = Event.objects.get(kind="agent.reflected")

    body = client_as(tenant, role).get("/ledger/", {"actor": "Alice"}).content.decode()

    assert f'data-seq="{thought.seq}"' in body
    assert f'data-seq="{reflection.seq}"' in body
