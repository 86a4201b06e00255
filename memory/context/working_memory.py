"""Working memory: the prompt context an agent is given, assembled within a token budget (SPEC 6).

Assembly is pure over inputs that were already retrieved; the only write is one ledger event per
truncation step, so a reader of the log can tell what an agent did not see and why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from django.db import transaction
from rest_framework import status

from config.api import ApiError
from ledger.models import Agent
from ledger.services import event_append
from memory.context.tokens import token_count, truncate_to_tokens

TRUNCATION_KIND = "context.truncated"

# The SPEC's sizes: five of each are offered, and the cuts keep the most relevant three memories
# and two KB chunks. Inputs arrive in relevance order, so a cut keeps a prefix.
MEMORY_SLOTS = 5
MEMORY_SLOTS_WHEN_SHORT = 3
KB_SLOTS = 5
KB_SLOTS_WHEN_SHORT = 2
RECENT_TURNS_KEPT = 20

# OpenAI's chat format wraps every message as <|start|>{role}<|message|>{content}<|end|>: three
# tokens of framing plus the role (their cookbook's num_tokens_from_messages counts the same).
MESSAGE_OVERHEAD_TOKENS = 3

SUMMARY_SENTENCE_MAX_TOKENS = 40
SUMMARY_MAX_TOKENS = 400

SECTIONS = ("system_prompt", "skills", "memories", "kb_chunks", "turns", "tool_results")
NEVER_CUT = ("system_prompt", "skills")
SECTION_LABELS = {
    "system_prompt": "the system prompt",
    "skills": "skills",
    "memories": "memories",
    "kb_chunks": "KB chunks",
    "turns": "conversation turns",
    "tool_results": "tool results",
}

Message = dict[str, str]


class SkillDocument(Protocol):
    """A whole skill document (a KB document of kind ``skill``, or a ``Skill``)."""

    @property
    def title(self) -> str: ...

    @property
    def body(self) -> str: ...


@dataclass(frozen=True)
class Skill:
    title: str
    body: str


@dataclass(frozen=True)
class Truncation:
    """One cut: the context's size before and after it, and how many items each source lost."""

    step: str
    description: str
    tokens_before: int
    tokens_after: int
    sources: dict[str, int]

    @property
    def tokens_removed(self) -> int:
        return self.tokens_before - self.tokens_after

    def as_payload(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "description": self.description,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "tokens_removed": self.tokens_removed,
            "sources": dict(self.sources),
        }


@dataclass(frozen=True)
class WorkingMemory:
    messages: list[Message]
    total_tokens: int
    budget_tokens: int
    section_tokens: dict[str, int]
    truncations: list[Truncation] = field(default_factory=list)


@dataclass
class _Draft:
    """The inputs as they stand after the cuts so far."""

    system_prompt: str
    skills: list[SkillDocument]
    memories: list[str]
    kb_chunks: list[str]
    turns: list[Message]
    tool_results: list[str]

    def sections(self) -> dict[str, list[Message]]:
        return {
            "system_prompt": [_system(self.system_prompt)] if self.system_prompt else [],
            "skills": [_system(f"Skill: {skill.title}\n\n{skill.body}") for skill in self.skills],
            "memories": _numbered("Retrieved memories, most relevant first:", self.memories),
            "kb_chunks": _numbered("Knowledge base excerpts, most relevant first:", self.kb_chunks),
            "turns": [dict(turn) for turn in self.turns],
            "tool_results": [{"role": "tool", "content": text} for text in self.tool_results],
        }


def _system(content: str) -> Message:
    return {"role": "system", "content": content}


def _numbered(heading: str, texts: Sequence[str]) -> list[Message]:
    if not texts:
        return []
    items = "\n\n".join(f"{position}. {text}" for position, text in enumerate(texts, start=1))
    return [_system(f"{heading}\n\n{items}")]


def message_tokens(message: Mapping[str, str]) -> int:
    return MESSAGE_OVERHEAD_TOKENS + token_count(message["role"]) + token_count(message["content"])


def _section_tokens(sections: Mapping[str, list[Message]]) -> dict[str, int]:
    return {
        name: sum(message_tokens(message) for message in messages)
        for name, messages in sections.items()
    }


