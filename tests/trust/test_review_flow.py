"""The review flow (issue 20, item 3): the filtered, paged list of overrides, bulk confirm, and
one override at a time with its diff and its decisions."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains

from ledger import services as ledger_services
from ledger.models import Event, Role
from trust.models import TrustScoreChange
from trust.pages.diffs import word_diff
from trust.rounds import overrides

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert('pwned')</script>"
HTMX: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}
CONFIRMED = "override.confirmed"


def _log(agent, *, hours_ago: float, decided_by: str = "sam", round_id: str = "r1", **texts):
    now = timezone.now()
    return overrides.override_log(
        agent=agent,
        agent_output=texts.get("output", "Ship the report as drafted."),
        human_decision=texts.get("decision", "Hold the report until the figures are checked."),
        decided_by=decided_by,
        round_id=round_id,
        occurred_at=now - timedelta(hours=hours_ago),
        actor="orchestrator",
    )


@pytest.fixture
def queue(tenant, make_agent):
    """Two agents; overrides waiting, confirmed, regretted and long settled."""
    critic = make_agent(tenant, name="Critic1")
    builder = make_agent(tenant, name="Builder2")
    rows = {
        "w1": _log(critic, hours_ago=3, decided_by="sam", round_id="r1"),
        "w2": _log(critic, hours_ago=2, decided_by="kim", round_id="r2"),
        "w3": _log(builder, hours_ago=1, decided_by="sam", round_id="r1"),
        "confirmed": _log(builder, hours_ago=4, decided_by="kim", round_id="r3"),
        "regretted": _log(critic, hours_ago=5, decided_by="sam", round_id="r3"),
        "old": _log(critic, hours_ago=24 * 30, decided_by="sam", round_id="r0"),
    }
    overrides.override_confirm(override=rows["confirmed"], actor="human:lee")
    overrides.override_revert(
        override=rows["regretted"], reverted_by="human:lee", note="wrong call", actor="human:lee"
    )
    return {"critic": critic, "builder": builder, **rows}


def _ids(response) -> list[int]:
    return [row["override"].pk for row in response.context["rows"]]


# --- The list ----------------------------------------------------------------------------------


def test_the_list_shows_what_waits_nearest_deadline_first(login, queue):
    response = login().get("/trust/review/overrides/")

    assert response.status_code == 200
    assert _ids(response) == [queue["w1"].pk, queue["w2"].pk, queue["w3"].pk]
    assertContains(response, f'name="ids" value="{queue["w1"].pk}" form="bulk-confirm"')
    assertContains(response, 'id="bulk-confirm"')


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"status": "confirmed"}, ["confirmed"]),
        ({"status": "regretted"}, ["regretted"]),
        ({"status": "stands"}, ["old"]),
        ({"status": "any"}, ["w3", "w2", "w1", "confirmed", "regretted", "old"]),
        ({"decided_by": "sam"}, ["w1", "w3"]),
        ({"round": "r1"}, ["w1", "w3"]),
        ({"round": "r1", "decided_by": "sam", "status": "any"}, ["w3", "w1"]),
        ({"decided_by": "kim", "status": "any"}, ["w2", "confirmed"]),
        ({"status": "bogus"}, ["w1", "w2", "w3"]),
    ],
)
def test_filters_combine(login, queue, query, expected):
    response = login().get("/trust/review/overrides/", query)

    assert _ids(response) == [queue[name].pk for name in expected]


def test_the_agent_filter_combines_and_ignores_another_tenants_agent(
    login, queue, other_tenant, make_agent
):
    stranger = make_agent(other_tenant, name="Stranger")
    _log(stranger, hours_ago=1)
    client = login()

    mine = client.get("/trust/review/overrides/", {"agent": queue["critic"].pk, "status": "any"})
    foreign = client.get("/trust/review/overrides/", {"agent": stranger.pk})

    assert _ids(mine) == [queue[n].pk for n in ("w2", "w1", "regretted", "old")]
    # Not a choice here: the filter falls back to any agent of this tenant, never the stranger's.
    assert _ids(foreign) == [queue[n].pk for n in ("w1", "w2", "w3")]


def test_history_pages_beyond_seven_days_in_a_stable_order(login, tenant, make_agent):
    agent = make_agent(tenant, name="Critic1")
    logged = [_log(agent, hours_ago=24 * (10 + day)) for day in range(25)]
    client = login()

    first = client.get("/trust/review/overrides/", {"status": "any"})
    second = client.get(
        "/trust/review/overrides/",
        {"status": "any", "page": 2},
        **HTMX,
        HTTP_HX_TARGET="review-list",
    )

    assert _ids(first) + _ids(second) == [o.pk for o in logged]  # newest first, none twice
    assert second.templates[0].name == "trust/partials/review_list.html"
    assertContains(first, "?status=any&amp;page=2")


def test_the_list_escapes_agent_text(login, tenant, make_agent):
    agent = make_agent(tenant, name="Critic1")
    _log(agent, hours_ago=1, output=SCRIPT, decision=SCRIPT)

    response = login().get("/trust/review/overrides/")

    assertNotContains(response, SCRIPT)
    assertContains(response, "&lt;script&gt;")


def test_the_list_needs_a_seat(client, queue):
    assert client.get("/trust/review/overrides/").status_code == 302


# --- Bulk confirm ------------------------------------------------------------------------------


def test_bulk_confirm_writes_one_event_each(login, queue):
    picked = [queue["w1"].pk, queue["w3"].pk]

    response = login().post("/trust/review/overrides/confirm", {"ids": picked}, **HTMX)

    assert response.status_code == 200
    assertContains(response, f"Confirmed 2 overrides (#{picked[0]}, #{picked[1]})")
    # The confirmed rows come back out of band, to be swapped where they are.
    assertContains(response, f'id="override-{picked[0]}" class="review-row review-row--confirmed"')
    events = Event.objects.filter(kind=CONFIRMED, actor="human:ada")
    assert sorted(e.payload["override_id"] for e in events) == sorted(picked)


@pytest.mark.parametrize("bad", ["foreign", "regretted", "not-a-number"])
def test_bulk_confirm_writes_nothing_when_one_id_is_bad(
    login, queue, other_tenant, make_agent, bad
):
    foreign = _log(make_agent(other_tenant, name="Stranger"), hours_ago=1)
    bad_id = {"foreign": foreign.pk, "regretted": queue["regretted"].pk, "not-a-number": "x"}[bad]
    client = login()
    before = Event.objects.count()

    response = client.post(
        "/trust/review/overrides/confirm", {"ids": [queue["w1"].pk, bad_id]}, **HTMX
    )

    assert response.status_code == 200
    assertContains(response, "nothing was confirmed.")
    assert Event.objects.count() == before


def test_bulk_confirm_without_htmx_redirects_back_with_a_message(login, queue):
    client = login()
    response = client.post(
        "/trust/review/overrides/confirm",
        {"ids": [queue["w2"].pk], "next": "/trust/review/overrides/?decided_by=kim"},
        follow=True,
    )

    assert response.redirect_chain[-1][0] == "/trust/review/overrides/?decided_by=kim"
    assertContains(response, f"Confirmed 1 override (#{queue['w2'].pk})")
    offsite = client.post(
        "/trust/review/overrides/confirm", {"ids": [queue["w3"].pk], "next": "https://evil.test/"}
    )
    assert offsite["Location"] == "/trust/review/overrides/"


def test_bulk_confirm_needs_the_csrf_token(tenant, queue):
    user = get_user_model().objects.create_user(username="ada", password="pw-12345678")
    ledger_services.membership_grant(tenant=tenant, user=user, role=Role.REVIEWER)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)

    response = client.post("/trust/review/overrides/confirm", {"ids": [queue["w1"].pk]})

    assert response.status_code == 403
    assert not Event.objects.filter(kind=CONFIRMED, actor="human:ada").exists()


# --- One at a time -----------------------------------------------------------------------------


def test_the_detail_shows_both_texts_whole_and_an_escaped_word_diff(login, tenant, make_agent):
    agent = make_agent(tenant, name="Critic1")
    long_output = "Ship it. " + "word " * 100 + SCRIPT
    override = _log(agent, hours_ago=1, output=long_output, decision="Hold it. " + SCRIPT)

    response = login().get(f"/trust/review/overrides/{override.pk}/")

    assert response.status_code == 200
    body = response.content.decode()
    assert SCRIPT not in body
    assert body.count("&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;") >= 3
    assertContains(response, "word " * 100)  # whole, not cut at 160 characters
    assertContains(response, "<del>Ship </del><ins>Hold </ins>")
    assertContains(response, 'aria-keyshortcuts="c"')
    assertContains(response, "<kbd>j</kbd> or <kbd>n</kbd> next")


def test_the_word_diff_marks_words_not_characters():
    diff = word_diff("Ship the report as drafted.", "Hold the report until checked.")

    assert [(s.op, s.text) for s in diff.segments] == [
        ("del", "Ship "),
        ("ins", "Hold "),
        ("same", "the report "),
        ("del", "as drafted."),
        ("ins", "until checked."),
    ]
    assert (diff.removed, diff.added) == (3, 3)


def test_another_tenants_override_is_a_404(login, other_tenant, make_agent):
    foreign = _log(make_agent(other_tenant, name="Stranger"), hours_ago=1)
    client = login()

    assert client.get(f"/trust/review/overrides/{foreign.pk}/").status_code == 404
    assert client.post(f"/trust/review/overrides/{foreign.pk}/confirm").status_code == 404
    assert not Event.objects.filter(kind=CONFIRMED).exists()


def test_the_detail_knows_its_neighbours_among_the_filters(login, queue):
    response = login().get(f"/trust/review/overrides/{queue['w3'].pk}/", {"decided_by": "sam"})

    around = response.context["around"]
    assert (around.previous, around.next, around.position, around.total) == (
        queue["w1"].pk,
        None,
        2,
        2,
    )
    assertContains(response, f"/trust/review/overrides/{queue['w1'].pk}/?decided_by=sam")


def test_confirming_moves_on_to_the_next_waiting_override(login, queue):
    response = login().post(
        f"/trust/review/overrides/{queue['w1'].pk}/confirm?decided_by=sam",
        **HTMX,
        HTTP_HX_TARGET="review-item",
    )

    assert response.context["override"].pk == queue["w3"].pk  # w2 is kim's
    assert response["HX-Push-Url"] == f"/trust/review/overrides/{queue['w3'].pk}/?decided_by=sam"
    assertContains(response, f"Confirmed override #{queue['w1'].pk} of Critic1")
    assert Event.objects.filter(kind=CONFIRMED, payload__override_id=queue["w1"].pk).exists()


def test_regretting_with_a_note_moves_on_and_offers_an_undo(login, queue):
    client = login()
    w2 = queue["w2"]

    response = client.post(f"/trust/review/overrides/{w2.pk}/regret", {"note": SCRIPT}, **HTMX)

    assert response.context["override"].pk == queue["w3"].pk
    assertContains(response, f"Marked override #{w2.pk} regretted: Critic1&#x27;s trust")
    assertContains(response, f"/trust/review/overrides/{w2.pk}/withdraw")
    w2.refresh_from_db()
    assert (w2.reverted_by, w2.revert_note) == ("human:ada", SCRIPT)

    undone = client.post(f"/trust/review/overrides/{w2.pk}/withdraw", {"note": "slipped"}, **HTMX)

    assert undone.context["override"].pk == w2.pk  # the undo stays on the override it undid
    assertContains(undone, f"Withdrew the revert of override #{w2.pk}")
    w2.refresh_from_db()
    assert w2.reverted_at is None
    change = TrustScoreChange.objects.filter(agent=w2.agent).latest("id")
    assert (change.reason, change.cause["note"]) == ("override_revert_withdrawn", "slipped")


def test_a_refused_step_stays_and_says_why(login, queue):
    response = login().post(f"/trust/review/overrides/{queue['regretted'].pk}/confirm", **HTMX)

    assert response.context["override"].pk == queue["regretted"].pk
    assertContains(response, "already reverted")
    assert response["HX-Push-Url"] == f"/trust/review/overrides/{queue['regretted'].pk}/"


def test_the_last_decision_says_nothing_is_left(login, tenant, make_agent):
    only = _log(make_agent(tenant, name="Critic1"), hours_ago=1)

    response = login().post(f"/trust/review/overrides/{only.pk}/confirm", **HTMX)

    assertContains(response, "Nothing left to review")


def test_an_unknown_step_is_a_404(login, queue):
    assert login().post(f"/trust/review/overrides/{queue['w1'].pk}/delete").status_code == 404


def test_steps_without_htmx_redirect_to_the_next_override(login, queue):
    response = login().post(f"/trust/review/overrides/{queue['w1'].pk}/confirm")

    assert response.status_code == 302
    assert response["Location"] == f"/trust/review/overrides/{queue['w2'].pk}/"


def test_the_flow_s_writes_replay_from_the_ledger(login, queue):
    client = login()
    client.post(f"/trust/review/overrides/{queue['w1'].pk}/regret", {"note": "bad"}, **HTMX)
    client.post("/trust/review/overrides/confirm", {"ids": [queue["w2"].pk]}, **HTMX)
    out = StringIO()

    call_command("rebuild_projections", "--projection", "trust", "--check", stdout=out)

    assert "DIFFERED" not in out.getvalue()


# --- The agent page's words link to the override and the round ------------------------------


def test_score_changes_link_to_the_override_and_its_round(login, queue):
    response = login().get(f"/trust/agents/{queue['critic'].pk}/")

    regretted = queue["regretted"].pk
    assertContains(
        response, f'<a href="/trust/review/overrides/{regretted}/">Override #{regretted}</a>'
    )
    assertContains(response, 'in round <a class="mono" href="/trust/review/overrides/?round=r3')
    assertContains(response, "wrong call")


def test_the_flow_s_pages_read_a_bounded_number_of_queries(
    login, tenant, make_agent, django_assert_max_num_queries
):
    agents = [make_agent(tenant, name=f"Agent{i}") for i in range(3)]
    logged = [_log(agents[i % 3], hours_ago=1 + i / 10) for i in range(30)]
    client = login()
    client.get("/trust/review/overrides/")  # the session and seat, read once per request anyway

    # However many rows: seat, agents, deciders, count, page, confirmations, trust evidence...
    with django_assert_max_num_queries(16):
        client.get("/trust/review/overrides/", {"status": "any"})
    with django_assert_max_num_queries(16):
        client.get(f"/trust/review/overrides/{logged[10].pk}/")
