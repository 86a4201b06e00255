from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ledger.demo import demo_seeder_register
        from ledger.jobs import job_register
        from ledger.projections import agent_deletion_step_register, projection_register
        from memory.content.projection import ContentSavingsProjection
        from memory.context.working_memory import register_kinds
        from memory.demo import memory_demo_seed
        from memory.embeddings.projection import EventEmbeddingIndex
        from memory.episodic.projection import MemoryProjection
        from memory.episodic.services import agent_memory_keys_shred
        from memory.knowledge.projection import KnowledgeProjection
        from memory.tasks import JOB_SPECS

        projection_register(EventEmbeddingIndex())
        projection_register(MemoryProjection())
        projection_register(KnowledgeProjection())
        projection_register(ContentSavingsProjection())
        agent_deletion_step_register(agent_memory_keys_shred)
        register_kinds()
        demo_seeder_register("memory", memory_demo_seed)
        job_register(*JOB_SPECS)
