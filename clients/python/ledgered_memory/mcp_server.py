"""An MCP server that gives one agent its memory tools: search, store, list, update and delete
memories, store, retrieve and query content items, recall a run, log a dissent, read the rubric
and its own trust.

    AGENT_MEMORY_URL=http://127.0.0.1:8000 AGENT_MEMORY_API_KEY=<agent-scoped key> \\
        ledgered-memory-mcp                 # or: --transport http --port 8765; or manage.py mcp

The command line (``ledgered-memory-mcp``, ``manage.py mcp``) is in ``mcp_cli``.

The tools go through the service's HTTP API with this package's client, not through the Django
services: the agent-scoped key is then checked, scoped and rate-limited by exactly the code every
other client meets (authentication, roles, the tenant and agent scope, Idempotency-Key, error
codes), nothing here can see more than the key may, and the server can run on the agent's host
against a remote service. The cost is one loopback HTTP hop per tool call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError

from ledgered_memory import types
from ledgered_memory._async import AsyncClient
from ledgered_memory.errors import AgentMemoryError, ApiError

INSTRUCTIONS = """\
Long-term memory for one agent, shared with the other agents and people of its team. Use
search_memories before answering from memory and store_memory for facts worth keeping beyond
this conversation; list_memories, update_memory and delete_memory keep what is stored correct.
When a fact changes, store the new one with supersedes=[old ids] (or call supersede_memory):
the old one stays as history but no longer comes back from search.
Large tool outputs (logs, pages, query results) go to store_content; read them back in pieces
with retrieve_content instead of pasting them into the conversation.
recall brings back what happened earlier in a run. log_dissent records a disagreement with the
team's output, citing rubric criteria (get_rubric lists them). get_my_trust shows how much the
team trusts this agent's judgement and why."""

# Which API operations each tool calls (docs/client.md's coverage table is generated from this).
TOOL_OPERATIONS: dict[str, tuple[str, ...]] = {
    "search_memories": ("memories_search",),
    "store_memory": ("memories_create",),
    "list_memories": ("memories_list",),
    "update_memory": ("memories_update",),
    "delete_memory": ("memories_delete",),
    "supersede_memory": ("memories_supersede",),
    "memory_history": ("memories_history_list",),
    "update_memories": ("memories_bulk_update",),
    "delete_memories": ("memories_bulk_delete",),
    "store_content": ("content_items_create",),
    "retrieve_content": ("content_items_get",),
    "query_content": ("content_items_list",),
    "recall": ("recall",),
    "log_dissent": ("dissents_create",),
    "get_rubric": ("rubric_get",),
    "get_my_trust": ("trust_list", "trust_get"),
}

TransformName = Literal["full", "excerpt", "summary", "first_n", "last_n", "filtered"]


FILTERS_HELP = (
    "Optional filters narrow your own memories: an object of fields, e.g. "
    '{"tags": "billing", "importance": {"gte": 0.7}, "occurred_at": {"gte": "2026-01-01"}, '
    '"metadata": {"customer": "acme"}}, combined with AND / OR / NOT lists; fields '
    "session_id, memory_type, role, importance, created_at, occurred_at, updated_at, "
    "expires_at, tags, metadata (keys, dotted for nested ones), id; operators eq, ne, in, "
    "nin, gt, gte, lt, lte, exists, contains."
)


def _fail(exc: AgentMemoryError) -> ToolError:
    if isinstance(exc, ApiError):
        detail = f" Details: {exc.details}" if exc.details else ""
        return ToolError(f"{exc.code}: {exc.message}{detail}")
    return ToolError(f"The memory service could not be reached: {exc}")


def _given(**values: Any) -> dict[str, Any]:
    """The arguments the model actually passed: an omitted one keeps the server's default."""
    return {name: value for name, value in values.items() if value is not None}


