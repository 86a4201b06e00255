"""An OpenAI-compatible chat model that decides, for a new memory and its nearest older ones,
whether the new one adds a fact, updates or contradicts older ones (they are then superseded)
or repeats one (ignore): the decision mem0's update step makes, in the same JSON shape
(``{"memory": [{"id", "text", "event": ADD|UPDATE|DELETE|NONE, "old_memory"}]}``), with older
memories named by small integers so the model cannot invent ids.

Any failure (unreachable, timeout, not JSON, an unknown shape) raises ``ExternalServiceError``
and the caller falls back to the rule; the store never waits on the model's success.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings

from config.http import ExternalServiceError, post_json

SYSTEM_PROMPT = """\
You keep an agent's long-term memory consistent as facts change. You receive the memories it
already holds that are closest to a NEW memory, each with an id, and the NEW memory.

For each existing memory decide one event:
- UPDATE: the NEW memory states the same thing about the same subject with a newer or more
  precise value (a changed preference, role, plan, date, address...). The existing one will be
  kept as history and marked superseded by the NEW one.
- DELETE: the NEW memory contradicts it outright (it is no longer true).
- NONE: it is about something else, or still true alongside the NEW memory.
Then give the NEW memory itself (id "new") the event ADD when it brings anything not already
held, or NONE when an existing memory already says exactly the same.

Judge by meaning, not by shared words: two preferences about different things are both kept.
Answer with JSON only, in this shape:
{"memory": [{"id": "0", "text": "<the memory's text>", "event": "UPDATE", "old_memory": "<the
existing text>"}, {"id": "new", "text": "<the NEW memory>", "event": "ADD"}]}"""


@dataclass(frozen=True)
class ModelDecision:
    # Indexes (into the neighbours given) of the memories the new one supersedes, and the event
    # the model gave each (UPDATE or DELETE).
    superseded: dict[int, str]
    # False when the model says the new memory repeats one already held (mem0's NONE).
    adds: bool


def _answer_text(answer: object) -> str:
    try:
        return str(answer["choices"][0]["message"]["content"])  # type: ignore[index]
    except (KeyError, IndexError, TypeError) as exc:
        raise ExternalServiceError(f"unexpected chat completion shape: {exc}") from exc


FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def decision_parse(text: str, neighbours: int) -> ModelDecision:
    """The model's JSON answer as a decision; ``ExternalServiceError`` when it is not one."""
    try:
        document = json.loads(FENCE.sub("", text.strip()))
        entries = document["memory"]
        if not isinstance(entries, list):
            raise TypeError("memory is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise ExternalServiceError(f"the model's answer is not the decision JSON: {exc}") from exc
    superseded: dict[int, str] = {}
    adds = False
    for entry in entries:
        if not isinstance(entry, dict):
            raise ExternalServiceError("a decision entry is not an object")
        event = str(entry.get("event", "")).upper()
        if event not in ("ADD", "UPDATE", "DELETE", "NONE"):
            raise ExternalServiceError(f"unknown event {event!r}")
        key = str(entry.get("id", ""))
        if key.isdigit() and int(key) < neighbours:
            if event in ("UPDATE", "DELETE"):
                superseded[int(key)] = event
        elif event == "ADD":
            adds = True
    return ModelDecision(superseded=superseded, adds=adds or bool(superseded))


def model_decide(*, new: str, neighbours: Sequence[str]) -> ModelDecision:
    """Ask the configured model (CONSOLIDATION_LLM_URL) about ``new`` and its ``neighbours``."""
    existing = [{"id": str(i), "text": text} for i, text in enumerate(neighbours)]
    answer = post_json(
        settings.CONSOLIDATION_LLM_URL.rstrip("/") + "/chat/completions",
        {
            "model": settings.CONSOLIDATION_LLM_MODEL,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {
                    "role": "user",
                    "content": "Existing memories:\n"
                    + json.dumps(existing, ensure_ascii=False)
                    + "\n\nNEW memory:\n"
                    + json.dumps(new, ensure_ascii=False),
                },
            ],
        },
        api_key=settings.CONSOLIDATION_LLM_API_KEY,
        timeout=settings.CONSOLIDATION_LLM_TIMEOUT_SECONDS,
    )
    return decision_parse(_answer_text(answer), len(neighbours))
