"""Recall: what an agent remembers of a run, read straight from the ledger (SPEC 3.1).

Nothing here keeps state of its own. Episodic recall is the agent's visible events, most recent
last; salience recall ranks the same events by

    score = w_rel·relevance + w_rec·exp(-λ·Δturn) + w_imp·importance(kind)

in one SQL statement, so a run of ten thousand events is ranked inside the database. Relevance is
cosine similarity against the semantic index when it is available, otherwise (or for events the
index has not reached yet) the Jaccard overlap of word sets. Only an event's displayable text
(``text``, ``summary`` or ``goal``) ever leaves this module: payloads can carry secrets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from config.routers import lag_tolerant, read_connection
from config.sql import rows_named
from ledger.models import Agent, Event, RecallSettings
from ledger.selectors import event_visible_params, event_visible_sql, event_visible_to
from memory.embeddings.backends import EmbeddingUnavailable, embed_query, embedder_name

logger = logging.getLogger(__name__)

NO_MEMORY = "(no prior memory)"


@dataclass(frozen=True)
class RecallItem:
    seq: int
    turn: int
    kind: str
    actor: str
    text: str
    score: float | None = None
    relevance: float | None = None
    recency: float | None = None
    importance: float | None = None


@dataclass(frozen=True)
class RecallResult:
    mode: str
    agent: str
    run_id: str
    items: list[RecallItem]
    semantic: bool = False
    semantic_note: str = ""
    weights: dict[str, float] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        lines = [
            f"[turn {item.turn:03d}][{item.kind}] {item.text}" for item in self.items if item.text
        ]
        return "\n".join(lines) if lines else NO_MEMORY


@lag_tolerant()
def recall_episodic(*, agent: Agent, run_id: str, max_recent: int | None = None) -> RecallResult:
    """The agent's most recent visible events of the run, oldest first."""
    settings = RecallSettings.for_tenant(agent.tenant)
    limit = max_recent if max_recent is not None else settings.max_recent
    recent = list(
        Event.objects.filter(tenant=agent.tenant, run_id=run_id)
        .filter(event_visible_to(agent=agent, settings=settings))
        .order_by("-seq")
        .only("seq", "turn", "kind", "actor", "payload")[:limit]
    )
    items = [
        RecallItem(seq=e.seq, turn=e.turn, kind=e.kind, actor=e.actor, text=e.text)
        for e in reversed(recent)
    ]
    return RecallResult(mode="episodic", agent=agent.name, run_id=run_id, items=items)


# Three stages, so the expensive relevance term is computed for few events:
# 1. every visible event of the run gets its cheap part, base = w_rec·recency + w_imp·importance;
# 2. relevance adds at most w_rel, so an event whose base + w_rel is below the K-th best base
#    can never reach the top K (K events already score at least that): it is dropped;
# 3. the survivors get their relevance (cosine from the index, else Jaccard of word sets).
_SALIENCE_SQL = """
WITH query AS MATERIALIZED (SELECT ledger_words(%(query)s) AS words),
importance (kind, weight) AS (
    SELECT * FROM unnest(%(importance_kinds)s::text[], %(importance_weights)s::float8[])
),
visible AS MATERIALIZED (
    SELECT *, %(w_rec)s::float8 * recency + %(w_imp)s::float8 * importance AS base
    FROM (
        SELECT e.id, e.seq, e.turn, e.kind, e.actor, e.search_words,
            exp(-%(decay)s::float8 * greatest(%(current_turn)s::int - e.turn, 0)) AS recency,
            coalesce(importance.weight, %(default_importance)s::float8) AS importance
        FROM ledger_event AS e LEFT JOIN importance USING (kind)
        WHERE e.tenant_id = %(tenant)s
          AND e.run_id = %(run_id)s
          AND {visible}
    ) AS terms
),
cutoff AS MATERIALIZED (
    SELECT coalesce(min(base), 0) - %(w_rel)s::float8 AS lowest_possible
    FROM (SELECT base FROM visible ORDER BY base DESC LIMIT %(top_k)s) AS best
),
ranked AS (
    SELECT v.id, v.seq, v.turn, v.kind, v.actor, v.recency, v.importance, r.relevance,
        s.semantic IS NOT NULL AS from_index,
        %(w_rel)s::float8 * r.relevance + v.base AS score
    FROM visible AS v
    CROSS JOIN cutoff
    CROSS JOIN query
    {semantic_join}
    CROSS JOIN LATERAL (SELECT {semantic_column} AS semantic) AS s
    CROSS JOIN LATERAL (
        SELECT coalesce(
            s.semantic,
            CASE WHEN v.search_words && query.words THEN (
                SELECT count(*)::float8 / (
                    cardinality(v.search_words) + cardinality(query.words) - count(*)
                )
                FROM unnest(v.search_words) AS word WHERE word = ANY(query.words)
            ) ELSE 0 END
        ) AS relevance
    ) AS r
    WHERE v.base >= cutoff.lowest_possible
    ORDER BY score DESC, v.seq DESC
    LIMIT %(top_k)s
)
-- Payloads are read only for the winners: detoasting every candidate's JSON is the slow part.
SELECT r.seq, r.turn, r.kind, r.actor, ledger_display_text(e.kind, e.payload) AS text,
       r.relevance, r.recency, r.importance, r.score, r.from_index
FROM ranked AS r JOIN ledger_event AS e ON e.id = r.id
ORDER BY r.score DESC, r.seq DESC
"""

