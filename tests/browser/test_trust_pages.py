"""The trust pages in a real browser: regret marking moves the chart, the chart draws, agent
text stays text, and a reviewer cannot reach admin-only actions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from ledger.models import Role
from tests.trust.governance_rows import dissent_row, flag_row, override_row, proposal_row
from trust.models import Override, RubricProposal, TrustScoreChange
from trust.rounds import overrides
from trust.scores import services as score_services

SCRIPT_TEXT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture
def critic(tenant, make_agent):
    """An agent with a trust history (several changes) and an override waiting for review."""
    agent = make_agent(tenant, name="Critic1", model="gpt-4o", primary_role="critic")
    now = timezone.now()
    for day in range(6):
        dissent_row(
            agent,
            now - timedelta(days=12 - day),
            citations=["Accuracy", "Evidence", "Safety"][day % 3 :],
            impact=day % 2 == 0,
        )
        score_services.trust_recompute(
            tenant=tenant,
            agent_ids=[agent.pk],
            reason="dissent_impact_true" if day % 2 == 0 else "dissent_logged",
            now=now - timedelta(days=12 - day) + timedelta(hours=1),
        )
    override_row(agent, now - timedelta(days=3))
    overrides.override_log(
        agent=agent,
        agent_output="Ship the report as drafted.",
        human_decision="Hold the report until the figures are checked.",
        decided_by="sam",
        round_id="round-7",
        occurred_at=now - timedelta(hours=2),
        actor="orchestrator",
    )
    agent.refresh_from_db()
    return agent


def _chart(page):
    page.wait_for_selector("#trust-chart[data-drawn='true']")
    return page.evaluate(
        """() => {
            const chart = Chart.getChart(document.getElementById("trust-chart"));
            const points = chart.data.datasets[0].data;
            return {scores: points.map((p) => p.y), times: points.map((p) => p.x)};
        }"""
    )


def test_a_reviewer_marks_an_override_regretted_and_the_chart_shows_the_drop(
    page_as, critic, screenshot
):
    waiting = Override.objects.get(agent=critic, round_id="round-7")
    page = page_as(Role.REVIEWER, username="ada")
    page.goto(f"/trust/agents/{critic.pk}/")
    before = _chart(page)

    page.goto("/trust/review/")
    row = page.locator(f"#override-{waiting.pk}")
    row.get_by_role("button", name="Mark reverted (regret)").click()
    # HTMX swaps the row in place: same id, now regretted, with the reviewer's name.
    page.wait_for_selector(f"#override-{waiting.pk}.review-row--regretted")
    assert "reverted by human:ada" in page.locator(f"#override-{waiting.pk}").inner_text()
    assert page.url.endswith("/trust/review/")
    screenshot("trust-review-queue-after-regret")

    page.goto(f"/trust/agents/{critic.pk}/")
    after = _chart(page)
    assert len(after["scores"]) == len(before["scores"]) + 1
    assert after["scores"][-1] < before["scores"][-1]
    latest = page.locator("#trust-changes tbody tr").first.inner_text()
    assert "override_regret" in latest
    assert "-0." in latest
    assert TrustScoreChange.objects.filter(agent=critic, reason="override_regret").exists()
    screenshot("trust-agent-after-regret")


def test_an_admin_sees_the_trust_chart_drawn(page_as, critic, tenant, make_agent, screenshot):
    make_agent(tenant, name="Rookie")
    page = page_as(Role.ADMIN, username="root")
    page.goto("/trust/")
    assert page.locator("#agent-table tbody tr").count() == 2
    screenshot("trust-overview")

    page.goto(f"/trust/agents/{critic.pk}/")
    _chart(page)
    painted = page.evaluate(
        """() => {
            const canvas = document.getElementById("trust-chart");
            const context = canvas.getContext("2d");
            const pixels = context.getImageData(0, 0, canvas.width, canvas.height).data;
            let painted = 0;
            for (let i = 3; i < pixels.length; i += 4) { if (pixels[i] > 0) painted++; }
            return {painted, total: canvas.width * canvas.height};
        }"""
    )
    assert painted["total"] > 10_000
    assert painted["painted"] > 1_000  # the line, its points and the axes
    blank = page.evaluate(
        """() => {
            const canvas = document.getElementById("trust-chart");
            const empty = document.createElement("canvas");
            empty.width = canvas.width; empty.height = canvas.height;
            return canvas.toDataURL() === empty.toDataURL();
        }"""
    )
    assert blank is False
    screenshot("trust-agent")


def test_a_dissent_holding_a_script_tag_renders_as_text(page_as, critic):
    dissent = dissent_row(critic, timezone.now() - timedelta(minutes=5))
    dissent.text = SCRIPT_TEXT
    dissent.save()
    page = page_as(Role.REVIEWER)
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)

    page.goto(f"/trust/agents/{critic.pk}/")

    cell = page.locator(f"#dissent-{dissent.pk} .dissent-text")
    assert cell.inner_text() == SCRIPT_TEXT
    assert page.locator(f"#dissent-{dissent.pk} script, #dissent-{dissent.pk} img").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert dialogs == []


def test_a_reviewer_cannot_reach_admin_only_actions(page_as, critic, tenant, screenshot):
    proposal = proposal_row(tenant)
    page = page_as(Role.REVIEWER)
    page.goto("/trust/review/")
    row = page.locator(f"#proposal-{proposal.pk}")

    assert row.get_by_role("button", name="Accept").count() == 0
    assert "Waiting for an admin" in row.inner_text()
    assert page.get_by_role("link", name="Admin", exact=True).count() == 0
    screenshot("trust-review-queue-reviewer")
    # Not just hidden: the server refuses the decision, even with a valid CSRF token.
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    refused = page.request.post(
        f"/trust/proposals/{proposal.pk}/decide",
        form={"decision": "accept"},
        headers={"X-CSRFToken": token, "HX-Request": "true"},
    )
    assert refused.status == 403
    proposal.refresh_from_db()
    assert proposal.status == RubricProposal.Status.PENDING
    page.goto("/admin/")
    assert "/admin/login/" in page.url


def test_an_admin_decides_a_proposal_and_clears_a_flag_inline(page_as, critic, tenant, screenshot):
    from trust.governance.services import CriterionDraft, rubric_version_create

    rubric_version_create(tenant=tenant, criteria=[CriterionDraft("Accuracy")], actor="root")
    proposal = proposal_row(tenant)
    flag = flag_row(critic)
    page = page_as(Role.ADMIN, username="root")
    page.goto("/trust/review/")
    screenshot("trust-review-queue-admin")

    page.locator(f"#flag-{flag.pk} input[name=note]").fill("narrow on purpose this week")
    page.locator(f"#flag-{flag.pk}").get_by_role("button", name="Clear").click()
    page.wait_for_selector(f"#flag-{flag.pk} >> text=Cleared")
    page.locator(f"#proposal-{proposal.pk}").get_by_role("button", name="Accept").click()
    page.wait_for_selector(f"#proposal-{proposal.pk} >> text=Accepted")

    flag.refresh_from_db()
    proposal.refresh_from_db()
    assert (flag.status, flag.reviewed_by, flag.review_note) == (
        "dismissed",
        "human:root",
        "narrow on purpose this week",
    )
    assert (proposal.status, proposal.result_version) == ("accepted", 2)


def test_back_after_a_sort_restores_the_whole_overview_when_htmx_history_misses(
    page_as, critic, tenant, make_agent
):
    make_agent(tenant, name="Builder2")
    page = page_as(Role.REVIEWER)
    page.goto("/trust/")
    page.click("#agent-table a.sort-link:has-text('Trust')")
    page.wait_for_url("**/trust/?sort=*")
    sorted_url = page.url
    page.click("#agent-table a.sort-link:has-text('Agent')")
    page.wait_for_url(lambda url: url != sorted_url)
    # A history-cache miss (htmx keeps a few pages in sessionStorage; a long session loses them):
    # going back asks the server for the page with HX-History-Restore-Request.
    page.evaluate(
        """() => {
            sessionStorage.removeItem('htmx-history-cache');
            document.addEventListener('htmx:historyRestore', () => { window.__restored = true; });
        }"""
    )
    with page.expect_request(lambda r: r.headers.get("hx-history-restore-request") == "true"):
        page.go_back()

    page.wait_for_url(sorted_url)
    page.wait_for_function("() => window.__restored === true")
    page.wait_for_selector("h1:has-text('Trust')")
    assert page.locator("form.filters").count() == 1
    assert page.locator("#agent-table table").count() == 1
    assert page.locator("#sort-field").count() == 1


@pytest.mark.parametrize("width", [1366, 390], ids=["1366", "390"])
def test_a_reviewer_regrets_with_a_reason_then_withdraws_it(page_as, critic, screenshot, width):
    waiting = Override.objects.get(agent=critic, round_id="round-7")
    page = page_as(Role.REVIEWER, username="ada")
    page.set_viewport_size({"width": width, "height": 844})
    page.goto("/trust/review/")
    row = page.locator(f"#override-{waiting.pk}")
    preview = row.locator(".regret-preview").inner_text()
    assert f"Trust {critic.trust_score:.3f}; if regretted" in preview

    row.get_by_label(f"Why override {waiting.pk} is regretted").fill(SCRIPT_TEXT)
    row.get_by_role("button", name="Mark reverted (regret)").click()
    page.wait_for_selector(f"#override-{waiting.pk}.review-row--regretted")
    regretted = Override.objects.get(pk=waiting.pk)
    assert regretted.revert_note == SCRIPT_TEXT
    assert SCRIPT_TEXT in page.locator(f"#override-{waiting.pk}").inner_text()
    doc = width == 1366  # one width's pictures in docs/img/
    screenshot(
        f"trust-review-queue-regret-with-reason-{width}", doc=doc and f"#override-{waiting.pk}"
    )

    page.goto(f"/trust/agents/{critic.pk}/")
    latest = page.locator("#trust-changes tbody tr").first.inner_text()
    assert f"Override #{waiting.pk} marked regretted by human:ada" in latest
    assert SCRIPT_TEXT in latest  # shown as text, never run
    assert page.evaluate("() => window.__pwned") is None
    screenshot(f"trust-agent-regret-reason-{width}")

    page.goto("/trust/review/")
    row = page.locator(f"#override-{waiting.pk}")
    row.get_by_label(f"Why the revert of override {waiting.pk} is withdrawn").fill("a misclick")
    row.get_by_role("button", name="Withdraw revert").click()
    page.wait_for_selector(f"#override-{waiting.pk}:not(.review-row--regretted) .regret-preview")
    assert Override.objects.get(pk=waiting.pk).reverted_at is None

    page.goto(f"/trust/agents/{critic.pk}/")
    latest = page.locator("#trust-changes tbody tr").first.inner_text()
    assert f"Revert of Override #{waiting.pk} withdrawn by human:ada" in latest
    assert "a misclick" in latest  # the undo's note, where the undo is told
    page.locator(f"#trust-changes a[href='/trust/review/overrides/{waiting.pk}/']").first.click()
    page.wait_for_url(f"**/trust/review/overrides/{waiting.pk}/")
    assert page.locator("#review-item-heading").inner_text().startswith(f"Override #{waiting.pk}")
    screenshot(f"trust-agent-revert-withdrawn-{width}")
    page.go_back()
    page.wait_for_url(f"**/trust/agents/{critic.pk}/")
    screenshot(f"trust-agent-changes-{width}", doc=doc and "#trust-changes")
