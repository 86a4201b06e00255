"""Consolidation (issue 22): facts that supersede each other.

A memory may supersede older ones of its agent, by id (``supersedes`` on store, or
``POST /api/v1/memories/{id}/supersede/``) or because the service found them stating the same
thing about the same subject: the nearest neighbours judged by the rule in ``rules`` or, with
``CONSOLIDATION_LLM_URL``, by a chat model (``model``), under ``CONSOLIDATION_MODE``. Writes:
``services.memories_supersede``, ``services.supersessions_apply`` (called by the store); each
supersession is a ``memory.superseded`` event, replayed by ``memory.episodic.projection``.
The validity predicate every read uses is ``memory.episodic.validity``.
"""
