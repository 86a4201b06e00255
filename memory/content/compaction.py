"""Compaction of stored content into a short rendering for the conversation (SPEC 7).

A plugin says whether it can compact a piece of content and, if so, returns a small JSON object
that stands for it (the API's ``summary``). It may also ``render`` that object as the text the
conversation gets: a short description for the header line (``web page, 34,728 chars``) and a
terse body. A plugin without ``render`` is shown as its object on one JSON line. Plugins are
tried in order and the first that accepts wins: a deployment's own
(``CONTENT_COMPACTION_PLUGINS``, or ``compaction_plugin_register``), then the built-in ones from
the most specific shape (a web page) to the least (plain text, which accepts anything).

The built-ins are deterministic: the same content always compacts to the same rendering, so a
replayed run shows the conversation the agent saw. The optional LLM compactor
(``CONTENT_COMPACTOR_LLM_URL``) is tried before them and falls back to them when it fails.
"""

from __future__ import annotations

import html
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from config.http import ExternalServiceError, post_json
from config.patterns import linear_compile

logger = logging.getLogger(__name__)

EXCERPT_CHARS = 500
FIRST_ROWS = 3
MAX_SEARCH_RESULTS = 20
TITLE_CHARS = 120
CELL_CHARS = 100
HEAD_TAIL_LINES = 5
HEAD_TAIL_CHARS = 400
SHAPE_MAX_KEYS = 20
SHAPE_MAX_DEPTH = 3
LLM_SOURCE_CHARS = 5000
LLM_MAX_SUMMARY_CHARS = 1500


@dataclass(frozen=True)
class Content:
    """What a plugin sees: the item's type, its text as stored and (for JSON) its value."""

    item_type: str
    format: str
    text: str
    value: Any
    source: str = ""

    @property
    def is_json(self) -> bool:
        return self.format == "json"


@dataclass(frozen=True)
class Rendering:
    """What the conversation shows of a compaction: ``description`` goes into the header line
    (what the content is and how big), ``body`` under it."""

    description: str
    body: str


@dataclass(frozen=True)
class Compaction:
    compactor: str
    summary: dict[str, Any]
    rendering: Rendering


class CompactionPlugin(Protocol):
    name: str

    def accepts(self, content: Content) -> bool: ...

    def compact(self, content: Content) -> dict[str, Any]: ...

    # Optional: ``render(summary) -> Rendering``, the plugin's own conversation text (see
    # ``plugin_render``).


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _chars(count: int) -> str:
    return f"{count:,} chars"


# --- Built-in plugins -----------------------------------------------------------------------------

# RE2 (config.patterns.linear_compile): these run over pages a client stored, and Python's re
# took 20 s over 20,000 "<style " (each start read to the end of the page) and 3.5 s over
# repeated "<title>".
_HTML_START = linear_compile(r"(?i)^\s*(<!doctype html|<html|<head|<body)")
_TITLE = linear_compile(r"(?is)<title[^>]*>(.*?)</title>")
_CANONICAL = linear_compile(r"""(?i)<link[^>]+rel=["']canonical["'][^>]*href=["']([^"']+)["']""")
_OG_URL = linear_compile(r"""(?i)<meta[^>]+property=["']og:url["'][^>]*content=["']([^"']+)["']""")
# Each element closes with its own name (RE2 has no backreference for "</\1>").
_INVISIBLE = linear_compile(
    r"(?is)<script\b.*?</script\s*>|<style\b.*?</style\s*>|<head\b.*?</head\s*>"
)
_TAG = linear_compile(r"<[^>]+>")
# Inline elements sit inside a word or a sentence ("email.<b>mime</b>"): removed without a space,
# where a block's boundary becomes one.
_INLINE_TAG = linear_compile(
    r"(?i)</?(a|abbr|b|big|cite|code|em|font|i|kbd|mark|q|s|samp|small|span|strong|sub|sup|tt|u|var)"
    r"\b[^>]*>"
)
_PAGE_TEXT_KEYS = ("html", "content", "text", "body")


def html_to_text(markup: str) -> str:
    """Visible text of an HTML page, whitespace collapsed (good enough for an excerpt)."""
    without = _INLINE_TAG.sub("", _INVISIBLE.sub(" ", markup))
    return " ".join(html.unescape(_TAG.sub(" ", without)).split())


def _looks_like_html(text: str) -> bool:
    return bool(_HTML_START.match(text[:1024])) or "<title" in text[:4096].lower()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


