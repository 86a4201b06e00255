from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ledger.demo import demo_seeder_register
        from ledger.projections import projection_register
        from memory.demo import memory_demo_seed
        from memory.knowledge_projection import KnowledgeProjection
        from memory.projections import EventEmbeddingIndex, MemoryProjection
        from memory.working_memory import register_kinds

        projection_register(EventEmbeddingIndex())
        projection_register(MemoryProjection())
        projection_register(KnowledgeProjection())
        register_kinds()
        demo_seeder_register("memory", memory_demo_seed)
