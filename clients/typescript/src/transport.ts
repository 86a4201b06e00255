/**
 * The request path under openapi-fetch: the `fetch` it calls. It gives every POST an
 * Idempotency-Key (the caller's, or a new one) before the first attempt and resends the same
 * bytes with the same key on a retry, so the service does the work once however often the
 * request is sent. It waits between attempts with exponential backoff and full jitter, or the
 * answer's Retry-After when that is longer, and turns a final error answer into a typed error.
 * The Python client's _core.py does the same, so both clients behave alike.
 */

import { errorFor, TransportError } from "./errors.js";

export interface RetryPolicy {
  /** Resends after the first attempt (0: never retry). */
  retries: number;
  /** Attempt n waits up to backoffMs * 2**n, capped at maxBackoffMs. */
  backoffMs: number;
  maxBackoffMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { retries: 3, backoffMs: 500, maxBackoffMs: 8000 };

// "Nothing was done, try again later": 503 is the service's own answer while PostgreSQL or
// Redis is down; 502 and 504 come from a proxy in front of it; 429 is the rate limit.
const RETRY_STATUSES = new Set([429, 502, 503, 504]);
export const IDEMPOTENCY_HEADER = "Idempotency-Key";
export const RECEIPT_HEADER = "Ledger-Receipt";
// Errors from Node's fetch that mean the request never reached the server.
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT"]);

/** Seconds from a Retry-After header; null for none or an HTTP date. */
export function retryAfterSeconds(header: string | null): number | null {
  if (header === null || header.trim() === "") return null;
  const seconds = Number(header);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : null;
}

/** How long to wait before attempt `attempt + 1`, in milliseconds. */
export function retryDelay(
  policy: RetryPolicy,
  attempt: number,
  retryAfter: number | null,
): number {
  const ceiling = Math.min(policy.maxBackoffMs, policy.backoffMs * 2 ** attempt);
  let wait = ceiling / 2 + Math.random() * (ceiling / 2);
  if (retryAfter !== null) {
    wait = Math.max(wait, Math.min(retryAfter * 1000, policy.maxBackoffMs));
  }
  return wait;
}

function causeCode(error: unknown): string | undefined {
  const cause = (error as { cause?: { code?: unknown } }).cause;
  return typeof cause?.code === "string" ? cause.code : undefined;
}

// A POST carries an Idempotency-Key and a GET reads, so resending either after any failure is
// safe; PATCH, PUT and DELETE are resent only when the request certainly never left.
function mayRetryTransportError(method: string, error: unknown): boolean {
  if (method === "GET" || method === "HEAD" || method === "POST") return true;
  const code = causeCode(error);
  return code !== undefined && NOT_SENT.has(code);
}

async function decode(response: Response): Promise<unknown> {
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface TransportOptions {
  retry: RetryPolicy;
  fetch: typeof globalThis.fetch;
  /** Called with each answer's Ledger-Receipt ("<tenant>:<seq>:<hash>"). */
  onReceipt: (receipt: string) => void;
}

export function resilientFetch(options: TransportOptions): (request: Request) => Promise<Response> {
  return async (request: Request) => {
    const headers = new Headers(request.headers);
    if (request.method === "POST" && !headers.has(IDEMPOTENCY_HEADER)) {
      headers.set(IDEMPOTENCY_HEADER, crypto.randomUUID());
    }
    // Read once, so every attempt sends the same bytes: the service fingerprints the body with
    // the Idempotency-Key and refuses a key reused for other bytes.
    const body = request.body === null ? undefined : await request.arrayBuffer();
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await options.fetch(
          new Request(request.url, {
            method: request.method,
            headers,
            body,
            signal: request.signal,
          }),
        );
      } catch (error) {
        if (attempt >= options.retry.retries || !mayRetryTransportError(request.method, error)) {
          const reason =
            causeCode(error) ?? (error instanceof Error ? error.message : String(error));
          throw new TransportError(`${request.method} ${request.url}: ${reason}`, { cause: error });
        }
        await sleep(retryDelay(options.retry, attempt, null));
        continue;
      }
      const receipt = response.headers.get(RECEIPT_HEADER);
      if (receipt !== null) options.onReceipt(receipt);
      if (response.ok) return response;
      const retryAfter = retryAfterSeconds(response.headers.get("Retry-After"));
      if (RETRY_STATUSES.has(response.status) && attempt < options.retry.retries) {
        await response.body?.cancel();
        await sleep(retryDelay(options.retry, attempt, retryAfter));
        continue;
      }
      throw errorFor(response.status, await decode(response), retryAfter);
    }
  };
}
