"""An agent's working memory for its next model call (SPEC 6): retrieve, then assemble.

Retrieval asks the two searches the service already has: memory search over the agent's own
memories and the ledger it may see (the five best), and the knowledge base (the five best
chunks). The skills are the published skills that apply to the agent, or the one the caller
names. ``memory.context.working_memory`` then lays everything out in the SPEC's order within the
token budget, cutting (and logging each cut) only as far as it must.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.models import Agent
from memory.context.working_memory import (
    KB_SLOTS,
    MEMORY_SLOTS,
    WorkingMemory,
    working_memory_assemble,
)
from memory.knowledge.selectors import KnowledgeHit, knowledge_search, skill_find, skills_for_agent
from memory.models import KnowledgeDocument
from memory.search.ranking import AGENT_MEMORY, AUDIT_LOG, WORKFLOW_STEPS, SearchHit
from memory.search.selectors import memories_search

# Everything memory search offers except the knowledge base, which has a section of its own.
MEMORY_SOURCES = (AGENT_MEMORY, AUDIT_LOG, WORKFLOW_STEPS)
QUERY_MAX_CHARS = 10_000


@dataclass(frozen=True)
class AssembledContext:
    agent: Agent
    query: str
    semantic: bool
    working_memory: WorkingMemory
    skills: list[KnowledgeDocument]
    # What the prompt holds after any cuts, most relevant first.
    memories: list[SearchHit]
    kb_chunks: list[KnowledgeHit]


def context_query(turns: Sequence[Mapping[str, Any]]) -> str:
    """What to retrieve by when the caller gives no query: the last thing the user said."""
    for turn in reversed(turns):
        if turn.get("role") == "user" and isinstance(turn.get("content"), str):
            return str(turn["content"])[:QUERY_MAX_CHARS]
    return ""


def memory_line(hit: SearchHit) -> str:
    """A retrieved memory as the prompt shows it; a ledger event says what it was and whose."""
    if hit.source == AGENT_MEMORY:
        return hit.content
    return (
        f"[{hit.details.get('kind', hit.source)} by {hit.details.get('actor', '?')}] {hit.content}"
    )


def chunk_line(hit: KnowledgeHit) -> str:
    return f"{hit.heading}\n{hit.text}"


def tool_result_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def context_assemble(
    *,
    agent: Agent,
    budget_tokens: int,
    system_prompt: str,
    turns: Sequence[Mapping[str, Any]],
    tool_results: Sequence[Any],
    actor: str,
    query: str | None = None,
    skill: int | str | None = None,
    run_id: str = "",
) -> AssembledContext:
    """The agent's context for ``turns``, retrieved by ``query`` (default: the last user turn).

    With no query and no user turn nothing is retrieved. ``skill`` (an id or exact title)
    replaces the agent's applicable skills with that one published skill. Raises ``ApiError``:
    ``unknown_skill`` (400) before anything runs, ``context_budget_exceeded`` (422) when even
    the cut context does not fit; the search has then already recorded its retrievals.
    """
    skills = (
        [skill_find(tenant=agent.tenant, reference=skill)]
        if skill is not None
        else skills_for_agent(agent)
    )
    asked = context_query(turns) if query is None else query
    memories: list[SearchHit] = []
    chunks: list[KnowledgeHit] = []
    semantic = False
    if asked.strip():
        found = memories_search(
            agent=agent, query=asked, top_k=MEMORY_SLOTS, sources=MEMORY_SOURCES
        )
        knowledge = knowledge_search(tenant=agent.tenant, query=asked, top_k=KB_SLOTS)
        memories, chunks = found.hits, knowledge.hits
        semantic = found.semantic and knowledge.semantic
    assembled = working_memory_assemble(
        agent=agent,
        budget_tokens=budget_tokens,
        system_prompt=system_prompt,
        skills=skills,
        memories=[memory_line(hit) for hit in memories],
        kb_chunks=[chunk_line(hit) for hit in chunks],
        turns=turns,
        tool_results=[tool_result_text(result) for result in tool_results],
        actor=actor,
        run_id=run_id,
    )
    cut = {
        name: sum(t.sources.get(name, 0) for t in assembled.truncations)
        for name in ("memories", "kb_chunks")
    }
    return AssembledContext(
        agent=agent,
        query=asked,
        semantic=semantic,
        working_memory=assembled,
        skills=skills,
        memories=memories[: min(len(memories), MEMORY_SLOTS) - cut["memories"]],
        kb_chunks=chunks[: min(len(chunks), KB_SLOTS) - cut["kb_chunks"]],
    )
