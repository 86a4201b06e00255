"""Agent names cannot impersonate: not another agent (case, look-alikes, hidden characters), not
the service, not a person or a key (the ledger's other actor forms). One rule, ledger.names,
through every way an agent is named: the API, the admin, the services the commands, the import and
the demo use.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.test import Client

from config.api import ApiError
from ledger import services
from ledger.models import Agent, ApiKey, Event, Role
from ledger.names import agent_name_key

pytestmark = pytest.mark.django_db

REFUSED = [
    # The service's own actor, in any case.
    ("system", "reserved"),
    ("SYSTEM", "reserved"),
    ("System", "reserved"),
    # The ledger's "<kind>:<name>" actors, and colons that only look like one.
    ("human:bob", "actor_form"),
    ("HUMAN:bob", "actor_form"),
    ("api_key:amk_abcdefgh", "actor_form"),
    ("agent:alpha", "actor_form"),
    ("key:1", "actor_form"),
    ("human\uff1abob", "actor_form"),  # fullwidth colon (NFKC makes it ':')
    ("human\ua789bob", "actor_form"),  # modifier letter colon
    ("human\u2236bob", "actor_form"),  # ratio
    # Zero-width, joiners, byte-order mark, soft hyphen.
    ("alpha\u200b", "invisible_character"),
    ("\u200balpha", "invisible_character"),
    ("al\u200dpha", "invisible_character"),
    ("alpha\u2060", "invisible_character"),
    ("\ufeffalpha", "invisible_character"),
    ("alp\u00adha", "invisible_character"),
    # Bidirectional overrides, isolates and marks.
    ("\u202eahpla", "invisible_character"),
    ("alpha\u2066x\u2069", "invisible_character"),
    ("alpha\u200f", "invisible_character"),
    ("\u061calpha", "invisible_character"),
    # Controls, line and paragraph separators, private use, unassigned, a lone surrogate.
    ("al\npha", "invisible_character"),
    # (A NUL, like a lone surrogate, never reaches this rule: the JSON parser refuses it with
    # invalid_value, tests/test_request_bodies.py.)
    ("al\x7fpha", "invisible_character"),
    ("al\u2028pha", "invisible_character"),
    ("al\u2029pha", "invisible_character"),
    ("alpha\ue000", "invisible_character"),
    ("alpha\U000e0080", "invisible_character"),
    # Characters that draw nothing though they are letters, marks or spaces.
    ("alpha\u3164", "invisible_character"),
    ("\u3164", "invisible_character"),
    ("alpha\ufe0f", "invisible_character"),
    ("al\u034fpha", "invisible_character"),
    ("al\u1680pha", "invisible_character"),
    # Look-alike letters of another script mixed in.
    ("\u0430lpha", "mixed_scripts"),  # Cyrillic a
    ("p\u0430yp\u0430l", "mixed_scripts"),
    ("\u03b1lpha", "mixed_scripts"),  # Greek alpha
    # Marks on nothing, or piled up.
    ("\u0301alpha", "combining_marks"),
    ("alpha \u0301x", "combining_marks"),
    ("a" + "\u0301" * 6, "combining_marks"),
    # Nothing to read, or too much.
    ("---", "no_letter_or_digit"),
    ("   ", "empty"),
    ("a" * 201, "too_long"),
    ("\ufdfa" * 12, "too_long"),  # 12 characters that NFKC makes 216
]


@pytest.mark.parametrize(("name", "reason"), REFUSED)
def test_an_impersonating_or_unreadable_name_is_refused_and_nothing_is_written(
    tenant, api_as, name, reason
):
    api = api_as(tenant)
    events = Event.objects.filter(tenant=tenant).count()

    response = api.post("/api/v1/agents/", {"name": name}, format="json")

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["details"]["reason"]) == ("invalid_agent_name", reason)
    assert not Agent.objects.filter(tenant=tenant).exists()
    assert Event.objects.filter(tenant=tenant).count() == events


@pytest.mark.parametrize(("name", "reason"), REFUSED[:12])
def test_a_rename_follows_the_same_rule(tenant, make_agent, api_as, name, reason):
    agent = make_agent(tenant, name="Creator1")

    response = api_as(tenant).patch(f"/api/v1/agents/{agent.pk}/", {"name": name}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["details"]["reason"] == reason
    agent.refresh_from_db()
    assert agent.name == "Creator1"


def test_a_lone_surrogate_is_refused_not_a_server_error(tenant, api_as):
    api = api_as(tenant)
    events = Event.objects.filter(tenant=tenant).count()
    # json.dumps escapes the surrogate as \ud800, which is how a client sends one.
    bodies = [
        ("/api/v1/agents/", json.dumps({"name": "alpha\ud800"})),
        ("/api/v1/events/", json.dumps({"kind": "user.injected", "actor": "human:\ud800"})),
    ]

    statuses = [
        api.post(url, body, content_type="application/json").status_code for url, body in bodies
    ]

    assert statuses == [400, 400]
    assert Event.objects.filter(tenant=tenant).count() == events
    with pytest.raises(ApiError) as refused:
        services.agent_create(tenant=tenant, name="alpha\ud800", actor="system")
    assert refused.value.details["reason"] == "invisible_character"


def test_every_actor_form_the_ledger_writes_is_refused_as_a_name(tenant, make_agent):
    person = get_user_model().objects.create_user(username="bob", password="x-12345678")
    tenant_key, _ = services.api_key_create(tenant=tenant, name="k", role=Role.ADMIN, actor="x")
    agent_key, _ = services.api_key_create(
        tenant=tenant, name="k", role=Role.AGENT, actor="x", agent=make_agent(tenant, name="A1")
    )
    actors = [
        services.SYSTEM_ACTOR,
        services.actor_for_user(person),
        services.actor_for_api_key(tenant_key),
    ]

    for actor in actors:
        with pytest.raises(ApiError) as refused:
            services.agent_create(tenant=tenant, name=actor, actor="system")
        assert refused.value.error_code == "invalid_agent_name", actor
    # An agent-scoped key acts as its agent's name, which is what names are for.
    assert services.actor_for_api_key(agent_key) == "A1"


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("\uff46\uff49\uff4c\uff45", "file"),  # fullwidth letters
        ("  alpha   beta  ", "alpha beta"),
        ("apple\u00a0pie", "apple pie"),  # no-break space
        ("e\u0301clair", "\u00e9clair"),  # composed
        ("L\u00fcck", "L\u00fcck"),
        (
            "\u0414\u043c\u0438\u0442\u0440\u0438\u0439",
            "\u0414\u043c\u0438\u0442\u0440\u0438\u0439",
        ),
        ("\u5c71\u7530", "\u5c71\u7530"),  # Han
        (
            "GPT-4o \u30a2\u30b7\u30b9\u30bf\u30f3\u30c8",
            "GPT-4o \u30a2\u30b7\u30b9\u30bf\u30f3\u30c8",
        ),
        ("\uae40\ucca0\uc218", "\uae40\ucca0\uc218"),  # Hangul
        ("Agent_007", "Agent_007"),
        ("human", "human"),
    ],
)
def test_names_are_stored_in_normal_form(tenant, api_as, given, stored):
    response = api_as(tenant).post("/api/v1/agents/", {"name": given}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["name"] == stored
    assert Event.objects.get(tenant=tenant, kind="agent.registered").payload["name"] == stored


@pytest.mark.parametrize(
    "look_alike",
    [
        "ALPHA",
        "Alpha",
        "\uff41\uff4c\uff50\uff48\uff41",  # fullwidth
        "a1pha",  # digit one for the l
        "alpha\u00a0",
    ],
)
def test_a_name_that_differs_only_in_case_or_look_alikes_is_taken(
    tenant, make_agent, api_as, look_alike
):
    make_agent(tenant, name="alpha")

    response = api_as(tenant).post("/api/v1/agents/", {"name": look_alike}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "agent_name_taken"
    assert response.json()["error"]["details"]["taken_by"] == "alpha"
    assert list(Agent.objects.filter(tenant=tenant).values_list("name", flat=True)) == ["alpha"]


def test_a_whole_script_look_alike_is_taken(tenant, make_agent, api_as):
    make_agent(tenant, name="coco")

    response = api_as(tenant).post(
        "/api/v1/agents/", {"name": "\u0441\u043e\u0441\u043e"}, format="json"
    )

    assert response.status_code == 409
    assert "only in case or in look-alike characters" in response.json()["error"]["message"]


def test_renaming_onto_a_look_alike_of_another_agent_is_taken(tenant, make_agent, api_as):
    make_agent(tenant, name="alpha")
    beta = make_agent(tenant, name="beta")

    response = api_as(tenant).patch(f"/api/v1/agents/{beta.pk}/", {"name": "ALPHA"}, format="json")

    assert response.status_code == 409
    beta.refresh_from_db()
    assert beta.name == "beta"


def test_an_agent_may_change_the_case_of_its_own_name(tenant, make_agent, api_as):
    agent = make_agent(tenant, name="alpha")

    response = api_as(tenant).patch(f"/api/v1/agents/{agent.pk}/", {"name": "Alpha"}, format="json")

    assert response.status_code == 200
    agent.refresh_from_db()
    assert (agent.name, agent.name_key) == ("Alpha", agent_name_key("alpha"))


def test_the_database_holds_look_alike_names_unique_per_tenant(tenant, other_tenant, make_agent):
    make_agent(tenant, name="alpha")

    with pytest.raises(IntegrityError), transaction.atomic():
        Agent.objects.create(tenant=tenant, name="ALPHA")
    assert make_agent(other_tenant, name="ALPHA").name == "ALPHA"


# --- The ledger's human actors, and the labels of tenants and keys -----------------------------


@pytest.mark.parametrize(
    "actor",
    [
        "human:b\u043eb",  # Cyrillic o
        "human:bob\u202e",
        "human:\u200bbob",
        "human:",
        "human:bob:admin",
        "human:\uff42\uff4f\uff42",  # fullwidth: not in normal form
    ],
)
def test_a_client_cannot_append_as_a_disguised_person(tenant, api_as, actor):
    api = api_as(tenant)
    events = Event.objects.filter(tenant=tenant).count()

    response = api.post("/api/v1/events/", {"kind": "user.injected", "actor": actor}, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_actor"
    assert Event.objects.filter(tenant=tenant).count() == events


def test_a_client_appends_as_a_person_by_a_plain_name(tenant, api_as):
    response = api_as(tenant).post(
        "/api/v1/events/", {"kind": "user.injected", "actor": "human:bob"}, format="json"
    )

    assert response.status_code == 201, response.content


@pytest.mark.parametrize("name", ["deploy\u202ekey", "key\u200b", "al\u2028pha", "\u2066x"])
def test_an_api_key_name_must_be_visible_text(tenant, api_as, name):
    api = api_as(tenant)
    keys = ApiKey.objects.filter(tenant=tenant).count()

    response = api.post("/api/v1/api-keys/", {"name": name, "role": "agent"}, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_api_key_name"
    assert ApiKey.objects.filter(tenant=tenant).count() == keys


def test_tenant_names_and_slugs_are_checked_by_the_service(db):
    with pytest.raises(ApiError) as bad_name:
        services.tenant_create(name="Acme\u202e", slug="acme")
    with pytest.raises(ApiError) as bad_slug:
        services.tenant_create(name="Acme", slug="ac me")

    assert bad_name.value.error_code == "invalid_tenant_name"
    assert bad_slug.value.error_code == "invalid_tenant_slug"
    assert services.tenant_create(name=" \uff21cme ", slug="acme").name == "Acme"


# --- The admin goes through the same services ------------------------------------------------


@pytest.fixture
def admin_client(db):
    user = get_user_model().objects.create_superuser(username="root", password="x-12345678")
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_refuses_a_look_alike_name_on_the_form(admin_client, tenant, make_agent):
    make_agent(tenant, name="alpha")

    for name in ["ALPHA", "system", "human:bob"]:
        response = admin_client.post(
            "/admin/ledger/agent/add/", {"tenant": tenant.pk, "name": name, "model": ""}
        )
        assert response.status_code == 200  # the form again, with its error
        assert response.context["adminform"].form.errors["name"], name
    assert Agent.objects.filter(tenant=tenant).count() == 1


def test_the_admin_creates_and_renames_agents_as_ledger_events(admin_client, tenant):
    created = admin_client.post(
        "/admin/ledger/agent/add/", {"tenant": tenant.pk, "name": "\uff21tlas", "model": "m"}
    )
    agent = Agent.objects.get(tenant=tenant)
    renamed = admin_client.post(
        f"/admin/ledger/agent/{agent.pk}/change/", {"name": "Atlas2", "model": "m"}
    )

    assert (created.status_code, renamed.status_code) == (302, 302)
    agent.refresh_from_db()
    assert agent.name == "Atlas2"
    events = Event.objects.filter(tenant=tenant, kind__startswith="agent.").order_by("seq")
    assert [(e.kind, e.actor) for e in events] == [
        ("agent.registered", "human:root"),
        ("agent.updated", "human:root"),
    ]
    assert events[0].payload["name"] == "Atlas"
    assert events[1].payload["changes"] == {"name": "Atlas2"}
