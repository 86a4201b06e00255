"""Episodic memories (SPEC 4): what one agent stored, with its type, importance and expiry.

Writes (``services``): ``memories_store``, ``memory_update``, ``memory_delete`` (shreds the
content key), ``agent_memory_keys_shred``, ``memory_embeddings_backfill``,
``memories_mark_retrieved``; the lifecycle jobs' (``lifecycle``): ``memories_decay``,
``memories_expire``, ``memories_enforce_quota`` and their sweeps. Store-time rules are pure
functions in ``policies``; content sealing in ``sealing``; which memories hold (valid time) in
``validity``; a memory's changes replayed from its events in ``history``; supersession is
``memory.consolidation``. Reads: ``selectors`` (``memories_inactive``, ``memory_history``);
searching is ``memory.search``. Projection: ``MemoryProjection`` of ``memory.*`` events.
Endpoints ``/api/v1/memories/...``; page: the memory explorer (``/memory/``).
"""
