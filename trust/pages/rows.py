"""The override rows of the review pages, as the strings they show, built once in Python.

The review queue shows about 40 rows and the review list 20. Resolving each row's model
attributes, its filters (dates, truncation, numbers) and half a dozen URL reversals in the
template took most of the queue's server time (issue 20, "Speed": CPU p95 205 ms at 20,000
overrides); here each value is computed once, each route reversed once per page, and the row
template only prints strings. What the rows show is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.template.defaultfilters import floatformat
from django.urls import reverse
from django.utils.text import Truncator, add_truncation_text, calculate_truncate_chars_length
from django.utils.timesince import timeuntil
from django.utils.timezone import localtime

from trust.rounds.models import Override
from trust.rounds.selectors import Confirmation
from trust.scores.selectors import RegretPreview

ROW_TEXT_CHARS = 140  # of each text's head (selectors.OVERRIDE_HEAD_CHARS holds 160)
# No override has this id: it marks where a reversed URL holds the id, so a route is reversed
# once per page and each row's URL is the two halves around its id.
_ID_MARK = 987_654_321_987_654_321


def url_of_id(route: str) -> Callable[[int], str]:
    """``reverse(route, args=[id])`` as a function of the id, for many ids of one page."""
    before, _, after = reverse(route, args=[_ID_MARK]).partition(str(_ID_MARK))
    return lambda pk: f"{before}{pk}{after}"


def minute(moment: datetime | None) -> str:
    """As ``|date:"Y-m-d H:i"`` prints it (the current time zone; "" for none)."""
    return "" if moment is None else f"{localtime(moment):%Y-%m-%d %H:%M}"


def override_outcome(
    override: Override, confirmation: Confirmation | None, now: datetime
) -> dict[str, str]:
    """Where the override stands, as templates/trust/partials/override_outcome.html shows it:
    regretted, confirmed, waiting for its regret check, or past it (it stands)."""
    deadline = override.auto_check_deadline
    if override.reverted_at is not None:
        reason = override.get_revert_reason_display() if override.revert_reason else ""
        return {
            "state": "regretted",
            "by": override.reverted_by,
            "at": minute(override.reverted_at),
            "reason": str(reason).lower(),
            "note": override.revert_note,
        }
    if confirmation is not None:
        return {"state": "confirmed", "by": confirmation.by, "at": minute(confirmation.at)}
    if deadline > now:
        # As |timeuntil: from the moment of rendering.
        return {
            "state": "waiting",
            "iso": localtime(deadline).isoformat(),
            "in": timeuntil(deadline),
        }
    return {"state": "stands", "at": minute(deadline)}


def override_outcome_rows(
    overrides: Sequence[Override], *, confirmations: dict[int, Confirmation], now: datetime
) -> list[dict[str, Any]]:
    """One row per override with where it stands, confirmations included as the review pages
    show them: the agent page's override history (templates/trust/partials/agent_overrides.html)."""
    return [
        {
            "override": override,
            "outcome": override_outcome(override, confirmations.get(override.pk), now),
        }
        for override in overrides
    ]


def text_head(text: str) -> str:
    """``|truncatechars:140``. Truncator walks the text a character at a time to leave combining
    marks uncounted; an ASCII text has none, so its length alone says where it is cut."""
    if not text.isascii():
        return Truncator(text).chars(ROW_TEXT_CHARS)
    if len(text) <= ROW_TEXT_CHARS:
        return text
    return add_truncation_text(text[: calculate_truncate_chars_length(ROW_TEXT_CHARS, None)])


def _preview(preview: RegretPreview | None) -> dict[str, str] | None:
    if preview is None:
        return None
    direction = ""
    if preview.if_regretted < preview.current:
        direction = "down"
    elif preview.if_regretted > preview.current:
        direction = "up"
    return {
        "current": floatformat(preview.current, 3),
        "if_regretted": floatformat(preview.if_regretted, 3),
        "direction": direction,
    }


def override_rows_shown(
    overrides: Sequence[Override],
    *,
    confirmations: dict[int, Confirmation],
    previews: dict[int, RegretPreview],
    now: datetime,
) -> list[dict[str, Any]]:
    """One row per override: the override, its confirmation and regret preview (for code that
    reads them) and ``shown``, the strings templates/trust/partials/override_row.html prints."""
    agent_url = url_of_id("trust:agent")
    detail_url = url_of_id("trust:override_detail")
    revert_url = url_of_id("trust:override_revert")
    confirm_url = url_of_id("trust:override_confirm")
    withdraw_url = url_of_id("trust:override_revert_withdraw")
    rows = []
    for override in overrides:
        pk = override.pk
        confirmation = confirmations.get(pk)
        preview = previews.get(pk)
        regretted = override.reverted_at is not None
        shown = {
            "id": str(pk),
            "agent_name": override.agent.name,
            "agent_url": agent_url(override.agent_id),
            "round_id": override.round_id,
            "detail_url": detail_url(pk),
            "output_head": text_head(override.agent_output_head),  # type: ignore[attr-defined]
            "decision_head": text_head(override.human_decision_head),  # type: ignore[attr-defined]
            "decided_by": override.decided_by,
            "occurred": minute(override.occurred_at),
            "regretted": regretted,
            "confirmed": confirmation is not None,
            # Open, unconfirmed and before its deadline: the bulk confirm may pick it.
            "pickable": not regretted
            and confirmation is None
            and override.auto_check_deadline > now,
            "outcome": override_outcome(override, confirmation, now),
            "preview": None if regretted else _preview(preview),
            "revert_url": revert_url(pk),
            "confirm_url": confirm_url(pk),
            "withdraw_url": withdraw_url(pk),
        }
        rows.append(
            {"override": override, "confirmation": confirmation, "preview": preview, "shown": shown}
        )
    return rows