class WebPagePlugin:
    """A fetched page: HTML text, or an object with a url and the page's html/content/text."""

    name = "web_page"

    def accepts(self, content: Content) -> bool:
        if content.is_json:
            value = content.value
            return (
                isinstance(value, dict)
                and isinstance(value.get("url"), str)
                and any(isinstance(value.get(key), str) for key in _PAGE_TEXT_KEYS)
            )
        return _looks_like_html(content.text)

    def compact(self, content: Content) -> dict[str, Any]:
        url = content.source if content.source.startswith(("http://", "https://")) else ""
        title = ""
        if content.is_json:
            value = content.value
            url = str(value["url"])
            page = next(str(value[k]) for k in _PAGE_TEXT_KEYS if isinstance(value.get(k), str))
            meta = value.get("metadata")
            if isinstance(value.get("title"), str):
                title = value["title"]
            elif isinstance(meta, dict) and isinstance(meta.get("title"), str):
                title = meta["title"]
        else:
            page = content.text
        if _looks_like_html(page):
            if not title and (found := _TITLE.search(page)):
                title = " ".join(html.unescape(found.group(1)).split())
            if not url and (found := _CANONICAL.search(page) or _OG_URL.search(page)):
                url = found.group(1)
            text = html_to_text(page)
        else:
            text = " ".join(page.split())
        return {
            "url": url,
            "title": title,
            "excerpt": _clip(text, EXCERPT_CHARS),
            "length": len(page),
            "text_length": len(text),
        }

    def render(self, summary: dict[str, Any]) -> Rendering:
        # The title and url on one line, the excerpt (whitespace already collapsed) under it;
        # text_length stays in the API summary only.
        first = " · ".join(part for part in (summary["title"], summary["url"]) if part)
        body = f"{first}\n{summary['excerpt']}" if first else summary["excerpt"]
        return Rendering(f"web page, {_chars(summary['length'])}", body)


def _search_hits(value: Any) -> list[dict[str, Any]] | None:
    if isinstance(value, dict):
        for key in ("results", "items", "organic_results", "hits"):
            if isinstance(value.get(key), list):
                return _search_hits(value[key])
        return None
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(hit, dict)
            and isinstance(hit.get("title"), str)
            and isinstance(hit.get("url", hit.get("link")), str)
            for hit in value
        )
    ):
        return value
    return None


class SearchResultsPlugin:
    """Search engine results: a list of {title, url|link, ...} (or an object holding one)."""

    name = "search_results"

    def accepts(self, content: Content) -> bool:
        return content.is_json and _search_hits(content.value) is not None

    def compact(self, content: Content) -> dict[str, Any]:
        hits = _search_hits(content.value) or []
        return {
            "count": len(hits),
            "results": [
                {"title": _clip(hit["title"], TITLE_CHARS), "url": hit.get("url", hit.get("link"))}
                for hit in hits[:MAX_SEARCH_RESULTS]
            ],
        }

    def render(self, summary: dict[str, Any]) -> Rendering:
        # One line a hit: its title, then its url. When every url starts with the same site and
        # folder, that base is said once above them and each line keeps the rest.
        results = summary["results"]
        count = summary["count"]
        shown = f", first {len(results)}" if len(results) < count else ""
        urls = [str(hit["url"]) for hit in results]
        base = url_base(urls)
        lines = [f"urls relative to {base}"] if base else []
        lines += [
            f"{_one_line(hit['title'])} · {url[len(base) :]}"
            for hit, url in zip(results, urls, strict=True)
        ]
        return Rendering(f"search results, {count}{shown}", "\n".join(lines))


_SITE = re.compile(r"^https?://[^/?#]+/")


def url_base(urls: list[str]) -> str:
    """The folder (``https://host/.../``) that two or more urls all start with and each goes on
    past, or "" when they do not share one."""
    if len(urls) < 2:
        return ""
    prefix = urls[0]
    for url in urls[1:]:
        while not url.startswith(prefix):
            prefix = prefix[:-1]
    # A base ends at a folder: never inside a query or a fragment.
    path = re.split(r"[?#]", prefix, maxsplit=1)[0]
    base = path[: path.rfind("/") + 1]
    if not _SITE.match(base):
        return ""
    return base if all(len(url) > len(base) for url in urls) else ""


def _table(value: Any) -> tuple[list[str], list[Any]] | None:
    """(columns, rows) of a query result: {columns, rows} or a list of flat objects."""
    if isinstance(value, dict) and isinstance(value.get("rows"), list):
        columns = value.get("columns")
        if isinstance(columns, list):
            return [str(c.get("name", c)) if isinstance(c, dict) else str(c) for c in columns], (
                value["rows"]
            )
        rows = value["rows"]
        if rows and all(isinstance(row, dict) for row in rows):
            return list(rows[0]), rows
        return None
    if isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
        flat = all(not isinstance(cell, dict | list) for row in value[:50] for cell in row.values())
        if flat:
            names: list[str] = []
            for row in value[:50]:
                names.extend(key for key in row if key not in names)
            return names, value
    return None


