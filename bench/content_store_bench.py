"""Content store benchmark (issue 6): conversation tokens of a research agent's run with and
without the content store, and store/retrieve latency of a 1 MiB item.

    python bench/content_store_bench.py
    python bench/content_store_bench.py --iterations 25 --pages-per-iteration 3 --latency-runs 30

The run is replayed through the HTTP API (in process): each iteration the agent says one line,
then gets a search result, web pages of 20-80 KB and a database result. The pages are pydoc's
HTML documentation of installed modules (real prose and code, available offline); the search
hits and query rows are built from the same modules' docstrings and signatures.

Target: >= 95 % fewer conversation tokens by iteration 20, every full result retrievable
byte-for-byte (SHA-256 of what was sent equals that of what comes back).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import pkgutil
import pydoc
import time
import uuid
import warnings
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import Any

from _setup import describe, django_setup

PAGE_MIN, PAGE_MAX = 20_000, 80_000
PACKAGES = (
    "email",
    "http",
    "json",
    "logging",
    "urllib",
    "xml",
    "asyncio",
    "django",
    "rest_framework",
    "celery",
)


@dataclass(frozen=True)
class Result:
    action_type: str
    item_type: str
    source: str
    content: Any

    def sent_bytes(self) -> bytes:
        if isinstance(self.content, str):
            return self.content.encode("utf-8")
        return json.dumps(
            self.content, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode("utf-8")


def _walk(package: ModuleType) -> list[str]:
    """Names of a package's submodules, without importing them (walk_packages imports, and a
    module that fails with anything but ImportError would stop it)."""
    names: list[str] = []
    for info in pkgutil.iter_modules(getattr(package, "__path__", []), package.__name__ + "."):
        if any(part.startswith("_") or part in ("tests", "gis") for part in info.name.split(".")):
            continue
        names.append(info.name)
        if info.ispkg:
            try:
                names.extend(_walk(import_module(info.name)))
            except Exception:  # noqa: S112 (a package that cannot load is skipped)
                continue
    return names


def _modules() -> list[ModuleType]:
    """Importable modules of a few packages, in a fixed order, quietly."""
    found: list[ModuleType] = []
    for package_name in PACKAGES:
        try:
            package = import_module(package_name)
        except ImportError:
            continue
        found.append(package)
        for name in sorted(_walk(package)):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    found.append(import_module(name))
            except Exception:  # noqa: S112 (any module that cannot load is skipped)
                continue
    return found


def _page(module: ModuleType) -> str | None:
    """pydoc's HTML page of a module, cut to at most PAGE_MAX characters at a line end."""
    try:
        body = pydoc.html.document(module, module.__name__)
    except Exception:
        return None
    page = pydoc.html.page(f"Python: module {module.__name__}", body)
    if len(page) < PAGE_MIN:
        return None
    if len(page) > PAGE_MAX:
        page = page[: page.rfind("\n", 0, PAGE_MAX - 20)] + "\n</body></html>"
    return page


def _summary_line(obj: object) -> str:
    return (inspect.getdoc(obj) or "").strip().split("\n", 1)[0][:200]


def _search(query: str, modules: list[ModuleType]) -> Result:
    hits = [
        {
            "title": f"{module.__name__} — {_summary_line(module) or 'Python module'}",
            "url": f"https://docs.example.org/{module.__name__}.html",
            "snippet": (inspect.getdoc(module) or "")[:300],
        }
        for module in modules
    ]
    return Result(
        "web.search", "action_result", f"search:{query}", {"query": query, "results": hits}
    )


def _rows(module: ModuleType) -> Result:
    rows = []
    for name, member in sorted(vars(module).items()):
        if name.startswith("_") or not (inspect.isfunction(member) or inspect.isclass(member)):
            continue
        try:
            signature = str(inspect.signature(member))
        except (TypeError, ValueError):
            signature = "(...)"
        kind = "class" if inspect.isclass(member) else "function"
        rows.append([module.__name__, name, kind, signature, _summary_line(member)])
    return Result(
        "sql.query",
        "database_result",
        "docs_db",
        {"columns": ["module", "name", "kind", "signature", "summary"], "rows": rows},
    )


def build_run(iterations: int, pages_per_iteration: int) -> list[tuple[str, list[Result]]]:
    modules = _modules()
    pages = [(module, page) for module in modules if (page := _page(module)) is not None]
    with_rows = [m for m in modules if len(_rows(m).content["rows"]) >= 10]
    needed = iterations * pages_per_iteration
    if len(pages) < needed:
        raise SystemExit(f"only {len(pages)} pages of 20-80 KB found, need {needed}")
    run = []
    for i in range(iterations):
        chosen = pages[i * pages_per_iteration : (i + 1) * pages_per_iteration]
        topic = chosen[0][0].__name__
        results = [_search(topic, [m for m, _ in chosen] + modules[i * 7 : i * 7 + 7])]
        results += [
            Result("web.fetch", "web_content", f"https://docs.example.org/{m.__name__}.html", p)
            for m, p in chosen
        ]
        results.append(_rows(with_rows[i % len(with_rows)]))
        thought = (
            f"Iteration {i + 1}: I will search for {topic}, read the most relevant pages and "
            "look up its functions in the documentation database."
        )
        run.append((thought, results))
    return run


