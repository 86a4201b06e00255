"""LangGraph's long-term memory store, backed by the service: ``AgentMemoryStore``.

    pip install "ledgered-memory[langgraph]"

    from ledgered_memory.langgraph import AgentMemoryStore

    store = AgentMemoryStore(index_fields=["text"])  # AGENT_MEMORY_URL, AGENT_MEMORY_API_KEY
    graph = builder.compile(store=store)

An item is one memory of the store's agent (the agent-scoped key's, or ``agent=``):

- its content is the text of the item's indexed fields (LangGraph's ``index`` paths; by default
  ``"$"``, the whole value as JSON), which the service embeds and indexes for keywords, so
  ``search(query=...)`` is the service's memory search;
- its metadata holds, under ``"langgraph"``, the namespace (``"users.42"``: LangGraph forbids
  periods in labels), each label by position (``{"0": "users", "1": "42"}``, which a namespace
  prefix matches by containment), the key, the value itself, whether it is indexed and its TTL;
- its type is ``explicit`` (the service expires no explicit memory by type) and its importance
  1.0; it belongs to no session, so no other item joins its keyword document.

A put on an existing key changes that memory in place (one memory per key; the service's
``updated_at`` moves, ``created_at`` stays). Gets, filters and namespace listings also see
memories the service archived (decay or the agent's quota): archiving is about search, an item
is still there; the service's semantic search leaves them out, and a put makes one active again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
)

from ledgered_memory import types
from ledgered_memory._adapters import (
    MAX_PAGE_SIZE,
    Clients,
    ListParams,
    Plan,
    memories_create,
    memories_delete,
    memories_every,
    memories_list,
    memories_search,
    memories_update,
    memory_text,
    metadata_param,
)
from ledgered_memory._async import AsyncClient
from ledgered_memory._sync import Client
from ledgered_memory.errors import NotFoundError

__all__ = ["AgentMemoryStore"]

KIND = "langgraph"
# The service's largest top_k (SEARCH_MAX_TOP_K): a semantic search ranks at most this many.
MAX_TOP_K = 50
# LangGraph's comparison operators; $eq alone can be asked of the service (as containment).
OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


class AgentMemoryStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are memories of one agent of the service.

    Args:
        client: The blocking client (``batch`` and the sync methods); the async one is opened
            beside it when first needed, and both come from the environment when neither is
            given.
        async_client: The asyncio client (``abatch`` and the ``a*`` methods).
        agent: The agent whose memories the items are. Leave it out with an agent-scoped key
            (its agent); name it with a tenant-wide key.
        index_fields: The value's paths whose text is embedded and searched, in LangGraph's
            path syntax (``["text"]``, ``["messages[*].content"]``); ``["$"]`` (the default)
            is the whole value as JSON. A put's ``index=`` overrides it per item, ``False``
            leaves the item out of semantic search.
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes) for puts that name none and
            ``refresh_on_read``. A TTL becomes the memory's ``expires_at``; the service drops
            expired memories from every answer and deletes them in its sweep.
        search_threshold: The cosine below which a semantic match that shares no word with the
            query is dropped; -1 (the default) ranks every candidate, as LangGraph's stores do,
            and ``None`` takes the service's configured threshold.
        search_weights: The service's ranking weights (``similarity``, ``recency``,
            ``importance``, ``source_priority``) for semantic search; its defaults otherwise.
        importance: The importance new items are stored with (the service decays it over time
            without retrieval and archives memories that fall below 0.1).
    """

    supports_ttl = True

    def __init__(
        self,
        client: Client | None = None,
        *,
        async_client: AsyncClient | None = None,
        agent: str | None = None,
        index_fields: Sequence[str] = ("$",),
        ttl: TTLConfig | None = None,
        search_threshold: float | None = -1.0,
        search_weights: Mapping[str, float] | None = None,
        importance: float = 1.0,
    ) -> None:
        self._clients = Clients(client, async_client)
        self.agent = agent
        self.index_fields = list(index_fields)
        self.ttl_config = ttl
        self.search_threshold = search_threshold
        self.search_weights = dict(search_weights) if search_weights is not None else None
        self.importance = importance

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order, each seeing what the ones before it wrote."""
        return self._clients.run(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order, each seeing what the ones before it wrote."""
        return await self._clients.arun(self._batch(list(ops)))

    # --- the plans (run by batch and abatch alike) ---------------------------------------------

    def _batch(self, ops: list[Op]) -> Plan[list[Result]]:
        for op in ops:  # every namespace checked before anything is written
            _check_namespace(op)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append((yield from self._get(op)))
            elif isinstance(op, PutOp):
                yield from self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append((yield from self._search(op)))
            elif isinstance(op, ListNamespacesOp):
                results.append((yield from self._list_namespaces(op)))
            else:
                raise ValueError(f"Unknown operation type: {type(op).__name__}")
        return results

    def _lookup(self, namespace: tuple[str, ...], key: str) -> Plan[list[types.Memory]]:
        """The memories holding this item, newest first: one, unless two puts of a new key
        raced (the next put keeps the newest and deletes the others)."""
        document = {KIND: {"namespace": _joined(namespace), "key": key}}
        page = yield from memories_list(**self._params(document, page_size=10))
        return page.results

    def _get(self, op: GetOp) -> Plan[Item | None]:
        found = yield from self._lookup(op.namespace, op.key)
        if not found:
            return None
        memory = _preferred(found)
        if op.refresh_ttl:
            memory = yield from self._refreshed(memory)
        return _item(memory)

    def _put(self, op: PutOp) -> Plan[None]:
        found = yield from self._lookup(op.namespace, op.key)
        if op.value is None:
            for memory in found:
                yield from memories_delete(memory["id"])
            return None
        value = dict(op.value)
        text, indexed = self._indexed_text(value, op.index)
        document: dict[str, Any] = {
            "namespace": _joined(op.namespace),
            "labels": _labels(op.namespace),
            "key": op.key,
            "value": value,
            "indexed": indexed,
        }
        if op.ttl is not None:
            document["ttl"] = op.ttl
        expires_at = _expiry(op.ttl)
        active = [memory for memory in found if memory["archived_at"] is None]
        if active:
            kept = active[0]
            changes: types.PatchedMemoryUpdateRequest = {
                "metadata": {KIND: document},
                "expires_at": expires_at,
            }
            if kept["content"] != text:  # a new text is embedded again; the same one is not
                changes["content"] = text
            try:
                kept = yield from memories_update(kept["id"], **changes)
            except NotFoundError:  # archived or deleted since the lookup: store it anew
                active = []
        if not active:
            new: types.MemoryStoreRequest = {
                "content": text,
                "metadata": {KIND: document},
                "memory_type": "explicit",
                "importance": self.importance,
            }
            if expires_at is not None:
                new["expires_at"] = expires_at
            if self.agent is not None:
                new["agent"] = self.agent
            kept = yield from memories_create(**new)
        for memory in found:
            if memory["id"] != kept["id"]:
                yield from memories_delete(memory["id"])
        return None

    def _search(self, op: SearchOp) -> Plan[list[SearchItem]]:
        asked, exact = _containment(op.filter or {})
        document: dict[str, Any] = {}
        if op.namespace_prefix:
            document["labels"] = _labels(op.namespace_prefix)
        if asked:
            document["value"] = asked
        if op.limit <= 0:
            return []
        if op.query:
            return (yield from self._semantic_search(op, document, exact))
        # No query: the items in the namespace, newest first, through the list's metadata filter.
        wanted = op.offset + op.limit
        params = self._params({KIND: document}, page_size=min(max(wanted, 10), MAX_PAGE_SIZE))
        matched: list[types.Memory] = []
        cursor: str | None = None
        while len(matched) < wanted:
            page = yield from memories_list(cursor, **params)
            matched += [m for m in page.results if exact or _matches(_value(m), op.filter or {})]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        items = []
        for memory in matched[op.offset : wanted]:
            if op.refresh_ttl:
                memory = yield from self._refreshed(memory)
            items.append(
                _search_item(_document(memory), memory["created_at"], memory["updated_at"], None)
            )
        return items

    def _semantic_search(
        self, op: SearchOp, document: dict[str, Any], exact: bool
    ) -> Plan[list[SearchItem]]:
        document["indexed"] = True
        # A filter the service cannot apply whole is finished here, on the best MAX_TOP_K.
        top_k = min(op.offset + op.limit, MAX_TOP_K) if exact else MAX_TOP_K
        request: types.SearchRequest = {
            "query": op.query or "",
            "top_k": top_k,
            "sources": ["agent_memory"],
            "filters": {"metadata": {KIND: document}},
            "threshold": self.search_threshold,
        }
        if self.search_weights is not None:
            request["weights"] = cast("types.SearchWeightsRequest", self.search_weights)
        if self.agent is not None:
            request["agent"] = self.agent
        answer = yield from memories_search(**request)
        hits = [
            hit
            for hit in answer["results"]
            if hit["source"] == "agent_memory"
            and KIND in hit["details"].get("metadata", {})
            and (exact or _matches(hit["details"]["metadata"][KIND]["value"], op.filter or {}))
        ]
        items = []
        for hit in hits[op.offset : op.offset + op.limit]:
            document = hit["details"]["metadata"][KIND]
            updated_at = hit["details"]["updated_at"]
            if op.refresh_ttl and "ttl" in document:
                # A hit does not carry its expiry: read the item to know whether it must move.
                found = yield from self._lookup(_split(document["namespace"]), document["key"])
                if found:
                    updated_at = (yield from self._refreshed(_preferred(found)))["updated_at"]
            items.append(
                _search_item(document, hit["details"]["created_at"], updated_at, hit["score"])
            )
        return items

    def _list_namespaces(self, op: ListNamespacesOp) -> Plan[list[tuple[str, ...]]]:
        conditions = op.match_conditions or ()
        # Labels a prefix fixes by position narrow the read; suffixes and wildcards are checked
        # on what comes back. Every item under that prefix is read once (the service has no
        # "distinct" answer): fine for thousands of items, slow for millions.
        fixed = {
            str(position): label
            for condition in conditions
            if condition.match_type == "prefix"
            for position, label in enumerate(condition.path)
            if label != "*"
        }
        document: dict[str, Any] = {"labels": fixed} if fixed else {}
        memories = yield from memories_every(self._params({KIND: document}, MAX_PAGE_SIZE))
        namespaces = {_namespace(memory) for memory in memories}
        kept = [ns for ns in namespaces if all(_does_match(c, ns) for c in conditions)]
        if op.max_depth is not None:
            kept = list({ns[: op.max_depth] for ns in kept})
        return sorted(kept)[op.offset : op.offset + op.limit]

    def _refreshed(self, memory: types.Memory) -> Plan[types.Memory]:
        """The memory with its expiry moved to a TTL from now, when more than half of its TTL
        has passed: each move is a write (and a ledger event), so a hot item moves at most
        twice per TTL instead of on every read; it expires between half its TTL and its TTL
        after the last read."""
        ttl = _document(memory).get("ttl")
        if ttl is None or memory["archived_at"] is not None:  # the API changes active ones only
            return memory
        expires_at = memory["expires_at"]
        left = (
            datetime.fromisoformat(expires_at) - datetime.now(UTC)
            if expires_at is not None
            else timedelta(0)
        )
        if left >= timedelta(minutes=float(ttl) / 2):
            return memory
        try:
            return (yield from memories_update(memory["id"], expires_at=_expiry(float(ttl))))
        except NotFoundError:  # archived or deleted since it was read: answer what was read
            return memory

    def _params(self, document: Mapping[str, Any], page_size: int) -> ListParams:
        return {
            "agent": self.agent,
            "metadata": metadata_param(document),
            "include_archived": True,
            "page_size": page_size,
        }

    def _indexed_text(
        self, value: dict[str, Any], index: Literal[False] | list[str] | None
    ) -> tuple[str, bool]:
        """The memory's text and whether the item takes part in semantic search: the text at
        the indexed paths, or (none of them present, or ``index=False``) the whole value as
        JSON, which the service needs as content but semantic search then leaves out."""
        whole = get_text_at_path(value, "$")[0]
        if index is False:
            return memory_text(whole, whole), False
        paths = self.index_fields if index is None else index
        texts = [text for path in paths for text in get_text_at_path(value, path)]
        text = "\n".join(texts)
        return memory_text(text, whole), bool(text.strip())


