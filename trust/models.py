"""Trust's tables, for Django to find: each is defined in the sub-package of the concept that
owns it (rounds, scores, governance); app_label stays ``trust``, so migrations are unchanged.
"""

from __future__ import annotations

from trust.governance.models import GamingFlag, RubricCriterion, RubricProposal, RubricVersion
from trust.rounds.models import (
    ArtifactVersion,
    Dissent,
    DissentEmbedding,
    Override,
    Round,
    RoundParticipant,
)
from trust.scores.models import TrustScoreChange

__all__ = [
    "ArtifactVersion",
    "Dissent",
    "DissentEmbedding",
    "GamingFlag",
    "Override",
    "Round",
    "RoundParticipant",
    "RubricCriterion",
    "RubricProposal",
    "RubricVersion",
    "TrustScoreChange",
]
