"""What the framework adapters share (docs/integrations.md).

An adapter's logic is written once, as a *plan*: a generator that yields the client calls it
needs (``Step``) and is sent their answers back, or has their errors thrown in. ``Clients.run``
carries a plan out with the blocking ``Client``, ``Clients.arun`` with the ``AsyncClient``: the
same calls in the same order, so an adapter's sync and async methods cannot drift apart.

Also here: a session of memories kept as an ordered log, which LangChain's chat history and the
OpenAI Agents SDK's session both are.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict, TypeVar, Unpack, cast

from ledgered_memory import types
from ledgered_memory._async import AsyncClient
from ledgered_memory._core import Page
from ledgered_memory._sync import Client
from ledgered_memory.errors import AgentMemoryError, NotFoundError

T = TypeVar("T")

# The service's largest list page.
MAX_PAGE_SIZE = 500
# The service's largest batch of new memories.
MAX_BATCH = 1000
# A memory's text (what the service embeds and indexes for keywords) is cut here: the adapters
# keep the framework's whole object in the metadata, so nothing is lost, and a long tool output
# stays under the service's content limit (100,000 characters by default).
MAX_TEXT_CHARS = 20_000


@dataclass(frozen=True)
class Step:
    """One client call: a method that ``Client`` and ``AsyncClient`` both have (one returning
    an answer, not an iterator), and its arguments."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


Plan = Generator[Step, Any, T]


class Clients:
    """The blocking and the asyncio client an adapter calls.

    Give either (the other is opened when first needed, with its URL, key, timeout and retry
    policy), both, or neither (then both come from ``AGENT_MEMORY_URL`` and
    ``AGENT_MEMORY_API_KEY``). An ``AsyncClient`` belongs to the event loop it first ran in.
    """

    def __init__(self, client: Client | None, async_client: AsyncClient | None) -> None:
        if client is None and async_client is None:
            client = Client()
        self._client = client
        self._async_client = async_client

    @property
    def blocking(self) -> Client:
        if self._client is None:
            self._client = _same_caller(Client, cast(AsyncClient, self._async_client))
        return self._client

    @property
    def asynchronous(self) -> AsyncClient:
        if self._async_client is None:
            self._async_client = _same_caller(AsyncClient, cast(Client, self._client))
        return self._async_client

    def run(self, plan: Plan[T]) -> T:
        client = self.blocking
        answer: Any = None
        error: AgentMemoryError | None = None
        try:
            while True:
                step = plan.send(answer) if error is None else plan.throw(error)
                answer, error = None, None
                try:
                    answer = getattr(client, step.method)(*step.args, **step.kwargs)
                except AgentMemoryError as exc:
                    error = exc
        except StopIteration as finished:
            return cast(T, finished.value)

    async def arun(self, plan: Plan[T]) -> T:
        client = self.asynchronous
        answer: Any = None
        error: AgentMemoryError | None = None
        try:
            while True:
                step = plan.send(answer) if error is None else plan.throw(error)
                answer, error = None, None
                try:
                    answer = await getattr(client, step.method)(*step.args, **step.kwargs)
                except AgentMemoryError as exc:
                    error = exc
        except StopIteration as finished:
            return cast(T, finished.value)


C = TypeVar("C", Client, AsyncClient)


def _same_caller(kind: type[C], other: Client | AsyncClient) -> C:
    """A client of the other kind calling as ``other`` does."""
    return kind(
        base_url=other.base_url, api_key=other._api_key, timeout=other.timeout, retry=other.retry
    )


# --- the calls the plans make ------------------------------------------------------------------


class ListParams(TypedDict, total=False):
    agent: str | None
    session_id: str
    metadata: str
    include_archived: bool
    page_size: int


def memories_list(
    cursor: str | None = None, **params: Unpack[ListParams]
) -> Plan[Page[types.Memory]]:
    step = Step("memories_list", kwargs={**params, "cursor": cursor})
    return cast("Page[types.Memory]", (yield step))


def memories_every(params: ListParams, *, enough: int | None = None) -> Plan[list[types.Memory]]:
    """The memories the list answers (newest first), page after page; stops once it holds
    ``enough`` of them when that is given."""
    found: list[types.Memory] = []
    cursor: str | None = None
    while True:
        page = yield from memories_list(cursor, **params)
        found += page.results
        if page.next_cursor is None or (enough is not None and len(found) >= enough):
            return found
        cursor = page.next_cursor


def memories_create(**body: Unpack[types.MemoryStoreRequest]) -> Plan[types.Memory]:
    return cast("types.Memory", (yield Step("memories_create", kwargs=body)))


def memories_create_batch(
    **body: Unpack[types.MemoryBatchRequest],
) -> Plan[types.MemoryBatchResult]:
    return cast("types.MemoryBatchResult", (yield Step("memories_create_batch", kwargs=body)))


def memories_update(
    memory_id: int, **body: Unpack[types.PatchedMemoryUpdateRequest]
) -> Plan[types.Memory]:
    return cast("types.Memory", (yield Step("memories_update", (memory_id,), body)))


