"""The trust pages: overview, agent page, review queue, their HTMX partials and actions."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains

from ledger import services as ledger_services
from ledger.models import Event, Role
from tests.trust.governance_rows import (
    agent_with,
    dissent_row,
    flag_row,
    override_row,
    proposal_row,
)
from trust.governance.services import CriterionDraft, rubric_version_create
from trust.models import GamingFlag, Override, RubricProposal, RubricVersion, TrustScoreChange
from trust.rounds import overrides
from trust.scores import services as score_services

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert('pwned')</script>"
HTMX: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Critic1", model="gpt-4o", primary_role="critic")


@pytest.fixture
def waiting_override(agent):
    now = timezone.now()
    return overrides.override_log(
        agent=agent,
        agent_output="Ship it.",
        human_decision="Hold it.",
        decided_by="sam",
        round_id="r1",
        occurred_at=now - timedelta(hours=1),
        actor="orchestrator",
    )


def _hx(client: Client, url: str, target: str = "", **data):
    headers: dict[str, Any] = {**HTMX, **({"HTTP_HX_TARGET": target} if target else {})}
    return client.get(url, data, **headers)


# --- Who may see what --------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/trust/", "/trust/review/"])
def test_pages_send_anonymous_visitors_to_log_in(client, url):
    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_a_person_without_a_tenant_seat_is_refused(client, tenant):
    user = get_user_model().objects.create_user(username="nobody", password="pw-12345678")
    client.force_login(user)

    assert client.get("/trust/").status_code == 403


def test_another_tenants_agent_override_flag_and_proposal_are_404(
    login, other_tenant, make_agent, tenant
):
    client = login(Role.ADMIN)
    theirs = make_agent(other_tenant, name="Theirs")
    override = override_row(theirs, timezone.now())
    flag = flag_row(theirs)
    proposal = proposal_row(other_tenant)

    assert client.get(f"/trust/agents/{theirs.pk}/").status_code == 404
    assert client.get(f"/trust/agents/{theirs.pk}/export.json").status_code == 404
    assert client.post(f"/trust/overrides/{override.pk}/revert").status_code == 404
    assert client.post(f"/trust/overrides/{override.pk}/confirm").status_code == 404
    assert (
        client.post(f"/trust/flags/{flag.pk}/review", {"decision": "dismissed"}).status_code == 404
    )
    assert (
        client.post(f"/trust/proposals/{proposal.pk}/decide", {"decision": "accept"}).status_code
        == 404
    )
    override.refresh_from_db()
    assert override.reverted_at is None
    assert not Event.objects.filter(tenant=other_tenant, kind="override.confirmed").exists()


# --- Overview ----------------------------------------------------------------------------------


def test_the_overview_lists_agents_with_score_trend_probation_flags_and_rates(
    login, tenant, make_agent, django_assert_max_num_queries
):
    now = timezone.now()
    critic = agent_with(make_agent(tenant, name="Critic1"), trust=0.8, rounds=9)
    rookie = make_agent(tenant, name="Rookie")
    for day, impact in enumerate([True, True, False, None]):
        dissent_row(critic, now - timedelta(days=day + 1), impact=impact)
    override_row(critic, now - timedelta(days=2), regret=True)
    override_row(critic, now - timedelta(days=3))
    score_services.trust_recompute(tenant=tenant, reason="recomputed")
    flag_row(critic)
    client = login()

    with django_assert_max_num_queries(10):
        response = client.get("/trust/")

    assert response.status_code == 200
    rows = {row["agent"].name: row for row in response.context["rows"]}
    assert rows["Critic1"]["agent"].open_flags == 1
    assert rows["Critic1"]["agent"].impact_rate == pytest.approx(2 / 3)
    assert rows["Critic1"]["agent"].regret_rate == pytest.approx(0.5)
    assert rows["Critic1"]["on_probation"] is False
    assert rows["Critic1"]["sparkline"]  # one trust change at least
    assert rows["Rookie"]["on_probation"] is True
    assert rows["Rookie"]["agent"].impact_rate is None
    assertContains(response, f'href="/trust/agents/{rookie.pk}/"')
    assertContains(response, "On probation")
    assertContains(response, "67 %")
    assertContains(response, "50 %")
    assertContains(response, "<polyline")


def test_the_overview_table_partial_filters_sorts_and_pages(login, tenant, make_agent):
    for n in range(30):
        agent_with(make_agent(tenant, name=f"Agent{n:02d}"), trust=n / 30, rounds=10)
    make_agent(tenant, name="Newcomer")  # on probation, trust 0.6
    client = login()

    first = _hx(client, "/trust/", sort="-trust")
    second = _hx(client, "/trust/", sort="-trust", page=2)
    probation = _hx(client, "/trust/", probation="yes")
    searched = _hx(client, "/trust/", q="agent2")

    assert first.status_code == 200
    assert "<html" not in first.content.decode()
    # The sort links send the filter form's fields as typed; the form's sort field is the
    # page's own, set by the link clicked, never swapped out of band (issue 20, item 10).
    assertContains(first, 'hx-include="#trust-filters [name=q], #trust-filters select"')
    assertNotContains(first, "hx-swap-oob")
    names = [row["agent"].name for row in first.context["rows"]]
    assert len(names) == 25
    assert names[0] == "Agent29"
    assert [row["agent"].name for row in second.context["rows"]][-1] == "Agent00"
    assert [row["agent"].name for row in probation.context["rows"]] == ["Newcomer"]
    assert {row["agent"].name for row in searched.context["rows"]} == {
        f"Agent2{n}" for n in range(10)
    }
    assertContains(first, 'aria-sort="descending"')


def test_the_overview_ignores_a_bad_sort_or_filter(login, agent):
    response = login().get("/trust/", {"sort": "password; drop", "probation": "maybe"})

    assert response.status_code == 200
    assert [row["agent"].name for row in response.context["rows"]] == ["Critic1"]


# --- Agent page --------------------------------------------------------------------------------


def test_the_agent_page_shows_chart_data_components_history_and_stats(
    login, agent, django_assert_max_num_queries
):
    now = timezone.now()
    for day in range(3):
        dissent_row(agent, now - timedelta(days=day + 1), citations=["Accuracy"], impact=True)
    override = override_row(agent, now - timedelta(days=2))
    score_services.trust_recompute(tenant=agent.tenant, agent_ids=[agent.pk], reason="recomputed")
    overrides.override_revert(override=override, reverted_by="ada", actor="ada")
    client = login()

    with django_assert_max_num_queries(20):
        response = client.get(f"/trust/agents/{agent.pk}/")

    assert response.status_code == 200
    chart = response.context["chart_data"]
    assert chart["reasons"] == ["initial", "recomputed", "override_regret"]
    assert chart["scores"][0] == 0.6
    assert chart["changes"][-1] < 0  # the regret lowered the score
    assertContains(response, 'id="trust-chart-data" type="application/json"')
    assertContains(response, 'id="trust-chart"')
    assertContains(response, "override_regret")
    assertContains(response, "Components of the current score")
    assertContains(response, "Rubric citation diversity")
    assertContains(response, "Regretted")
    assertContains(response, f'href="/trust/agents/{agent.pk}/export.json"')
    assert response.context["diversity"].counts == [("Accuracy", 3)]
    assert response.context["stats"].total_dissents == 3
    changes = TrustScoreChange.objects.filter(agent=agent).count()
    assert len(response.context["chart"]) == changes + 1


def test_dissent_text_with_a_script_tag_is_escaped(login, agent):
    dissent = dissent_row(agent, timezone.now() - timedelta(hours=1))
    dissent.text = SCRIPT
    dissent.save()
    agent.name = "Crit<b>ic</b>"
    agent.save()
    client = login()

    page = client.get(f"/trust/agents/{agent.pk}/")
    partial = _hx(client, f"/trust/agents/{agent.pk}/", target="dissents")

    for response in (page, partial):
        assertNotContains(response, SCRIPT)
        assertContains(response, "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;")
    assertNotContains(page, "Crit<b>ic</b>")


def test_chart_data_goes_through_json_script_and_page_has_no_inline_script_or_style(login, agent):
    TrustScoreChange.objects.create(
        tenant=agent.tenant, agent=agent, at=timezone.now(), score=0.5, reason="</script><b>x"
    )

    response = login().get(f"/trust/agents/{agent.pk}/")
    html = response.content.decode()

    assert "</script><b>x" not in html
    assert "\\u003C/script\\u003E\\u003Cb\\u003Ex" in html
    assert " style=" not in html
    assert " onclick=" not in html
    # Every <script> either loads a file or is inert JSON data.
    for tag in html.split("<script")[1:]:
        opening = tag.split(">", 1)[0]
        assert " src=" in opening or 'type="application/json"' in opening


@pytest.mark.parametrize("target", ["dissents", "overrides"])
def test_the_agent_history_partials_page_through_evidence(login, agent, target):
    now = timezone.now()
    for n in range(25):
        dissent_row(agent, now - timedelta(hours=n + 1))
        override_row(agent, now - timedelta(hours=n + 1))
    client = login()

    response = _hx(client, f"/trust/agents/{agent.pk}/", target=target, **{target: 2})

    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html
    assert "Page 2 of 2" in html
    assert "21\u201325 of 25" in html
    assert "trust-chart" not in html


def test_the_export_downloads_the_agents_interchange_document(login, agent):
    dissent_row(agent, timezone.now() - timedelta(hours=1))

    response = login().get(f"/trust/agents/{agent.pk}/export.json")

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="Critic1.json"'
    document = json.loads(response.content)
    assert document["agent_name"] == "Critic1"
    assert len(document["dissent_history"]) == 1


# --- Review queue ------------------------------------------------------------------------------


@pytest.fixture
def queue(tenant, agent, waiting_override):
    """A waiting override, a settled one, an open gaming flag and a pending rubric proposal."""
    now = timezone.now()
    settled = override_row(agent, now - timedelta(days=2))
    flag = flag_row(agent)
    rubric_version_create(tenant=tenant, criteria=[CriterionDraft("Accuracy")], actor="admin")
    proposal = proposal_row(tenant, override=settled, rationale=SCRIPT)
    return {"waiting": waiting_override, "settled": settled, "flag": flag, "proposal": proposal}


def test_the_review_queue_shows_waiting_and_recent_overrides_flags_and_proposals(
    login, queue, django_assert_max_num_queries
):
    client = login()

    with django_assert_max_num_queries(12):
        response = client.get("/trust/review/")

    assert response.status_code == 200
    assert [r["override"].pk for r in response.context["waiting_rows"]] == [queue["waiting"].pk]
    assert [r["override"].pk for r in response.context["recent_rows"]] == [queue["settled"].pk]
    assertContains(response, f'id="override-{queue["waiting"].pk}"')
    assertContains(response, f'id="flag-{queue["flag"].pk}"')
    assertContains(response, f'id="proposal-{queue["proposal"].pk}"')
    assertNotContains(response, SCRIPT)
    # A reviewer sees proposals but no way to decide them.
    assertContains(response, "Waiting for an admin")
    assertNotContains(response, f"/trust/proposals/{queue['proposal'].pk}/decide")


def test_the_waiting_partial_pages(login, agent):
    now = timezone.now()
    for n in range(30):
        override_row(agent, now - timedelta(minutes=n + 1))

    response = _hx(login(), "/trust/review/", target="waiting", waiting=2)

    assert response.status_code == 200
    assert "<html" not in response.content.decode()
    assert len(response.context["waiting_rows"]) == 10
    assertContains(response, "Page 2 of 2")


def test_a_reviewer_marks_an_override_regretted_and_the_row_updates_in_place(
    login, waiting_override, agent
):
    before = agent.trust_score
    client = login(username="ada")

    response = client.post(f"/trust/overrides/{waiting_override.pk}/revert", **HTMX)

    assert response.status_code == 200
    html = response.content.decode()
    assert html.strip().startswith(f'<tr id="override-{waiting_override.pk}"')
    assert "Regretted" in html
    assert "reverted by human:ada" in html
    waiting_override.refresh_from_db()
    assert waiting_override.regret is True
    assert waiting_override.reverted_by == "human:ada"
    event = Event.objects.filter(tenant=agent.tenant, kind="override.reverted").get()
    assert event.actor == "human:ada"
    assert event.payload["override_ids"] == [waiting_override.pk]
    agent.refresh_from_db()
    assert agent.trust_score < before
    assert TrustScoreChange.objects.filter(agent=agent, reason="override_regret").exists()


def test_marking_an_override_twice_shows_the_conflict_and_changes_nothing(login, waiting_override):
    client = login()
    client.post(f"/trust/overrides/{waiting_override.pk}/revert", **HTMX)
    events = Event.objects.count()

    again = client.post(f"/trust/overrides/{waiting_override.pk}/revert", **HTMX)

    assertContains(again, "already reverted")
    assert Event.objects.count() == events


def test_a_revert_note_is_escaped_in_the_row_and_on_the_agent_page(login, waiting_override, agent):
    client = login(username="ada")

    row = client.post(f"/trust/overrides/{waiting_override.pk}/revert", {"note": SCRIPT}, **HTMX)
    page = client.get(f"/trust/agents/{agent.pk}/")

    for response in (row, page):
        assertNotContains(response, SCRIPT)
        assertContains(response, "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;")
    event = Event.objects.get(kind="override.reverted")
    assert event.payload["note"] == SCRIPT


def test_a_reviewer_withdraws_a_revert_and_the_row_is_open_again(login, waiting_override, agent):
    agent.refresh_from_db()
    before = agent.trust_score
    client = login(username="ada")
    client.post(f"/trust/overrides/{waiting_override.pk}/revert", {"note": "x"}, **HTMX)

    response = client.post(f"/trust/overrides/{waiting_override.pk}/revert/withdraw", **HTMX)

    assertContains(response, "Mark reverted (regret)")
    assertNotContains(response, "Regretted")
    waiting_override.refresh_from_db()
    assert (waiting_override.regret, waiting_override.reverted_at) == (False, None)
    assert Event.objects.get(kind="override.revert_withdrawn").actor == "human:ada"
    agent.refresh_from_db()
    assert agent.trust_score == before


def test_withdrawing_an_open_override_shows_the_conflict_and_changes_nothing(
    login, waiting_override
):
    client = login()
    events = Event.objects.count()

    response = client.post(f"/trust/overrides/{waiting_override.pk}/revert/withdraw", **HTMX)

    assertContains(response, "not reverted")
    assert Event.objects.count() == events


def test_the_queue_says_what_marking_regret_would_make_the_trust(login, waiting_override, agent):
    client = login(username="ada")
    page = client.get("/trust/review/")
    (row,) = page.context["waiting_rows"]
    preview = row["preview"]
    agent.refresh_from_db()

    client.post(f"/trust/overrides/{waiting_override.pk}/revert", **HTMX)

    regretted = agent.trust_score
    agent.refresh_from_db()
    assert (preview.current, preview.if_regretted) == (regretted, agent.trust_score)
    assert preview.if_regretted < preview.current
    assertContains(page, f'if regretted <span class="num down">{preview.if_regretted:.3f}</span>')


def test_the_agent_page_tells_each_score_change_in_words_with_its_links(
    login, waiting_override, agent
):
    client = login(username="ada")
    agent.refresh_from_db()
    logged = agent.trust_score
    client.post(f"/trust/overrides/{waiting_override.pk}/revert", {"note": "wrong call"}, **HTMX)
    agent.refresh_from_db()
    regretted = agent.trust_score
    client.post(
        f"/trust/overrides/{waiting_override.pk}/revert/withdraw", {"note": "a misclick"}, **HTMX
    )

    page = client.get(f"/trust/agents/{agent.pk}/")

    html = page.content.decode()
    pk = waiting_override.pk
    link = f'<a href="/trust/review/overrides/{pk}/">Override #{pk}</a>'
    actor = '<a href="/ledger/?actor=human%3Aada">human:ada</a>'
    assert f"{link} marked regretted by {actor}" in html
    round_ = (
        ' in round <a class="mono" href="/trust/review/overrides/?round=r1&amp;status=any">r1</a>'
    )
    assert f"{link} marked regretted by {actor}{round_}: {logged:.2f} → {regretted:.2f}" in html
    assert f"Revert of {link} withdrawn by {actor}{round_}: {regretted:.2f} → {logged:.2f}" in html
    assert f"{link} logged, decided by" in html
    assertContains(page, "wrong call")
    assertContains(page, '<q class="change-note">a misclick</q>')  # the undo's note
    assertContains(page, f'id="override-history-{waiting_override.pk}"')


def test_a_reviewer_confirms_an_override_as_a_ledger_event_in_their_name(login, waiting_override):
    client = login(username="grace")

    response = client.post(f"/trust/overrides/{waiting_override.pk}/confirm", **HTMX)

    assertContains(response, "Confirmed")
    assertContains(response, "by human:grace")
    event = Event.objects.get(kind="override.confirmed")
    assert event.actor == "human:grace"
    assert event.payload["override_id"] == waiting_override.pk
    waiting_override.refresh_from_db()
    assert waiting_override.regret is False
    queue_page = client.get("/trust/review/")
    assert queue_page.context["waiting_rows"][0]["confirmation"].by == "human:grace"


def test_the_agent_page_shows_a_confirmed_override_as_the_review_pages_do(
    login, waiting_override, agent
):
    # One confirmed before its deadline (it would show "Waiting"), one after (it would show
    # "Stands"), one left unconfirmed: only the first two are confirmed on every page.
    past = override_row(agent, timezone.now() - timedelta(days=3))
    unconfirmed = override_row(agent, timezone.now() - timedelta(days=4))
    client = login(username="grace")
    for override in (waiting_override, past):
        client.post(f"/trust/overrides/{override.pk}/confirm", **HTMX)

    page = client.get(f"/trust/agents/{agent.pk}/")
    partial = _hx(client, f"/trust/agents/{agent.pk}/", target="overrides")
    queue = client.get("/trust/review/overrides/", {"status": "any"})

    listed = {row["override"].pk: row["shown"]["outcome"] for row in queue.context["rows"]}
    for response in (page, partial):
        shown = {row["override"].pk: row["outcome"] for row in response.context["override_rows"]}
        assert shown == listed
        assert [shown[o.pk]["state"] for o in (waiting_override, past, unconfirmed)] == [
            "confirmed",
            "confirmed",
            "stands",
        ]
        html = response.content.decode()
        row = html.split(f'id="override-history-{past.pk}"', 1)[1].split("</tr>", 1)[0]
        assert '<span class="badge badge--ok">Confirmed</span>' in row
        assert "by human:grace" in row
        assert "Stands" not in row


def test_without_htmx_an_action_redirects_back_to_the_queue(login, waiting_override):
    response = login().post(f"/trust/overrides/{waiting_override.pk}/revert")

    assert response.status_code == 302
    assert response["Location"] == "/trust/review/"


def test_actions_need_the_csrf_token(tenant, waiting_override):
    user = get_user_model().objects.create_user(username="ada", password="pw-12345678")
    ledger_services.membership_grant(tenant=tenant, user=user, role=Role.ADMIN)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)

    refused = client.post(f"/trust/overrides/{waiting_override.pk}/revert", **HTMX)
    page = client.get("/trust/review/")
    token = page.cookies["csrftoken"].value
    allowed = client.post(
        f"/trust/overrides/{waiting_override.pk}/revert", HTTP_X_CSRFTOKEN=token, **HTMX
    )

    assert refused.status_code == 403
    assert allowed.status_code == 200
    waiting_override.refresh_from_db()
    assert waiting_override.reverted_by == "human:ada"


def test_pages_render_the_csrf_token_into_htmx_headers(login):
    response = login().get("/trust/review/")

    assertContains(response, 'hx-headers=\'{"X-CSRFToken": "')


@pytest.mark.parametrize(
    ("decision", "status", "label"),
    [("dismissed", "dismissed", "Cleared"), ("confirmed", "confirmed", "Escalated")],
)
def test_a_reviewer_clears_or_escalates_a_gaming_flag(login, queue, decision, status, label):
    flag = queue["flag"]

    response = login(username="ada").post(
        f"/trust/flags/{flag.pk}/review", {"decision": decision, "note": "looked at it"}, **HTMX
    )

    assertContains(response, label)
    assertContains(response, f'id="flag-{flag.pk}"')
    flag.refresh_from_db()
    assert flag.status == status
    assert flag.reviewed_by == "human:ada"
    assert Event.objects.get(kind="gaming.flag_reviewed").actor == "human:ada"


def test_a_flag_review_without_a_decision_is_refused_in_the_row(login, queue):
    response = login().post(f"/trust/flags/{queue['flag'].pk}/review", {"note": "x"}, **HTMX)

    assertContains(response, "Choose to clear or escalate")
    queue["flag"].refresh_from_db()
    assert queue["flag"].status == GamingFlag.Status.OPEN


def test_a_reviewer_cannot_decide_a_rubric_proposal(login, queue):
    proposal = queue["proposal"]

    response = login(Role.REVIEWER).post(
        f"/trust/proposals/{proposal.pk}/decide", {"decision": "accept"}, **HTMX
    )

    assert response.status_code == 403
    proposal.refresh_from_db()
    assert proposal.status == RubricProposal.Status.PENDING
    assert not Event.objects.filter(kind="rubric.proposal_decided").exists()


def test_an_admin_accepts_a_rubric_proposal_into_a_new_version(login, queue, tenant):
    proposal = queue["proposal"]
    client = login(Role.ADMIN, username="root")

    page = client.get("/trust/review/")
    response = client.post(
        f"/trust/proposals/{proposal.pk}/decide", {"decision": "accept", "note": "ok"}, **HTMX
    )

    assertContains(page, f"/trust/proposals/{proposal.pk}/decide")
    assertContains(response, "Accepted")
    assertContains(response, "rubric v2")
    proposal.refresh_from_db()
    assert proposal.status == RubricProposal.Status.ACCEPTED
    assert proposal.decided_by == "human:root"
    current = RubricVersion.objects.filter(tenant=tenant).order_by("-number").first()
    assert {c.name for c in current.criteria.all()} == {"Accuracy", "Sourcing"}


def test_an_admin_rejects_a_rubric_proposal(login, queue):
    proposal = queue["proposal"]

    response = login(Role.ADMIN).post(
        f"/trust/proposals/{proposal.pk}/decide", {"decision": "reject"}, **HTMX
    )

    assertContains(response, "Rejected")
    proposal.refresh_from_db()
    assert proposal.status == RubricProposal.Status.REJECTED


def test_the_demo_seed_gives_every_trust_page_data(login, tenant, make_agent, embedder_down):
    from trust.demo import trust_demo_seed

    for name in ("Creator1", "Reviewer1", "Reviewer2", "Curator1"):
        make_agent(tenant, name=name)

    note = trust_demo_seed(tenant)
    again = trust_demo_seed(tenant)

    assert note
    assert again == ""
    assert Override.objects.filter(tenant=tenant, regret=True).count() == 2
    assert GamingFlag.objects.filter(tenant=tenant, status="open").count() == 1
    assert RubricProposal.objects.filter(tenant=tenant, status="pending").count() == 1
    client = login(Role.ADMIN)
    queue_page = client.get("/trust/review/")
    assert len(queue_page.context["waiting_rows"]) == 3
    assert queue_page.context["flags"]
    assert queue_page.context["proposals"]
    overview = client.get("/trust/")
    assert len(overview.context["rows"]) == 4
    for row in overview.context["rows"]:
        page = client.get(f"/trust/agents/{row['agent'].pk}/")
        assert page.status_code == 200
        assert len(page.context["chart"]) > 1


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("/trust/?sort=-trust", "agent-table"),
        ("/trust/agents/{agent}/?dissents=1", "dissents"),
        ("/trust/agents/{agent}/?overrides=1", "overrides"),
        ("/trust/review/?waiting=1", "waiting"),
    ],
)
def test_pages_vary_on_htmx_and_restore_history_whole(login, agent, url, target):
    client = login(Role.REVIEWER)
    url = url.format(agent=agent.pk)

    swapped = _hx(client, url, target)
    restored = client.get(url, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})

    assert "HX-Request" in swapped["Vary"]
    assert "<html" not in swapped.content.decode()
    assert "HX-Request" in restored["Vary"]
    assert "<html" in restored.content.decode()
