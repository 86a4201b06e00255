/**
 * The TypeScript client against the running service (tests/clients/test_typescript.py starts it
 * and sets AGENT_MEMORY_URL and AGENT_MEMORY_API_KEY, a fresh tenant's admin key). Retries are
 * shown through a local stand-in that refuses the first requests, in front of the real service.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { before, describe, it } from "node:test";

import {
  ApiError,
  AuthenticationError,
  BadRequestError,
  createMemoryClient,
  type ErrorCode,
  NotFoundError,
  type Operation,
  paginate,
  RateLimitedError,
  type Schemas,
  serializeQuery,
  TransportError,
  UnprocessableError,
  unwrap,
} from "../src/index.js";
import { startProxy } from "./proxy.js";

const FAST = { backoffMs: 1, maxBackoffMs: 5000 };
const memory = createMemoryClient({ retry: FAST });

async function store(content: string, tags: string[]): Promise<Schemas["Memory"]> {
  return unwrap(memory.POST("/api/v1/memories/", { body: { agent: "Writer", content, tags } }));
}

async function tagged(tag: string): Promise<Schemas["Memory"][]> {
  const page = await unwrap(memory.GET("/api/v1/memories/", { params: { query: { tag } } }));
  return page.results;
}

before(async () => {
  await unwrap(memory.POST("/api/v1/agents/", { body: { name: "Writer" } }));
});

describe("the typed paths", () => {
  it("stores, reads, changes and deletes a memory", async () => {
    const tag = randomUUID();
    const stored = await store("The deploy window is Tuesdays.", [tag]);
    assert.equal(stored.agent, "Writer");
    const receipt = memory.lastReceipt ?? "";
    const report = await unwrap(
      memory.POST("/api/v1/events/verify-receipt/", { body: { receipt } }),
    );
    assert.equal(report.ok, true, JSON.stringify(report));

    const path = { params: { path: { id: stored.id } } };
    const changed = await unwrap(
      memory.PATCH("/api/v1/memories/{id}/", {
        ...path,
        body: { content: "Deploys are on Wednesdays." },
      }),
    );
    const read = await unwrap(memory.GET("/api/v1/memories/{id}/", path));
    assert.equal(changed.content, "Deploys are on Wednesdays.");
    assert.equal(read.content, "Deploys are on Wednesdays.");
    assert.deepEqual(
      (await tagged(tag)).map((m) => m.id),
      [stored.id],
    );

    await memory.DELETE("/api/v1/memories/{id}/", path);
    await assert.rejects(memory.GET("/api/v1/memories/{id}/", path), NotFoundError);
    assert.deepEqual(await tagged(tag), []);
  });

  it("searches what it stored", async () => {
    const tag = randomUUID();
    const stored = await store("The staging database is restored from backup every Monday.", [tag]);
    const found = await unwrap(
      memory.POST("/api/v1/memories/search/", {
        body: { agent: "Writer", query: "when is staging restored?", top_k: 3 },
      }),
    );
    assert.equal(found.results[0]?.id, stored.id);
  });

  it("lists by a filter of the language, sent as one JSON parameter", async () => {
    const tag = randomUUID();
    const urgent = await unwrap(
      memory.POST("/api/v1/memories/", {
        body: {
          agent: "Writer",
          content: "Renew the TLS certificate.",
          tags: [tag],
          importance: 0.9,
        },
      }),
    );
    await unwrap(
      memory.POST("/api/v1/memories/", {
        body: {
          agent: "Writer",
          content: "The lobby plant was watered.",
          tags: [tag],
          importance: 0.1,
        },
      }),
    );
    const filter = { tags: [tag], importance: { gte: 0.5 } };
    assert.equal(
      serializeQuery({ filter, page_size: 5 }),
      `filter=${encodeURIComponent(JSON.stringify(filter))}&page_size=5`,
    );
    const page = await unwrap(memory.GET("/api/v1/memories/", { params: { query: { filter } } }));
    assert.deepEqual(
      page.results.map((m) => m.id),
      [urgent.id],
    );
  });

  it("follows the cursors of a list", async () => {
    const tag = randomUUID();
    const ids = [];
    for (let n = 0; n < 5; n++) ids.push((await store(`Note ${n} of five.`, [tag])).id);
    const pages: (string | undefined)[] = [];
    const all = paginate((cursor) => {
      pages.push(cursor);
      return unwrap(
        memory.GET("/api/v1/memories/", { params: { query: { tag, cursor, page_size: 2 } } }),
      );
    });
    const seen = [];
    for await (const item of all) seen.push(item.id);
    assert.deepEqual(seen, ids.reverse()); // newest first
    assert.equal(pages.length, 3);
  });
});

describe("typed errors", () => {
  it("throws the status's class with the service's code and details", async () => {
    const blank = memory.POST("/api/v1/memories/", { body: { agent: "Writer", content: "   " } });
    await assert.rejects(blank, (error: unknown) => {
      assert.ok(error instanceof BadRequestError);
      assert.ok(error instanceof ApiError);
      assert.equal(error.status, 400);
      assert.equal(error.code, "empty_content");
      return true;
    });
    const batch = memory.POST("/api/v1/memories/batch/", {
      body: { agent: "Writer", memories: [{ content: "Fine." }, { content: " " }] },
    });
    await assert.rejects(batch, (error: unknown) => {
      assert.ok(error instanceof BadRequestError);
      assert.equal(error.code, "empty_content");
      assert.deepEqual(error.details, { index: 1 }); // the second memory is the blank one
      return true;
    });
  });

  it("names operations and error codes as the schema does", async () => {
    type SearchBody = NonNullable<
      Operation<"memories_search">["requestBody"]
    >["content"]["application/json"];
    // filters and weights are typed objects: a misspelt field would not compile.
    const body: SearchBody = {
      agent: "Writer",
      query: "deploy window",
      sources: ["agent_memory"],
      filters: { tags: ["no-such-tag"] },
      weights: { similarity: 1 },
    };
    const found = await unwrap(memory.POST("/api/v1/memories/search/", { body }));
    assert.deepEqual(found.results, []);
    const missing = memory.GET("/api/v1/memories/{id}/", { params: { path: { id: 0 } } });
    await assert.rejects(missing, (error: unknown) => {
      assert.ok(error instanceof NotFoundError);
      const expected: ErrorCode = "not_found";
      assert.equal(error.code, expected);
      return true;
    });
  });

  it("says a wrong key is a wrong key", async () => {
    const stranger = createMemoryClient({ apiKey: "amk_not-a-key", retry: FAST });
    await assert.rejects(stranger.GET("/api/v1/memories/"), (error: unknown) => {
      assert.ok(error instanceof AuthenticationError);
      assert.equal(error.code, "invalid_api_key");
      return true;
    });
  });

  it("throws TransportError when nothing answers", async () => {
    const proxy = await startProxy("http://127.0.0.1:9", []);
    await proxy.close(); // its port is now free, and nothing listens there
    const nowhere = createMemoryClient({ baseUrl: proxy.url, retry: { ...FAST, retries: 1 } });
    await assert.rejects(nowhere.GET("/api/v1/memories/"), (error: unknown) => {
      assert.ok(error instanceof TransportError);
      assert.match(error.message, /ECONNREFUSED/);
      return true;
    });
  });
});

describe("idempotency and retries", () => {
  it("replays a POST sent twice with one Idempotency-Key, and refuses the key for another body", async () => {
    const tag = randomUUID();
    const key = randomUUID();
    const body = { agent: "Writer", content: "Sent twice, stored once.", tags: [tag] };
    const headers = { "Idempotency-Key": key };
    const first = await unwrap(memory.POST("/api/v1/memories/", { body, headers }));
    const again = await unwrap(memory.POST("/api/v1/memories/", { body, headers }));
    assert.equal(again.id, first.id);
    assert.equal((await tagged(tag)).length, 1);

    const other = memory.POST("/api/v1/memories/", {
      body: { ...body, content: "Other." },
      headers,
    });
    await assert.rejects(other, (error: unknown) => {
      assert.ok(error instanceof UnprocessableError);
      assert.equal(error.code, "idempotency_key_reused");
      return true;
    });
  });

  it("waits the 503's Retry-After, resends with the same key, and the work is done once", async () => {
    const proxy = await startProxy(process.env.AGENT_MEMORY_URL ?? "", [
      { status: 503, retryAfter: "1" },
    ]);
    try {
      const through = createMemoryClient({ baseUrl: proxy.url, retry: FAST });
      const tag = randomUUID();
      await unwrap(
        through.POST("/api/v1/memories/", {
          body: { agent: "Writer", content: "Kept once.", tags: [tag] },
        }),
      );
      const [refused, resent] = proxy.seen;
      assert.equal(proxy.seen.length, 2);
      assert.ok(refused?.idempotencyKey);
      assert.equal(resent?.idempotencyKey, refused.idempotencyKey);
      // The backoff alone would be about a millisecond: the wait is the server's Retry-After.
      assert.ok(resent.at - refused.at >= 950, `resent after ${resent.at - refused.at} ms`);
      assert.equal((await tagged(tag)).length, 1);
    } finally {
      await proxy.close();
    }
  });

  it("gives up with RateLimitedError once its retries are used, carrying Retry-After", async () => {
    const refusals = Array.from({ length: 3 }, () => ({ status: 429, retryAfter: "0" }));
    const proxy = await startProxy(process.env.AGENT_MEMORY_URL ?? "", refusals);
    try {
      const through = createMemoryClient({ baseUrl: proxy.url, retry: { ...FAST, retries: 2 } });
      await assert.rejects(through.GET("/api/v1/memories/"), (error: unknown) => {
        assert.ok(error instanceof RateLimitedError);
        assert.equal(error.status, 429);
        assert.equal(error.retryAfter, 0);
        return true;
      });
      assert.equal(proxy.seen.length, 3);
    } finally {
      await proxy.close();
    }
  });
});