# --- The cuts, in the SPEC's order ---------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def _first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    sentence = _SENTENCE_END.split(flat, maxsplit=1)[0]
    capped = truncate_to_tokens(sentence, SUMMARY_SENTENCE_MAX_TOKENS)
    return capped if capped == sentence else capped + "…"


def _summary_message(turns: Sequence[Message]) -> Message:
    """A deterministic local digest (no model call): each message's role and first sentence."""
    lines = [f"Earlier conversation ({len(turns)} messages, first sentence of each):"]
    used = token_count(lines[0])
    for shown, turn in enumerate(turns):
        line = f"- {turn['role']}: {_first_sentence(turn['content'])}"
        cost = token_count(line) + 1  # the newline joining it
        if used + cost > SUMMARY_MAX_TOKENS:
            lines.append(f"- ({len(turns) - shown} more not shown)")
            break
        lines.append(line)
        used += cost
    return _system("\n".join(lines))


def _summarise_old_turns(draft: _Draft) -> tuple[str, dict[str, int]] | None:
    older = len(draft.turns) - RECENT_TURNS_KEPT
    if older <= 0:
        return None
    draft.turns = [_summary_message(draft.turns[:older]), *draft.turns[older:]]
    description = (
        f"{older} conversation turns older than the most recent {RECENT_TURNS_KEPT} "
        "summarised into one message"
    )
    return description, {"turns": older}


def _reduce_memories(draft: _Draft) -> tuple[str, dict[str, int]] | None:
    offered = len(draft.memories)
    if offered <= MEMORY_SLOTS_WHEN_SHORT:
        return None
    draft.memories = draft.memories[:MEMORY_SLOTS_WHEN_SHORT]
    return f"memories {offered} → {MEMORY_SLOTS_WHEN_SHORT}", {
        "memories": offered - MEMORY_SLOTS_WHEN_SHORT
    }


def _reduce_kb_chunks(draft: _Draft) -> tuple[str, dict[str, int]] | None:
    offered = len(draft.kb_chunks)
    if offered <= KB_SLOTS_WHEN_SHORT:
        return None
    draft.kb_chunks = draft.kb_chunks[:KB_SLOTS_WHEN_SHORT]
    return f"KB chunks {offered} → {KB_SLOTS_WHEN_SHORT}", {
        "kb_chunks": offered - KB_SLOTS_WHEN_SHORT
    }


_Cut = Callable[[_Draft], tuple[str, dict[str, int]] | None]
CUTS: tuple[tuple[str, _Cut], ...] = (
    ("turns_summarised", _summarise_old_turns),
    ("memories_reduced", _reduce_memories),
    ("kb_chunks_reduced", _reduce_kb_chunks),
)


# --- The service ---------------------------------------------------------------------------------


def _validated_turns(turns: Sequence[Mapping[str, Any]]) -> list[Message]:
    validated = []
    for index, turn in enumerate(turns):
        role, content = turn.get("role"), turn.get("content")
        if not isinstance(role, str) or not role or not isinstance(content, str):
            raise ApiError(
                code="invalid_turn",
                message=f"Turn {index} needs a non-empty string 'role' and a string 'content'.",
                details={"index": index},
            )
        validated.append({"role": role, "content": content})
    return validated


def _budget_exceeded(
    *, budget_tokens: int, section_tokens: dict[str, int], truncations: list[Truncation]
) -> ApiError:
    required = sum(section_tokens.values())
    never_cut = sum(section_tokens[name] for name in NEVER_CUT)
    if never_cut > budget_tokens:
        message = (
            f"The system prompt and skills alone need {never_cut} tokens, more than the budget "
            f"of {budget_tokens}; they are never cut, so nothing was cut. Raise the budget or "
            "shorten the system prompt or skills."
        )
    else:
        rest = ", ".join(
            f"{SECTION_LABELS[name]} {tokens}"
            for name, tokens in section_tokens.items()
            if name not in NEVER_CUT and tokens
        )
        cut = "; ".join(t.description for t in truncations) or "nothing (no cut applied)"
        message = (
            f"The context needs {required} tokens after every allowed cut, over the budget of "
            f"{budget_tokens}. The system prompt and skills need {never_cut} tokens and are "
            f"never cut; the rest needs: {rest}. Already cut: {cut}."
        )
    return ApiError(
        code="context_budget_exceeded",
        message=message,
        status_code=status.HTTP_422_UNPROCESSABLE_ENTITY,
        details={
            "budget_tokens": budget_tokens,
            "required_tokens": required,
            "never_cut_tokens": never_cut,
            "section_tokens": section_tokens,
            "truncations": [t.as_payload() for t in truncations],
        },
    )


