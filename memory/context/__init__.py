"""Working memory (SPEC 6): the prompt context for an agent's next model call, within a budget.

Write entry point (``services``): ``context_assemble`` retrieves (memory and knowledge search)
and hands the parts to ``working_memory.working_memory_assemble``, which lays them out and
appends one ``context.truncated`` event per cut. Token counts: ``tokens``. No projection.
Endpoint: ``POST /api/v1/context/``.
"""
