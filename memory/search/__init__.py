"""Memory search (SPEC 5): one query over agent memory, the audit log, workflow steps and the
knowledge base, fused and ranked with an explanation per hit.

Read entry point: ``selectors.memories_search`` (it queues the retrieval statistics for
``memory.episodic.services.memories_mark_retrieved``). ``legs`` holds each source's candidate
queries, ``ranking`` the one fusion and score every source uses (knowledge search too), ``plans``
how a vector leg scans (exact, sign-bit sketch or HNSW), ``keyword_index`` the per-memory
full-text documents. No projection: the keyword documents are kept by the store services and
triggers. Endpoint: ``POST /api/v1/memories/search/`` (``api.MemorySearchActions``, an action
of the memories view).
"""
