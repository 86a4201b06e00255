"""Memory's tables, defined by the concept that owns each (``memory/<concept>/models.py``) and
imported here so Django finds them under the ``memory`` app. Each is a projection of the ledger
or data derived from it, except the content store's items (primary data, audited in the ledger)
and the token savings' daily sums derived from them.
"""

from __future__ import annotations

from memory.consolidation.models import MemoryContentEmbedding
from memory.content.models import (
    ContentAttachment,
    ContentFormat,
    ContentItem,
    ContentItemType,
    ContentSavingsDay,
    ContentScope,
    ContentSnapshot,
)
from memory.embeddings.models import EventEmbedding
from memory.episodic.models import (
    Memory,
    MemoryKey,
    MemoryQuerySet,
    MemoryRole,
    MemorySearchTotals,
    MemoryTerm,
)
from memory.knowledge.models import KnowledgeChunk, KnowledgeDocument, KnowledgeKey, KnowledgeKind
from memory.search.models import MemoryMetadataTerm

__all__ = [
    "ContentAttachment",
    "ContentFormat",
    "ContentItem",
    "ContentItemType",
    "ContentSavingsDay",
    "ContentScope",
    "ContentSnapshot",
    "EventEmbedding",
    "KnowledgeChunk",
    "KnowledgeDocument",
    "KnowledgeKey",
    "KnowledgeKind",
    "Memory",
    "MemoryContentEmbedding",
    "MemoryKey",
    "MemoryMetadataTerm",
    "MemoryQuerySet",
    "MemoryRole",
    "MemorySearchTotals",
    "MemoryTerm",
]
