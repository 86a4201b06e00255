"""The knowledge base (SPEC 6): the tenant's shared articles and agents' skills.

Writes (``services``): ``knowledge_document_create``, ``_update``, ``_publish``, ``_unpublish``,
``_delete``, ``knowledge_chunks_sync``, ``knowledge_chunks_embed_backfill``; chunking is pure
(``chunking``). Reads (``selectors``): ``knowledge_search``, ``knowledge_candidates`` (memory
search's knowledge leg), ``skills_for_agent``, ``skill_find``. Projection: ``KnowledgeProjection``
of ``kb.*`` events. Endpoints: ``/api/v1/kb/documents/...``, ``POST /api/v1/kb/search/``.
"""