def working_memory_assemble(
    *,
    agent: Agent,
    budget_tokens: int,
    system_prompt: str,
    skills: Sequence[SkillDocument],
    memories: Sequence[str],
    kb_chunks: Sequence[str],
    turns: Sequence[Mapping[str, Any]],
    tool_results: Sequence[str],
    actor: str,
    run_id: str = "",
) -> WorkingMemory:
    """Build the agent's prompt context in the SPEC's order, cut only as far as the budget needs.

    Order: system prompt, skills (whole documents), retrieved memories, KB chunks, conversation
    turns, tool results. ``memories`` and ``kb_chunks`` are in relevance order; beyond the first
    five of each are ignored (the SPEC offers five). Tokens count the messages as an OpenAI-style
    model frames them (content, role and three framing tokens each).

    While over budget, and re-checked after each: turns older than the most recent 20 become one
    summary message; memories 5 → 3; KB chunks 5 → 2. A cut that would not shrink the context
    (a summary longer than the turns it replaces) is skipped, so the context only ever shrinks
    and fits whenever the cuts in this order can make it fit. Each cut applied appends one
    ``context.truncated`` event, all in one transaction once the result is known to fit.

    Raises ``ApiError(context_budget_exceeded, 422)``, with nothing written to the ledger, when the
    context still does not fit: the system prompt and skills are never cut, and neither are the
    most recent 20 turns nor tool results, so a tool result that alone overflows the budget is
    refused the same way (the caller should shorten it, e.g. with ``truncate_to_tokens``).
    """
    if budget_tokens <= 0:
        raise ApiError(code="invalid_budget", message="The token budget must be positive.")
    draft = _Draft(
        system_prompt=system_prompt,
        skills=list(skills),
        memories=list(memories[:MEMORY_SLOTS]),
        kb_chunks=list(kb_chunks[:KB_SLOTS]),
        turns=_validated_turns(turns),
        tool_results=list(tool_results),
    )
    section_tokens = _section_tokens(draft.sections())
    truncations: list[Truncation] = []
    # When the parts that are never cut already overflow, every cut would be wasted work.
    if sum(section_tokens[name] for name in NEVER_CUT) <= budget_tokens:
        for step, cut in CUTS:
            tokens_before = sum(section_tokens.values())
            if tokens_before <= budget_tokens:
                break
            trial = replace(draft)  # a cut rebinds the lists it changes, never mutates them
            applied = cut(trial)
            if applied is None:
                continue
            trial_tokens = _section_tokens(trial.sections())
            # A summary of short turns can be longer than they were (its heading and one line
            # per turn): a cut that does not shrink the context is skipped, never applied.
            if sum(trial_tokens.values()) >= tokens_before:
                continue
            description, sources = applied
            draft, section_tokens = trial, trial_tokens
            truncations.append(
                Truncation(
                    step=step,
                    description=description,
                    tokens_before=tokens_before,
                    tokens_after=sum(section_tokens.values()),
                    sources=sources,
                )
            )
    total_tokens = sum(section_tokens.values())
    if total_tokens > budget_tokens:
        raise _budget_exceeded(
            budget_tokens=budget_tokens, section_tokens=section_tokens, truncations=truncations
        )
    if truncations:
        with transaction.atomic():
            for truncation in truncations:
                event_append(
                    tenant=agent.tenant,
                    kind=TRUNCATION_KIND,
                    actor=actor,
                    run_id=run_id,
                    payload={
                        "agent_id": agent.pk,
                        "agent": agent.name,
                        "budget_tokens": budget_tokens,
                        **truncation.as_payload(),
                    },
                )
    sections = draft.sections()
    return WorkingMemory(
        messages=[message for name in SECTIONS for message in sections[name]],
        total_tokens=total_tokens,
        budget_tokens=budget_tokens,
        section_tokens=section_tokens,
        truncations=truncations,
    )


def register_kinds() -> None:
    """Reserve the kind for this service; call from ``MemoryConfig.ready``."""
    from ledger.projections import service_kinds_register

    service_kinds_register(TRUNCATION_KIND)
