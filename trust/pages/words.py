"""A trust score change told in words, linked to what caused it, for the agent page.

Every value comes from the ledger (agent names, people, notes, round ids are text agents and
people wrote), so each is passed through ``format_html``, which escapes it; only our own
fixed wording is markup.
"""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from trust.scores.selectors import TrustPoint

_PLAIN = {
    "initial": "Registered at the prior",
    "window_slid": "Old evidence left the scoring window",
    "recomputed": "Recomputed on an admin's request",
    "imported": "Imported from an interchange document",
}


def _actor(name: str) -> SafeString:
    """A person or agent, linked to the ledger browser's events by them."""
    return format_html(
        '<a href="{}?{}">{}</a>', reverse("ledger:browser"), urlencode({"actor": name}), name
    )


def _override_url(override_id: int) -> str:
    return reverse("trust:override_detail", args=[override_id])


def round_url(round_id: str) -> str:
    """The review flow's list of every override of the round (no page shows one round alone)."""
    return f"{reverse('trust:overrides')}?{urlencode({'round': round_id, 'status': 'any'})}"


def _overrides(point: TrustPoint) -> SafeString:
    """The override(s), each linked to its detail view (both texts, the diff, the decision)."""
    ids = point.override_ids
    if not ids:
        return format_html("{}", "An override")
    if len(ids) == 1:
        return format_html('<a href="{}">Override #{}</a>', _override_url(ids[0]), ids[0])
    links = format_html_join(", ", '<a href="{}">#{}</a>', ((_override_url(i), i) for i in ids))
    more = format_html(" and {} more", point.more_overrides) if point.more_overrides else ""
    return format_html("Overrides {}{}", links, more)


def _dissent(point: TrustPoint) -> SafeString:
    dissent_id = point.cause.get("dissent_id")
    if dissent_id is None:
        return format_html("{}", "A dissent")
    return format_html('<a href="#dissent-{}">Dissent #{}</a>', dissent_id, dissent_id)


def _by(point: TrustPoint, text: str = " by ") -> SafeString:
    by = point.cause.get("by")
    return format_html("{}{}", text, _actor(by)) if by else format_html("{}", "")


def _what(point: TrustPoint) -> SafeString:
    reason, cause = point.reason, point.cause
    if reason in _PLAIN:
        return format_html("{}", _PLAIN[reason])
    if reason == "override_logged":
        return format_html("{} logged{}", _overrides(point), _by(point, ", decided by "))
    if reason == "override_regret":
        how = cause.get("revert_reason")
        if how == "inferred":
            return format_html(
                "{} regretted by inference: the round's output differs after the deadline",
                _overrides(point),
            )
        if how == "newer_version":
            return format_html(
                "{} undone by a newer version{}", _overrides(point), _by(point, " from ")
            )
        return format_html("{} marked regretted{}", _overrides(point), _by(point))
    if reason == "override_revert_withdrawn":
        return format_html("Revert of {} withdrawn{}", _overrides(point), _by(point))
    if reason == "dissent_logged":
        return format_html("{} logged", _dissent(point))
    if reason in ("dissent_impact_true", "dissent_impact_false"):
        verdict = "changed the output" if reason == "dissent_impact_true" else "changed nothing"
        return format_html("{} judged to have {}{}", _dissent(point), verdict, _by(point))
    return format_html("{}", reason)


def score_change_words(point: TrustPoint) -> SafeString:
    """ "Override #12 marked regretted by bob: 0.62 → 0.55", with its links, round and note."""
    round_id = point.cause.get("round_id")
    where = (
        format_html(' in round <a class="mono" href="{}">{}</a>', round_url(round_id), round_id)
        if round_id
        else ""
    )
    if point.previous is None:
        scores = f"{point.score:.2f}"
    else:
        scores = f"{point.previous:.2f} → {point.score:.2f}"
    note = point.cause.get("note")
    said = format_html(' <q class="change-note">{}</q>', note) if note else ""
    return format_html(
        '<span class="change-sentence">{}{}: {}</span>{}', _what(point), where, scores, said
    )