def _cell_text(cell: Any) -> str:
    """A cell on a row line: text as it is (one line, ``|`` escaped), anything else as JSON."""
    if isinstance(cell, str):
        return _one_line(cell).replace("|", "\\|")
    return json.dumps(cell, ensure_ascii=False, separators=(",", ":"))


def _row_text(row: Any, columns: list[str]) -> str:
    cells = [row.get(name) for name in columns] if isinstance(row, dict) else row
    if not isinstance(cells, list):
        return _cell_text(cells)
    return " | ".join(_cell_text(cell) for cell in cells)


def _clip_cells(row: Any) -> Any:
    """A row with long text cells clipped: a sample row shows the kind of values, not a blob."""
    if isinstance(row, dict):
        return {k: _clip(v, CELL_CHARS) if isinstance(v, str) else v for k, v in row.items()}
    if isinstance(row, list):
        return [_clip(v, CELL_CHARS) if isinstance(v, str) else v for v in row]
    return row


class TablePlugin:
    """A table or query result: {columns, rows} or a list of flat objects."""

    name = "table"

    def accepts(self, content: Content) -> bool:
        return content.is_json and _table(content.value) is not None

    def compact(self, content: Content) -> dict[str, Any]:
        found = _table(content.value)
        assert found is not None  # accepts() said so
        columns, rows = found
        return {
            "columns": columns,
            "row_count": len(rows),
            "first_rows": [_clip_cells(row) for row in rows[:FIRST_ROWS]],
        }

    def render(self, summary: dict[str, Any]) -> Rendering:
        # Pipe-separated like a Markdown table without its rules: the column names, then the
        # first rows in the same order.
        columns = summary["columns"]
        rows = summary["first_rows"]
        lines = [" | ".join(_cell_text(name) for name in columns)]
        lines += [_row_text(row, columns) for row in rows]
        return Rendering(f"table, {summary['row_count']:,} rows", "\n".join(lines))


def json_shape(value: Any, depth: int = 0) -> Any:
    """The structure of a JSON value: keys and types, lists as their length and first element."""
    if isinstance(value, dict):
        if depth >= SHAPE_MAX_DEPTH:
            return f"object({len(value)} keys)"
        keys = list(value)[:SHAPE_MAX_KEYS]
        shape = {key: json_shape(value[key], depth + 1) for key in keys}
        if len(value) > len(keys):
            shape["…"] = f"{len(value) - len(keys)} more keys"
        return shape
    if isinstance(value, list):
        if not value:
            return "array(0)"
        if depth >= SHAPE_MAX_DEPTH:
            return f"array({len(value)})"
        return {f"array({len(value)}) of": json_shape(value[0], depth + 1)}
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return "string"


_ARRAY_OF = re.compile(r"^array\((\d+)\) of$")


def shape_text(shape: Any) -> str:
    """A ``json_shape`` written tersely: ``{a: {b: [2 x number]}, c: string}``."""
    if isinstance(shape, dict):
        if len(shape) == 1 and (found := _ARRAY_OF.match(next(iter(shape)))):
            return f"[{found.group(1)} x {shape_text(next(iter(shape.values())))}]"
        parts = [
            str(value) if key == "…" else f"{key}: {shape_text(value)}"
            for key, value in shape.items()
        ]
        return "{" + ", ".join(parts) + "}"
    return str(shape)


class JsonPlugin:
    name = "json"

    def accepts(self, content: Content) -> bool:
        return content.is_json

    def compact(self, content: Content) -> dict[str, Any]:
        return {"shape": json_shape(content.value), "size": len(content.text.encode("utf-8"))}

    def render(self, summary: dict[str, Any]) -> Rendering:
        return Rendering(f"JSON, {summary['size']:,} bytes", shape_text(summary["shape"]))


class TextPlugin:
    """Anything: the first and last lines, and how long it is."""

    name = "text"

    def accepts(self, content: Content) -> bool:
        return True

    def compact(self, content: Content) -> dict[str, Any]:
        lines = content.text.splitlines()
        head = "\n".join(lines[:HEAD_TAIL_LINES])
        rest = lines[HEAD_TAIL_LINES:]
        tail = "\n".join(rest[-HEAD_TAIL_LINES:])
        return {
            "head": _clip(head, HEAD_TAIL_CHARS),
            # The tail's end is what matters (a log's last lines), so it is clipped at its start.
            "tail": tail if len(tail) <= HEAD_TAIL_CHARS else "…" + tail[-HEAD_TAIL_CHARS:],
            "lines": len(lines),
            "length": len(content.text),
        }

    def render(self, summary: dict[str, Any]) -> Rendering:
        lines = summary["lines"]
        shown = min(HEAD_TAIL_LINES, lines) + min(HEAD_TAIL_LINES, max(0, lines - HEAD_TAIL_LINES))
        parts = [summary["head"]]
        if lines > shown:
            parts.append(f"[… {lines - shown:,} lines …]")
        if summary["tail"]:
            parts.append(summary["tail"])
        description = f"text, {lines:,} lines, {_chars(summary['length'])}"
        return Rendering(description, "\n".join(parts))