# The run's vectors in one index range scan, hash-joined to the candidates.
_SEMANTIC_JOIN = """
    LEFT JOIN (
        SELECT event_id, embedding FROM memory_eventembedding
        WHERE tenant_id = %(tenant)s AND run_id = %(run_id)s AND model = %(model)s
    ) AS ix ON ix.event_id = v.id
"""
# Cosine similarity clipped to [0, 1], so it shares a scale with the Jaccard fallback.
# greatest() skips NULLs, so an event missing from the index must stay NULL explicitly, and it
# takes NaN for the greatest (a vector without a direction:
# memory.search.plans.cosine_similarity_sql) so that becomes NULL too.
_SEMANTIC_COLUMN = """nullif(CASE WHEN ix.embedding IS NULL THEN NULL
    ELSE greatest(0, 1 - (ix.embedding <=> %(query_vector)s::vector)) END, 'NaN'::float8)"""


@lag_tolerant()
def recall_salience(
    *,
    agent: Agent,
    run_id: str,
    query: str,
    current_turn: int | None = None,
    top_k: int | None = None,
) -> RecallResult:
    """The top-K visible events of the run by salience, returned in chronological order."""
    settings = RecallSettings.for_tenant(agent.tenant)
    if current_turn is None:
        current_turn = (
            Event.objects.filter(tenant=agent.tenant, run_id=run_id)
            .order_by("-seq")
            .values_list("turn", flat=True)
            .first()
        ) or 0
    params: dict[str, Any] = {
        "query": query,
        "tenant": agent.tenant_id,
        "run_id": run_id,
        **event_visible_params(agent=agent, settings=settings),
        "decay": settings.recency_decay,
        "current_turn": current_turn,
        "importance_kinds": list(settings.kind_importance),
        "importance_weights": [float(w) for w in settings.kind_importance.values()],
        "default_importance": settings.default_importance,
        "w_rel": settings.weight_relevance,
        "w_rec": settings.weight_recency,
        "w_imp": settings.weight_importance,
        "top_k": top_k if top_k is not None else settings.top_k,
    }
    semantic, note = False, ""
    if not query.strip():
        note = "no query: relevance is 0 for every event"
    else:
        try:
            params["query_vector"] = embed_query(query)
            params["model"] = embedder_name()
            semantic = True
        except EmbeddingUnavailable as exc:
            logger.warning("semantic index unavailable for recall, using keywords: %s", exc)
            note = f"semantic index unavailable ({exc}); relevance is keyword overlap"
    sql = _SALIENCE_SQL.format(
        visible=event_visible_sql("e"),
        semantic_join=_SEMANTIC_JOIN if semantic else "",
        semantic_column=_SEMANTIC_COLUMN if semantic else "NULL::float8",
    )
    with read_connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = rows_named(cursor)
    if semantic and rows and not all(row.from_index for row in rows if row.text):
        note = "some events are not in the semantic index yet; they are scored by keywords"
    items = sorted(
        (
            RecallItem(
                seq=row.seq,
                turn=row.turn,
                kind=row.kind,
                actor=row.actor,
                text=row.text,
                relevance=round(row.relevance, 4),
                recency=round(row.recency, 4),
                importance=round(row.importance, 4),
                score=round(row.score, 4),
            )
            for row in rows
        ),
        key=lambda item: item.seq,
    )
    return RecallResult(
        mode="salience",
        agent=agent.name,
        run_id=run_id,
        items=items,
        semantic=semantic,
        semantic_note=note,
        weights={
            "relevance": settings.weight_relevance,
            "recency": settings.weight_recency,
            "importance": settings.weight_importance,
            "recency_decay": settings.recency_decay,
        },
    )