def memories_delete(memory_id: int) -> Plan[bool]:
    """Delete a memory; False when it was already gone (deleted by someone else meanwhile)."""
    try:
        yield Step("memories_delete", (memory_id,))
    except NotFoundError:
        return False
    return True


def memories_search(**body: Unpack[types.SearchRequest]) -> Plan[types.SearchResult]:
    return cast("types.SearchResult", (yield Step("memories_search", kwargs=body)))


def metadata_param(document: Mapping[str, Any]) -> str:
    """The list's ``metadata`` filter: memories whose metadata contains this document."""
    return json.dumps(document, separators=(",", ":"), sort_keys=True)


def memory_text(text: str, fallback: str) -> str:
    """A memory's text: ``text``, or ``fallback`` when it is blank (the service refuses empty
    content), cut at MAX_TEXT_CHARS."""
    chosen = text if text.strip() else fallback
    return chosen if len(chosen) <= MAX_TEXT_CHARS else chosen[: MAX_TEXT_CHARS - 1] + "…"


# --- a session as an ordered log ---------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One entry of a log as an adapter stores it: the service's role, the text the service
    embeds, and the framework's own object, kept whole."""

    role: types.MemoryRoleEnum
    text: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class SessionLog:
    """One conversation kept as memories of a session of one agent, oldest first.

    Each memory's metadata holds the framework's object under ``kind`` (``{"langchain":
    {...}}``), so it comes back exactly; only memories carrying it belong to the log, so other
    memories of the session (stored through the API or MCP) are neither read nor cleared.
    Archived memories still belong to it (the service archives for search, a conversation keeps
    its turns); expired ones are gone. Turns are ordered by id, which follows the order they
    were stored in, within a batch too.
    """

    session_id: str
    kind: str
    agent: str | None = None
    memory_type: str | None = "conversation"

    def _params(self, page_size: int) -> ListParams:
        return {
            "agent": self.agent,
            "session_id": self.session_id,
            "metadata": metadata_param({self.kind: {}}),
            "include_archived": True,
            "page_size": page_size,
        }

    def payload(self, memory: types.Memory) -> dict[str, Any]:
        return cast(dict[str, Any], memory["metadata"][self.kind])

    def read(self, limit: int | None = None) -> Plan[list[types.Memory]]:
        """The newest ``limit`` turns (all of them when None or negative), oldest first."""
        if limit == 0:
            return []
        if limit is None or limit < 0:
            newest_first = yield from memories_every(self._params(MAX_PAGE_SIZE))
        else:
            params = self._params(min(limit, MAX_PAGE_SIZE))
            newest_first = (yield from memories_every(params, enough=limit))[:limit]
        return newest_first[::-1]

    def append(self, turns: Sequence[Turn]) -> Plan[None]:
        for start in range(0, len(turns), MAX_BATCH):
            memories: list[types.MemoryInputRequest] = []
            for turn in turns[start : start + MAX_BATCH]:
                memory: types.MemoryInputRequest = {
                    "content": turn.text,
                    "role": turn.role,
                    "session_id": self.session_id,
                    "metadata": {self.kind: turn.payload},
                }
                if self.memory_type is not None:
                    memory["memory_type"] = self.memory_type
                memories.append(memory)
            if self.agent is None:
                yield from memories_create_batch(memories=memories)
            else:
                yield from memories_create_batch(agent=self.agent, memories=memories)
        return None

    def pop(self) -> Plan[types.Memory | None]:
        """Remove the newest turn and answer it (None when the log is empty)."""
        while True:
            page = yield from memories_list(**self._params(1))
            if not page.results:
                return None
            newest = page.results[0]
            if (yield from memories_delete(newest["id"])):
                return newest
            # Someone else removed it first: the next newest is ours to take.

    def clear(self) -> Plan[None]:
        for memory in (yield from memories_every(self._params(MAX_PAGE_SIZE))):
            yield from memories_delete(memory["id"])
        return None


class SessionAdapter:
    """A framework's conversation store over one ``SessionLog``; a subclass names its ``kind``
    (the key its objects are kept under in the memories' metadata).

    Args:
        session_id: The service's session id (up to 200 characters).
        client: The blocking client; the async one is opened beside it when first needed, and
            both come from the environment when neither is given.
        async_client: The asyncio client.
        agent: The agent whose memories the turns are. Leave it out with an agent-scoped key;
            name it with a tenant-wide key.
        memory_type: The service's type for every turn, so one conversation shares one
            retention and a tool call never outlives its output: ``conversation`` (the default)
            expires after the service's conversation TTL (7 days unless configured),
            ``explicit`` keeps the turns until cleared; None lets the service infer a type (and
            so a TTL) per turn.
    """

    kind: ClassVar[str]

    def __init__(
        self,
        session_id: str,
        client: Client | None = None,
        *,
        async_client: AsyncClient | None = None,
        agent: str | None = None,
        memory_type: str | None = "conversation",
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self._clients = Clients(client, async_client)
        self._log = SessionLog(
            session_id=session_id, kind=self.kind, agent=agent, memory_type=memory_type
        )