# --- helpers ---------------------------------------------------------------------------------


def _check_namespace(op: Op) -> None:
    """LangGraph's label rules, which the stored form relies on (labels joined by periods);
    its methods check them, a direct ``batch`` call does not."""
    if isinstance(op, GetOp | PutOp):
        labels: tuple[str, ...] = op.namespace
    elif isinstance(op, SearchOp):
        labels = op.namespace_prefix
    elif isinstance(op, ListNamespacesOp):
        labels = tuple(label for c in op.match_conditions or () for label in c.path)
    else:
        return
    if isinstance(op, PutOp) and not labels:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    for label in labels:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {labels}: labels are non-empty strings "
                "without periods or NUL characters."
            )


def _joined(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)


def _labels(namespace: tuple[str, ...]) -> dict[str, str]:
    return {str(position): label for position, label in enumerate(namespace)}


def _document(memory: types.Memory) -> dict[str, Any]:
    return cast(dict[str, Any], memory["metadata"][KIND])


def _value(memory: types.Memory) -> dict[str, Any]:
    return cast(dict[str, Any], _document(memory)["value"])


def _split(namespace: str) -> tuple[str, ...]:
    return tuple(namespace.split("."))


def _namespace(memory: types.Memory) -> tuple[str, ...]:
    return _split(_document(memory)["namespace"])


