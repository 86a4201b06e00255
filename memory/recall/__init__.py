"""Recall and reflection (SPEC 3.1): what an agent remembers of a run, read from the ledger.

Reads (``selectors``): ``recall_episodic``, ``recall_salience``. Writes (``services``):
``reflection_create_if_due``, ``reflections_create_due`` and the job's
``reflections_due_batches``, each appending ``agent.reflected`` events that later recall reads
like any other. No projection of its own. Endpoints: ``POST /api/v1/recall/``,
``POST /api/v1/reflections/``.
"""
