"""What trust scores drive: Devil's Advocate selection, gaming flags, the living rubric and its
proposals, and the metrics.

Writes: ``services`` (``devils_advocate_pick``, ``gaming_check``, ``gaming_flag_review``,
``rubric_version_create``, ``rubric_proposal_open``, ``rubric_proposal_decide``). Reads, the
metrics among them: ``selectors``. Projection: ``projection.GovernanceProjection``
("trust_governance"), registered after the core's.
"""
