"""The content store (SPEC 7): large results kept out of the conversation, and compaction.

Writes (``services``): ``content_item_store``, ``action_result_record``, ``content_scope_clear``,
``content_snapshot_create``, ``content_snapshot_restore``, each with its ``content.*`` audit
event. Reads (``selectors``): ``content_items_visible``, ``content_items_query``,
``content_transform``, ``content_run_savings``, ``content_runs_savings``. ``compaction`` holds the
plugins, ``values`` content as stored. The items are primary data; ``projection`` rebuilds the
token savings' daily sums (``ContentSavingsDay``) from them. Endpoints:
``/api/v1/content/...``; page: token savings (``/memory/token-savings/``).
"""
