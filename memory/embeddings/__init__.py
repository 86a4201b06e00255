"""Embeddings: the backends (``backends``: local model or an OpenAI-compatible endpoint), the
local model (``local_embedder``), and the vectors stored while the embedder was down.

Writes (``services``): ``event_embeddings_build``, ``event_embeddings_drop``,
``events_embeddings_backfill``, ``embeddings_backfill_batches`` (the backfill job's work);
``backfill.vectors_backfill`` is the one backfill step and ``EMBEDDING_BACKFILL_BATCH`` its batch
size. Projection: ``EventEmbeddingIndex``, the semantic index over every event kind.
"""
