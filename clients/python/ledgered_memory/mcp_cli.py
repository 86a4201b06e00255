"""The MCP server's command line, shared by ``ledgered-memory-mcp`` (the console script that
``uvx`` and ``pipx`` run) and the service's ``manage.py mcp``.

Before it speaks MCP it asks the service who the key belongs to. When that fails (the service is
down, the key is missing, wrong or tenant-wide, the ``mcp`` extra is not installed) it says why
in one line on stderr and exits with status 1: an MCP client shows a server's stderr to the
person setting it up, while stdout is the protocol's own channel and must carry nothing else.
This module imports no MCP code, so the missing extra is reported like any other failure.
"""

from __future__ import annotations

import argparse
import sys

from ledgered_memory._sync import Client
from ledgered_memory.errors import ApiError, AuthenticationError, BadRequestError, TransportError

PROG = "ledgered-memory-mcp"


class StartupError(Exception):
    """Why the server cannot start, in one line a person can act on."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument(
        "--url", default=None, help="The service's base URL (default: $AGENT_MEMORY_URL)"
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="An agent-scoped API key (default: $AGENT_MEMORY_API_KEY; prefer the variable, "
        "a flag shows in the process list)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="http only: address to listen on")
    parser.add_argument("--port", type=int, default=8765, help="http only: port to listen on")


def whoami(client: Client) -> str:
    """The name of the key's agent. A tenant-wide key is refused: these tools act as one agent,
    and only an agent-scoped key lets the service enforce that."""
    try:
        # Recall without "agent" is answered for an agent-scoped key's own agent and refused
        # for a tenant-wide key; it reads only (an unknown run recalls nothing).
        answer = client.recall(run_id="mcp-whoami", mode="episodic", max_recent=1)
    except BadRequestError as exc:
        if "agent" in exc.details:
            raise StartupError(
                "the MCP server needs an agent-scoped API key (created with an agent); "
                "this key is tenant-wide"
            ) from exc
        raise
    return answer["agent"]


def agent_of(url: str | None, api_key: str | None) -> str:
    """The agent the key acts for, or a StartupError saying why the service cannot tell."""
    try:
        probe = Client(base_url=url, api_key=api_key)
    except ValueError as exc:
        raise StartupError(
            "no API key: set AGENT_MEMORY_API_KEY to an agent-scoped key of the service"
        ) from exc
    where = f"the memory service at {probe.base_url}"
    try:
        with probe:
            return whoami(probe)
    except TransportError as exc:
        reason = exc.__cause__ or exc
        raise StartupError(
            f"cannot reach {where} ({reason}); is it running, and is AGENT_MEMORY_URL right?"
        ) from exc
    except AuthenticationError as exc:
        raise StartupError(
            f"{where} refused the API key ({exc.code}: {exc.message}); set "
            "AGENT_MEMORY_API_KEY to a current agent-scoped key"
        ) from exc
    except ApiError as exc:
        raise StartupError(f"{where} answered {exc.status} {exc.code}: {exc.message}") from exc


def run(
    *,
    transport: str = "stdio",
    url: str | None = None,
    api_key: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
) -> None:
    try:
        from ledgered_memory.mcp_server import build_server
    except ImportError as exc:
        raise StartupError(
            f"the MCP server needs the mcp extra ({exc}): pip install 'ledgered-memory[mcp]', "
            "or run it with uvx --from 'ledgered-memory[mcp]' ledgered-memory-mcp"
        ) from exc
    from ledgered_memory._async import AsyncClient

    # Both clients fall back to $AGENT_MEMORY_URL and $AGENT_MEMORY_API_KEY. The agent is asked
    # once, blocking, before the server's event loop starts: an async client's pooled
    # connections belong to the loop that opened them.
    agent = agent_of(url, api_key)
    client = AsyncClient(base_url=url, api_key=api_key)
    print(f"{PROG}: serving agent {agent!r} of {client.base_url} ({transport})", file=sys.stderr)
    server = build_server(client, agent=agent, host=host, port=port)
    server.run("stdio" if transport == "stdio" else "streamable-http")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Serve one agent's Agent Memory tools over MCP (stdio, or streamable HTTP).",
    )
    add_arguments(parser)
    try:
        run(**vars(parser.parse_args(argv)))
    except StartupError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
