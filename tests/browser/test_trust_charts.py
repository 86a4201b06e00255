"""Charts in a real browser (issue 20, item 9), at 1,366 px and 390 px: the trust chart has a
time axis zoomed to the data with regretted overrides marked; token savings explains a run
whose compacted renderings cost more than the results in full instead of drawing a full bar."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.models import Role
from memory.content.selectors import content_run_savings
from tests.browser.test_trust_pages import critic  # noqa: F401  (a fixture)
from tests.memory.test_views import record, rows
from trust.models import TrustScoreChange
from trust.rounds import overrides
from trust.rounds.models import Override

WIDTHS = [1366, 390]

CHART = """() => {
    const chart = Chart.getChart(document.getElementById("trust-chart"));
    const [line, regrets] = chart.data.datasets;
    return {
        type: chart.scales.x.type,
        times: line.data.map((p) => p.x),
        scores: line.data.map((p) => p.y),
        xs: chart.getDatasetMeta(0).data.map((p) => p.x),
        regrets: regrets.data.map((p) => p.x),
        regretColour: regrets.backgroundColor,
        ymin: chart.scales.y.min,
        ymax: chart.scales.y.max,
        ticks: chart.scales.x.ticks.map((t) => t.label),
        scroll: document.documentElement.scrollWidth,
    };
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_trust_chart_has_a_time_axis_zoomed_to_the_data_with_regrets_marked(
    page_as,
    critic,  # noqa: F811
    width,
    screenshot,
):
    waiting = Override.objects.get(agent=critic, round_id="round-7")
    overrides.override_revert(override=waiting, reverted_by="human:ada", actor="human:ada")
    regretted_at = [
        round(at.timestamp() * 1000)
        for at in TrustScoreChange.objects.filter(
            agent=critic, reason="override_regret"
        ).values_list("at", flat=True)
    ]
    page = page_as(Role.REVIEWER)
    page.set_viewport_size({"width": width, "height": 844})
    page.goto(f"/trust/agents/{critic.pk}/")
    page.wait_for_selector("#trust-chart[data-drawn='true']")
    chart: dict[str, Any] = page.evaluate(CHART)

    assert chart["type"] == "time"
    # Points sit at their moments: a week's gap is seven times a day's, not one step like it.
    times, xs = chart["times"], chart["xs"]
    gaps = [(xs[i + 1] - xs[i], times[i + 1] - times[i]) for i in range(len(xs) - 1)]
    gaps = [(pixels, ms) for pixels, ms in gaps if ms > 0]
    per_ms = [pixels / ms for pixels, ms in gaps]
    assert len(per_ms) >= 3
    assert max(per_ms) / min(per_ms) < 1.02
    assert len(set(chart["ticks"])) == len(chart["ticks"]) >= 2  # no label repeated
    # The regret is marked, at its moment, in the danger colour.
    assert regretted_at
    assert chart["regrets"] == regretted_at
    assert chart["regretColour"] == page.evaluate(
        "() => getComputedStyle(document.documentElement).getPropertyValue('--danger').trim()"
    )
    # Zoomed to the scores, not 0 to 1.
    low, high = min(chart["scores"]), max(chart["scores"])
    assert chart["ymin"] <= low
    assert chart["ymax"] >= high
    assert chart["ymax"] - chart["ymin"] <= (high - low) + 0.25
    assert (chart["ymin"], chart["ymax"]) != (0, 1)
    assert chart["scroll"] <= width
    screenshot(f"trust-chart-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_token_savings_explains_a_run_that_saved_nothing(
    page_as, tenant, make_agent, width, screenshot
):
    agent = make_agent(tenant, name="Fetcher1")
    for n in range(3):
        record(agent, "run-long", "sql.query", rows(40 + n))
    for text in ("ok", "ok too"):
        record(agent, "run-short", "web.fetch", text)
    short = content_run_savings(tenant=tenant, agent=None, run_id="run-short")
    long = content_run_savings(tenant=tenant, agent=None, run_id="run-long")
    assert short is not None
    assert long is not None
    assert short.tokens_saved < 0 < long.tokens_saved  # the header lines outweigh "ok"
    page = page_as(Role.REVIEWER)
    page.set_viewport_size({"width": width, "height": 844})
    page.goto("/memory/token-savings/")

    short_row = page.locator("#savings tbody tr", has_text="run-short")
    assert short_row.locator(".bar").count() == 0  # no bar drawn full
    note = short_row.locator(".savings__over").inner_text()
    assert f"{-short.tokens_saved:,} tokens more than in full" in note
    assert short_row.locator("strong.savings__negative").inner_text() == f"{short.tokens_saved:,}"
    assert "(none saved)" in short_row.inner_text()
    long_row = page.locator("#savings tbody tr", has_text="run-long")
    fill = long_row.locator(".bar__fill")
    assert fill.count() == 1
    assert long_row.locator(".savings__over").count() == 0
    bar_width = long_row.locator(".bar").bounding_box()
    fill_width = fill.bounding_box()
    assert bar_width is not None
    assert fill_width is not None
    assert fill_width["width"] < bar_width["width"]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    screenshot(f"token-savings-negative-{width}")
