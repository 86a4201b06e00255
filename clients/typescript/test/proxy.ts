/** A local stand-in in front of the real service: it answers what its plan says for the first
 * requests (an error status with a Retry-After), then forwards, and records what it saw. */

import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface Seen {
  method: string;
  path: string;
  idempotencyKey: string | undefined;
  at: number;
}

export interface Refusal {
  status: number;
  retryAfter: string;
}

export interface Proxy {
  url: string;
  seen: Seen[];
  close(): Promise<void>;
}

async function bodyOf(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export async function startProxy(upstream: string, plan: Refusal[]): Promise<Proxy> {
  const seen: Seen[] = [];
  const server: Server = createServer(async (request, response) => {
    const body = await bodyOf(request);
    const key = request.headers["idempotency-key"];
    seen.push({
      method: request.method ?? "",
      path: request.url ?? "",
      idempotencyKey: Array.isArray(key) ? key[0] : key,
      at: performance.now(),
    });
    const refusal = plan.shift();
    if (refusal !== undefined) {
      const payload = JSON.stringify({
        error: { code: `stand_in_${refusal.status}`, message: "not now", details: {} },
      });
      response.writeHead(refusal.status, {
        "Content-Type": "application/json",
        "Retry-After": refusal.retryAfter,
      });
      response.end(payload);
      return;
    }
    const headers = new Headers();
    for (const [name, value] of Object.entries(request.headers)) {
      if (name !== "host" && name !== "connection" && typeof value === "string") {
        headers.set(name, value);
      }
    }
    const answer = await fetch(upstream + (request.url ?? "/"), {
      method: request.method,
      headers,
      body: body.length ? new Uint8Array(body) : undefined,
    });
    response.writeHead(answer.status, {
      "Content-Type": answer.headers.get("Content-Type") ?? "application/json",
    });
    response.end(Buffer.from(await answer.arrayBuffer()));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