def _preferred(found: list[types.Memory]) -> types.Memory:
    """Of the memories holding one item, the newest active one (else the newest)."""
    return next((m for m in found if m["archived_at"] is None), found[0])


def _expiry(ttl_minutes: float | None) -> str | None:
    if ttl_minutes is None:
        return None
    return (datetime.now(UTC) + timedelta(minutes=ttl_minutes)).isoformat()


def _item(memory: types.Memory) -> Item:
    return Item(
        value=_value(memory),
        key=_document(memory)["key"],
        namespace=_namespace(memory),
        created_at=datetime.fromisoformat(memory["created_at"]),
        updated_at=datetime.fromisoformat(memory["updated_at"]),
    )


def _search_item(
    document: Mapping[str, Any], created_at: str, updated_at: str, score: float | None
) -> SearchItem:
    return SearchItem(
        namespace=_split(document["namespace"]),
        key=document["key"],
        value=document["value"],
        created_at=datetime.fromisoformat(created_at),
        updated_at=datetime.fromisoformat(updated_at),
        score=score,
    )


def _containment(filter: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """What of a LangGraph filter the service can check, as a JSON document the value must
    contain, and whether that is the whole filter.

    A plain value or ``$eq`` is asked of the service as containment. Containment is equality
    for strings, numbers and booleans, and looser for lists and objects (a list contains its
    subsets), so those are checked here again; ``None`` (LangGraph also matches a missing
    field) and the ordering operators are checked here only.
    """
    asked: dict[str, Any] = {}
    exact = True
    for name, wanted in filter.items():
        if isinstance(wanted, dict) and any(k.startswith("$") for k in wanted):
            unknown = set(wanted) - OPERATORS
            if unknown:
                raise ValueError(f"Unsupported operator: {sorted(unknown)[0]}")
            if set(wanted) != {"$eq"}:
                exact = False
                continue
            wanted = wanted["$eq"]
        if wanted is None:
            exact = False
            continue
        if isinstance(wanted, dict | list | tuple):
            exact = False
        asked[name] = wanted
    return asked, exact


def _matches(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """LangGraph's own filter semantics (its in-memory store's), checked on one value."""
    return all(_compare(value.get(name), wanted) for name, wanted in filter.items())


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_apply(actual, operator, operand) for operator, operand in wanted.items())
        return isinstance(actual, dict) and all(
            _compare(actual.get(k), v) for k, v in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_compare(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _apply(actual: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(actual == operand)
    if operator == "$ne":
        return bool(actual != operand)
    if actual is None:  # a missing field is neither above nor below anything
        return False
    try:
        number, bound = float(actual), float(operand)
    except (TypeError, ValueError):
        return False
    if operator == "$gt":
        return number > bound
    if operator == "$gte":
        return number >= bound
    if operator == "$lt":
        return number < bound
    if operator == "$lte":
        return number <= bound
    raise ValueError(f"Unsupported operator: {operator}")


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace matches a prefix or suffix condition ("*" matches any label)."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    else:
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    return all(wanted in ("*", label) for label, wanted in pairs)
