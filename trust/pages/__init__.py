"""The trust dashboards: the overview, one agent's page and the review queue, with the queue's
actions. No logic of their own: views read the concepts' selectors and write through their
services (``override_revert``, ``override_confirm``, ``gaming_flag_review``,
``rubric_proposal_decide``). No tables, no projection.
"""
