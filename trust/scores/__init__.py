"""Trust scores: each agent's score from its dissents and overrides (SPEC 8), its terms, history
and probation.

Writes: ``services.trust_recompute`` (called by every write of evidence, by the nightly window job
through ``services.trust_windows_slide_batches``, and by ``POST trust/recompute/``). The formulas
are pure functions in ``scoring.py``. Projection: the score history (``trust.score_changed``) is
replayed by the core projection, trust.rounds.projection.
"""
