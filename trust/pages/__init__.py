"""The trust dashboards: the overview, one agent's page and the review queue, with the queue's
actions (``views``), and the review flow: overrides filtered and paged, bulk confirm, one at a
time with a word diff (``review``, ``diffs``). No logic of their own: views read the concepts'
selectors and write through their services (``override_revert``, ``override_revert_withdraw``,
``override_confirm``, ``overrides_confirm``, ``gaming_flag_review``, ``rubric_proposal_decide``).
No tables, no projection.
"""