BUILT_IN_PLUGINS: tuple[CompactionPlugin, ...] = (
    WebPagePlugin(),
    SearchResultsPlugin(),
    TablePlugin(),
    JsonPlugin(),
    TextPlugin(),
)

_registered: list[CompactionPlugin] = []


def compaction_plugin_register(plugin: CompactionPlugin) -> None:
    """Add a plugin ahead of the built-in ones (later registrations are tried first)."""
    _registered.insert(0, plugin)


def compaction_plugin_unregister(plugin: CompactionPlugin) -> None:
    if plugin in _registered:
        _registered.remove(plugin)


def compaction_plugins() -> list[CompactionPlugin]:
    """Configured plugins first, then registered ones, then the built-ins."""
    configured: list[CompactionPlugin] = []
    for path in settings.CONTENT_COMPACTION_PLUGINS:
        loaded = import_string(path)
        # A class is instantiated; an instance (a module-level object) is used as it is.
        configured.append(loaded() if isinstance(loaded, type) else loaded)
    return [*configured, *_registered, *BUILT_IN_PLUGINS]


def plugin_render(plugin: CompactionPlugin, summary: dict[str, Any], content: Content) -> Rendering:
    """The plugin's own rendering, or (a plugin without ``render``) its summary on one JSON line."""
    render = getattr(plugin, "render", None)
    if callable(render):
        rendering = render(summary)
        assert isinstance(rendering, Rendering)
        return rendering
    size = len(content.text.encode("utf-8"))
    return Rendering(f"{plugin.name}, {size:,} bytes", summary_json(summary))


def compact_with_plugins(content: Content) -> Compaction:
    for plugin in compaction_plugins():
        if plugin.accepts(content):
            summary = plugin.compact(content)
            return Compaction(
                compactor=plugin.name,
                summary=summary,
                rendering=plugin_render(plugin, summary, content),
            )
    raise AssertionError("the text plugin accepts everything")  # pragma: no cover


def compact_with_llm(content: Content, *, goal: str = "") -> Compaction:
    """Ask the configured chat endpoint for a short factual summary; raises on any failure."""
    answer = post_json(
        settings.CONTENT_COMPACTOR_LLM_URL.rstrip("/") + "/chat/completions",
        {
            "model": settings.CONTENT_COMPACTOR_LLM_MODEL,
            "temperature": 0,
            "messages": [
                {
                    "role": "system",
                    "content": "You compact a tool result for an agent's conversation. Answer "
                    "with a 2-3 sentence summary and the 3-5 facts most relevant to the goal.",
                },
                {
                    "role": "user",
                    "content": f"Goal: {goal or 'not stated'}\nType: {content.item_type}\n"
                    f"Source: {content.source}\nResult:\n{content.text[:LLM_SOURCE_CHARS]}",
                },
            ],
        },
        api_key=settings.CONTENT_COMPACTOR_LLM_API_KEY,
        timeout=settings.CONTENT_COMPACTOR_LLM_TIMEOUT_SECONDS,
    )
    try:
        text = str(answer["choices"][0]["message"]["content"]).strip()
    except (KeyError, IndexError, TypeError) as exc:
        raise ExternalServiceError(f"unexpected chat completion shape: {exc}") from exc
    if not text:
        raise ExternalServiceError("the chat completion was empty")
    summary = text[:LLM_MAX_SUMMARY_CHARS]
    size = len(content.text.encode("utf-8"))
    return Compaction(
        compactor="llm",
        summary={"summary": summary},
        rendering=Rendering(f"summary, {size:,} bytes", summary),
    )


def content_compact(content: Content, *, goal: str = "", use_llm: bool = True) -> Compaction:
    """The compaction the conversation gets: the LLM's when configured and working, else the
    first plugin's that accepts the content."""
    if use_llm and settings.CONTENT_COMPACTOR_LLM_URL:
        try:
            return compact_with_llm(content, goal=goal)
        except ExternalServiceError as exc:
            logger.warning("content compactor LLM failed, using the plugins: %s", exc)
    return compact_with_plugins(content)


def summary_json(summary: dict[str, Any]) -> str:
    # One line: indentation costs tokens in every later turn of the conversation.
    return json.dumps(summary, ensure_ascii=False)
