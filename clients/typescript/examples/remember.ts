/**
 * Store what an agent learnt, find it again, and correct it: run with a running service and an
 * agent-scoped key (docs/client.md, "The TypeScript client"):
 *
 *     AGENT_MEMORY_URL=http://127.0.0.1:8000 AGENT_MEMORY_API_KEY=amk_... npm run example
 */

import { createMemoryClient, NotFoundError, unwrap } from "../src/index.js";

const memory = createMemoryClient(); // $AGENT_MEMORY_URL and $AGENT_MEMORY_API_KEY

const stored = await unwrap(
  memory.POST("/api/v1/memories/", {
    body: {
      content: "The customer wants the report in French.",
      tags: ["customer"],
      importance: 0.8,
    },
  }),
);
console.log(`stored memory ${stored.id} for ${stored.agent}`);

const found = await unwrap(
  memory.POST("/api/v1/memories/search/", {
    body: { query: "which language for the report?", top_k: 3 },
  }),
);
for (const hit of found.results) {
  console.log(`${hit.score.toFixed(3)} ${hit.source} ${hit.content}`);
}

const path = { params: { path: { id: stored.id } } };
await memory.PATCH("/api/v1/memories/{id}/", {
  ...path,
  body: { content: "The customer wants the report in German." },
});
await memory.DELETE("/api/v1/memories/{id}/", path);
try {
  await memory.GET("/api/v1/memories/{id}/", path);
} catch (error) {
  if (!(error instanceof NotFoundError)) throw error;
  console.log(`memory ${stored.id} is gone: ${error.code}`);
}
console.log(`ledger receipt ${memory.lastReceipt}`);