def _client(agent_name: str) -> tuple[Any, Any]:
    from rest_framework.test import APIClient

    from ledger.models import Role
    from ledger.services import agent_create, api_key_create, tenant_create

    tenant = tenant_create(name="bench content", slug=f"bench-content-{uuid.uuid4().hex[:8]}")
    agent = agent_create(tenant=tenant, name=agent_name, actor="system")
    _, raw_key = api_key_create(
        tenant=tenant, name="bench", role=Role.AGENT, agent=agent, actor="x"
    )
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client, agent


def bench_conversation(iterations: int, pages_per_iteration: int) -> None:
    from memory.content.services import full_rendering
    from memory.context.tokens import token_count
    from memory.models import ContentItem

    started = time.perf_counter()
    run = build_run(iterations, pages_per_iteration)
    sizes = [len(r.sent_bytes()) for _, results in run for r in results]
    pages = [len(r.content) for _, results in run for r in results if r.action_type == "web.fetch"]
    print(
        f"conversation: {iterations} iterations, {sum(map(len, (r for _, r in run)))} action "
        f"results, {sum(sizes) / 1e6:.1f} MB in all; web pages {min(pages) / 1000:.0f}-"
        f"{max(pages) / 1000:.0f} KB (built in {time.perf_counter() - started:.1f} s)"
    )
    client, _ = _client("Researcher1")
    run_id = f"research-{uuid.uuid4().hex[:8]}"
    without = with_store = 0
    sent: dict[str, str] = {}
    print("iteration  without-store  with-store  fewer")
    for number, (thought, results) in enumerate(run, start=1):
        said = token_count(thought)
        without += said
        with_store += said
        for result in results:
            answer = client.post(
                "/api/v1/content/action-results/",
                {
                    "run_id": run_id,
                    "action_type": result.action_type,
                    "type": result.item_type,
                    "source": result.source,
                    "result": result.content,
                },
                format="json",
            )
            assert answer.status_code == 201, answer.content[:300]
            body = answer.json()
            item = ContentItem.objects.get(key=body["item"]["id"])
            # Without the store the conversation holds every result as the full rendering does.
            without += token_count(full_rendering(item))
            with_store += body["tokens"]["returned"]
            sent[body["item"]["id"]] = hashlib.sha256(result.sent_bytes()).hexdigest()
        print(f"{number:9d}  {without:13,d}  {with_store:10,d}  {1 - with_store / without:6.1%}")
        if number == 20:
            at_twenty = 1 - with_store / without
    mismatched = 0
    for key, digest in sent.items():
        full = client.get(f"/api/v1/content/items/{key}/", {"transform": "full"}).json()
        content = full["content"]
        returned = (
            content.encode("utf-8")
            if full["item"]["format"] == "text"
            else json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        )
        mismatched += hashlib.sha256(returned).hexdigest() != digest
    savings = client.get(f"/api/v1/content/runs/{run_id}/").json()
    if iterations >= 20:
        print(f"by iteration 20: {at_twenty:.1%} fewer conversation tokens (target >= 95%)")
    print(
        f"run savings endpoint: {savings['tokens_full']:,} tokens in full, "
        f"{savings['tokens_returned']:,} returned ({savings['saved_ratio']:.1%} saved)"
    )
    print(
        f"byte-for-byte: {len(sent) - mismatched}/{len(sent)} full results retrieved with the "
        "SHA-256 of what was sent"
    )


def bench_latency(runs: int) -> None:
    modules = _modules()
    text = ""
    for module in modules:
        text += inspect.getdoc(module) or ""
        if len(text) >= 1 << 20:
            break
    text = (text * (1 + (1 << 20) // max(1, len(text))))[: 1 << 20]
    client, _ = _client("Latency1")
    stores, retrieves = [], []
    for i in range(runs + 1):
        started = time.perf_counter()
        stored = client.post(
            "/api/v1/content/items/",
            {"content": text, "run_id": "latency", "type": "web_content"},
            format="json",
        )
        elapsed = (time.perf_counter() - started) * 1000
        assert stored.status_code == 201, stored.content[:300]
        started = time.perf_counter()
        read = client.get(f"/api/v1/content/items/{stored.json()['id']}/")
        read_elapsed = (time.perf_counter() - started) * 1000
        assert read.status_code == 200
        if i:  # the first of each is a warm-up
            stores.append(elapsed)
            retrieves.append(read_elapsed)
    print(f"store 1 MiB item (API, in process): {describe(stores)}")
    print(f"retrieve 1 MiB item, full (API, in process): {describe(retrieves)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=25)
    parser.add_argument("--pages-per-iteration", type=int, default=3)
    parser.add_argument("--latency-runs", type=int, default=30)
    args = parser.parse_args()
    django_setup()
    bench_conversation(args.iterations, args.pages_per_iteration)
    bench_latency(args.latency_runs)


if __name__ == "__main__":
    main()
