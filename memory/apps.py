from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ledger.projections import projection_register
        from memory.knowledge_projection import KnowledgeProjection
        from memory.projections import EventEmbeddingIndex, MemoryProjection
        from memory.working_memory import register_kinds

        projection_register(EventEmbeddingIndex())
        projection_register(MemoryProjection())
        projection_register(KnowledgeProjection())
        register_kinds()
