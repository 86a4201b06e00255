"""Rounds and the evidence logged in them: dissents, overrides and their regret.

Writes: ``services`` (``rounds_post``, ``round_finalize``, ``round_revise``, ``dissent_log``,
``dissent_set_impact``, ``dissent_embeddings_backfill``) and ``overrides`` (``override_log``,
``override_revert``, ``override_revert_withdraw``, ``override_confirm``, ``overrides_confirm``,
``overrides_infer_regret``), under the input rules of
``policies``. Projection: ``projection.TrustProjection`` ("trust") replays rounds, dissents,
overrides and the score history.
"""