def build_server(
    client: AsyncClient, *, agent: str, host: str = "127.0.0.1", port: int = 8765
) -> FastMCP:
    server = FastMCP(
        name=f"agent-memory ({agent})", instructions=INSTRUCTIONS, host=host, port=port
    )

    @server.tool(
        description=(
            "Search your long-term memory (your own memories, the team's ledger you may see, "
            "workflow steps and the published knowledge base) with a natural-language query. "
            "Use it before answering anything that earlier conversations, decisions or "
            "documents may settle. Returns the best matches first, each with its source, id, "
            "text and a relevance score between 0 and 1; an empty list means nothing relevant "
            "is remembered. Facts that a newer memory superseded are left out; pass "
            "include_superseded=true for them too, or as_of (an ISO 8601 date-time) for what "
            "held at that moment. " + FILTERS_HELP
        )
    )
    async def search_memories(
        query: str,
        top_k: int = 5,
        sources: list[str] | None = None,
        include_superseded: bool | None = None,
        as_of: str | None = None,
        filters: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        try:
            found = await client.memories_search(
                **_given(
                    query=query,
                    top_k=top_k,
                    sources=sources,
                    include_superseded=include_superseded,
                    as_of=as_of,
                    filters=cast("types.MemoryFilter", filters),
                )
            )
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return [
            {
                "source": hit["source"],
                "id": hit["id"],
                "content": hit["content"],
                "score": round(hit["score"], 4),
            }
            for hit in found["results"]
        ]

    @server.tool(
        description=(
            "Store one fact, preference, decision or observation in your long-term memory so a "
            "later conversation can find it with search_memories. Write it as a self-contained "
            "sentence (who, what, when). Optional: memory_type (e.g. 'fact', 'preference', "
            "'decision'), importance from 0 to 1, tags, a session_id to group a conversation, "
            "metadata (a JSON object), supersedes (ids of your older memories this one replaces, "
            "e.g. an old preference). Returns the stored memory's id, type, importance, expiry, "
            "the ids it superseded and supersession_candidates: older memories that look "
            "replaced by it (applied=false: pass their ids to supersede_memory if they are)."
        )
    )
    async def store_memory(
        content: str,
        memory_type: str | None = None,
        importance: float | None = None,
        tags: list[str] | None = None,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        supersedes: list[int] | None = None,
    ) -> dict[str, Any]:
        fields = _given(
            content=content,
            memory_type=memory_type,
            importance=importance,
            tags=tags,
            session_id=session_id,
            metadata=metadata,
            supersedes=supersedes,
        )
        try:
            memory = await client.memories_create(**fields)
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return _stored_summary(memory)

    @server.tool(
        description=(
            "List your stored memories, newest first, to review what you remember or find one "
            "to correct: filter by memory_type, tag or session_id, or anything with 'filter'. "
            "Returns up to 'limit' memories (id, content, type, importance, tags, session, "
            "dates) and a next_cursor; pass it back as 'cursor' for the next page (null: there "
            "is no more). include_superseded=true lists replaced facts too (superseded_by "
            "names the newer). " + FILTERS_HELP.replace("filters", "filter")
        )
    )
    async def list_memories(
        memory_type: str | None = None,
        tag: str | None = None,
        session_id: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 20,
        cursor: str | None = None,
        include_superseded: bool | None = None,
    ) -> dict[str, Any]:
        try:
            page = await client.memories_list(
                memory_type=memory_type,
                tag=tag,
                session_id=session_id,
                filter=cast("types.MemoryFilter | None", filter),
                page_size=limit,
                cursor=cursor,
                include_superseded=include_superseded,
            )
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return {
            "memories": [_memory_summary(memory) for memory in page.results],
            "next_cursor": page.next_cursor,
        }

    @server.tool(
        description=(
            "Correct one of your memories by its id (from search_memories or list_memories): "
            "give only what changes: content (a self-contained sentence), memory_type, "
            "importance from 0 to 1, tags (replaces the list), metadata (replaces the object), "
            "or expires_at (an ISO 8601 date-time), and why in reason (kept in the clear). Its "
            "earlier versions stay in the team's ledger (see memory_history). Returns the "
            "memory as it now is."
        )
    )
    async def update_memory(
        memory_id: int,
        content: str | None = None,
        memory_type: str | None = None,
        importance: float | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        expires_at: str | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        fields = _given(
            content=content,
            memory_type=memory_type,
            importance=importance,
            tags=tags,
            metadata=metadata,
            expires_at=expires_at,
            reason=reason,
        )
        try:
            memory = await client.memories_update(memory_id, **fields)
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return _memory_summary(memory)

    @server.tool(
        description=(
            "Mark older memories of yours as replaced by a newer one (memory_id): use it when a "
            "fact changed (a new preference, role, plan or date). The older ones stay as "
            "history (search_memories with as_of finds them) but ordinary searches no longer "
            "return them. Returns the newer memory and the ids it now supersedes."
        )
    )
    async def supersede_memory(memory_id: int, supersedes: list[int]) -> dict[str, Any]:
        try:
            memory = await client.memories_supersede(memory_id, supersedes=supersedes)
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return _stored_summary(memory)

    @server.tool(
        description=(
            "Delete one of your memories for good, by its id: use it for something wrong, "
            "obsolete or that should never have been stored (its text is shredded; the ledger "
            "keeps only that it existed, and reason, kept in the clear). To correct a memory, "
            "prefer update_memory. Returns the deleted id."
        )
    )
    async def delete_memory(memory_id: int, reason: str | None = None) -> dict[str, Any]:
        try:
            await client.memories_delete(memory_id, reason=reason)
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return {"deleted": memory_id}

    @server.tool(
        description=(
            "How one of your memories changed, oldest first, even after it was deleted: for each "
            "change its kind (memory.stored, memory.updated, memory.archived, memory.expired, "
            "memory.deleted), when, who made it (actor, and actor_kind: agent, person, api_key "
            "or system with its job: decay, quota or ttl), the reason given, and the values of "
            "the changed fields before and after. A deleted or expired memory's content and "
            "metadata read as null (content_shredded). Pass next_cursor as cursor for more."
        )
    )
    async def memory_history(memory_id: int, cursor: str | None = None) -> dict[str, Any]:
        try:
            page = await client.memories_history_list(memory_id, cursor=cursor)
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return {"changes": page.results, "next_cursor": page.next_cursor}

    @server.tool(
        description=(
            "Change many of your memories at once, chosen by ids or by a filter: set "
            "importance (0 to 1), add or remove tags, merge keys into metadata or remove keys, "
            "set expires_at (ISO 8601). Each memory changes as update_memory would change it. "
            "Use dry_run first to see how many match. At most 500 per call: when "
            "'remaining' is above 0, call again with after=continue_after. " + FILTERS_HELP
        )
    )
    async def update_memories(
        ids: list[int] | None = None,
        filter: dict[str, Any] | None = None,
        importance: float | None = None,
        tags_add: list[str] | None = None,
        tags_remove: list[str] | None = None,
        metadata_merge: dict[str, Any] | None = None,
        metadata_remove: list[str] | None = None,
        expires_at: str | None = None,
        dry_run: bool = False,
        after: int | None = None,
    ) -> dict[str, Any]:
        changes = _given(
            importance=importance,
            tags_add=tags_add,
            tags_remove=tags_remove,
            metadata_merge=metadata_merge,
            metadata_remove=metadata_remove,
            expires_at=expires_at,
        )
        try:
            answer = await client.memories_bulk_update(
                **_given(ids=ids, filter=filter, dry_run=dry_run, after=after),
                changes=cast("types.MemoryBulkChangesRequest", changes),
            )
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return dict(answer)

    @server.tool(
        description=(
            "Delete many of your memories for good, chosen by ids or by a filter (their text "
            "is shredded, as delete_memory does), or all of them (all=true, optionally one "
            "session_id) with confirm=true. Use dry_run first: it counts and shows some ids. "
            "At most 500 per call: when 'remaining' is above 0, call again. " + FILTERS_HELP
        )
    )
    async def delete_memories(
        ids: list[int] | None = None,
        filter: dict[str, Any] | None = None,
        all: bool = False,
        session_id: str | None = None,
        confirm: bool = False,
        dry_run: bool = False,
        reason: str | None = None,
    ) -> dict[str, Any]:
        try:
            answer = await client.memories_bulk_delete(
                **_given(
                    ids=ids,
                    filter=filter,
                    all=all,
                    session_id=session_id,
                    confirm=confirm,
                    dry_run=dry_run,
                    reason=reason,
                )
            )
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return dict(answer)

    @server.tool(
        description=(
            "Put a large piece of content (a log, a web page, a query result, JSON) in the "
            "content store instead of the conversation, and get back a short handle. Use it for "
            "anything longer than a screen. content is text or any JSON value; run_id ties it to "
            "the current run (scope 'run'), or use scope 'agent' to keep it across runs. "
            "type is one of action_result, web_content, database_result, custom. Returns the "
            "item's id, size in bytes and its length in tokens; read it with retrieve_content."
        )
    )
    async def store_content(
        content: Any,
        run_id: str | None = None,
        scope: Literal["run", "agent"] | None = None,
        type: Literal["action_result", "web_content", "database_result", "custom"] | None = None,
        tags: list[str] | None = None,
        source: str | None = None,
    ) -> dict[str, Any]:
        fields = _given(
            content=content, run_id=run_id, scope=scope, type=type, tags=tags, source=source
        )
        try:
            item = await client.content_items_create(**fields)
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return _item_summary(item)

    @server.tool(
        description=(
            "Read a content-store item, whole or in part, so you only spend tokens on what you "
            "need. transform: 'full' (everything), 'excerpt' (characters start..end, or "
            "'context' characters around the first 'phrase'), 'first_n' / 'last_n' (n units; "
            "unit = lines, chars or items), 'filtered' (lines containing 'match' or matching the "
            "regex 'pattern'; for JSON, 'keys' = comma-separated keys to keep), 'summary'. "
            "Returns the content and the item's metadata; a not_found error means the id is "
            "wrong, cleared, or not yours."
        )
    )
    async def retrieve_content(
        item_id: str,
        transform: TransformName = "full",
        n: int | None = None,
        unit: Literal["lines", "chars", "items"] | None = None,
        match: str | None = None,
        pattern: str | None = None,
        keys: str | None = None,
        start: int | None = None,
        end: int | None = None,
        phrase: str | None = None,
        context: int | None = None,
    ) -> dict[str, Any]:
        try:
            answer = await client.content_items_get(
                item_id,
                transform=transform,
                n=n,
                unit=unit,
                match=match,
                pattern=pattern,
                keys=keys,
                start=start,
                end=end,
                phrase=phrase,
                context=context,
            )
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return {
            "content": answer["content"],
            "transform": answer["transform"],
            "item": _item_summary(answer["item"]),
        }

    @server.tool(
        description=(
            "List the content-store items you can read, newest first, without their content: "
            "filter by run_id, tags (comma-separated), type, source, a time window (since/until, "
            "ISO 8601) and scope. Use it to find an item you stored earlier in this run or a "
            "previous one, then read it with retrieve_content. Returns id, type, size, tokens, "
            "tags and timestamp per item."
        )
    )
    async def query_content(
        run_id: str | None = None,
        tags: str | None = None,
        type: str | None = None,
        source: str | None = None,
        since: str | None = None,
        until: str | None = None,
        scope: Literal["run", "agent"] | None = None,
        limit: int = 20,
    ) -> list[dict[str, Any]]:
        try:
            items = await client.content_items_list(
                run_id=run_id,
                tags=tags,
                type=type,
                source=source,
                since=since,
                until=until,
                scope=scope,
                limit=limit,
            )
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return [_item_summary(item) for item in items]

    @server.tool(
        description=(
            "Recall what happened earlier in a run (from the team's ledger). mode 'episodic' "
            "returns the most recent events in order; mode 'salience' ranks the run's events "
            "by relevance to 'query', recency and importance (give current_turn to measure "
            "recency in turns). Use it to pick up a long task where it stood. Returns a "
            "ready-to-read 'prompt' text and the items with their scores."
        )
    )
    async def recall(
        run_id: str,
        mode: Literal["episodic", "salience"] = "episodic",
        query: str | None = None,
        current_turn: int | None = None,
        top_k: int | None = None,
        max_recent: int | None = None,
    ) -> dict[str, Any]:
        fields = _given(
            run_id=run_id,
            mode=mode,
            query=query,
            current_turn=current_turn,
            top_k=top_k,
            max_recent=max_recent,
        )
        try:
            answer = await client.recall(**fields)
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return {"prompt": answer["prompt"], "items": answer["items"], "mode": answer["mode"]}

    @server.tool(
        description=(
            "Record that you disagree with the team's current output or a decision, with your "
            "reasons. Be specific and cite the rubric criteria your objection rests on "
            "(rubric_citations: criterion names from get_rubric); give round_id when the "
            "disagreement is about a review round. Dissents that later prove right raise your "
            "trust. Returns the dissent's id and its depth score (how substantive it reads)."
        )
    )
    async def log_dissent(
        text: str,
        rubric_citations: list[str] | None = None,
        round_id: str | None = None,
        context: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        fields = _given(
            text=text, rubric_citations=rubric_citations, round_id=round_id, context=context
        )
        try:
            dissent = await client.dissents_create(**fields)
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return {
            "id": dissent["id"],
            "depth_score": dissent["depth_score"],
            "rubric_citations": dissent.get("rubric_citations", []),
            "rubric_version": dissent.get("rubric_version"),
        }

    @server.tool(
        description=(
            "The team's current review rubric: the criteria (name and description) that "
            "dissents cite. Use the names in log_dissent's rubric_citations."
        )
    )
    async def get_rubric() -> dict[str, Any]:
        try:
            rubric = await client.rubric_get()
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return {"version": rubric["version"], "criteria": rubric["criteria"]}

    @server.tool(
        description=(
            "Your current trust score (0 to 1; new agents start at 0.6) and what it is made of: "
            "the share of your dissents that had impact, their average depth, the share of "
            "overrides of your output that were later regretted, whether you are still on "
            "probation, and your recent score changes with their reasons. Use it to decide how "
            "strongly to argue or when to defer."
        )
    )
    async def get_my_trust() -> dict[str, Any]:
        try:
            mine = (await client.trust_list()).results  # an agent key sees only its own agent
            detail = await client.trust_get(mine[0]["id"])
        except AgentMemoryError as exc:
            raise _fail(exc) from exc
        return {
            "agent": detail["name"],
            "trust_score": detail["trust_score"],
            "on_probation": detail["on_probation"],
            "rounds_participated": detail["rounds_participated"],
            "dissents": detail["dissents"],
            "overrides": detail["overrides"],
            "components": detail["components"],
            "recent_changes": detail["history"][-5:],
        }

    return server


def _pick(answer: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The fields of an API answer a tool returns: what the model needs, not every column."""
    return {key: answer[key] for key in keys}


def _item_summary(item: types.ContentItem) -> dict[str, Any]:
    return _pick(
        item, ("id", "type", "format", "run_id", "size", "tokens_full", "tags", "timestamp")
    )


def _memory_summary(memory: types.Memory) -> dict[str, Any]:
    fields = ("id", "content", "memory_type", "importance", "tags", "session_id")
    validity = ("valid_from", "valid_until", "superseded_by")
    return _pick(memory, (*fields, "created_at", "updated_at", "expires_at", *validity))


def _stored_summary(memory: types.MemoryStored) -> dict[str, Any]:
    summary = _pick(memory, ("id", "memory_type", "importance", "tags", "expires_at"))
    summary["supersedes"] = memory["supersedes"]
    summary["supersession_candidates"] = [
        _pick(candidate, ("id", "content", "applied"))
        for candidate in memory["supersession_candidates"]
    ]
    return summary


if __name__ == "__main__":  # python -m ledgered_memory.mcp_server, as before the console script
    from ledgered_memory.mcp_cli import main

    main()
