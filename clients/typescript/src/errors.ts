/**
 * The errors the client throws, one class per HTTP status the service answers with, as in the
 * Python client (ledgered_memory.errors). Every error answer of the service has the shape
 * {"error": {"code", "message", "details"}}; `code` is stable, `message` is for people.
 */

export class AgentMemoryError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The service could not be reached (or stopped answering) after every retry. */
export class TransportError extends AgentMemoryError {}

/** The service answered with an error status. */
export class ApiError extends AgentMemoryError {
  readonly status: number;
  readonly code: string;
  readonly details: Record<string, unknown>;
  /** The answer's Retry-After header, in seconds, where it sent one. */
  readonly retryAfter: number | null;

  constructor(
    status: number,
    code: string,
    message: string,
    details: Record<string, unknown> = {},
    retryAfter: number | null = null,
  ) {
    super(
      `${status} ${code}: ${message}${Object.keys(details).length ? ` ${JSON.stringify(details)}` : ""}`,
    );
    this.status = status;
    this.code = code;
    this.details = details;
    this.retryAfter = retryAfter;
  }
}

/** 400: the request is invalid; `details` names the fields. */
export class BadRequestError extends ApiError {}
/** 401: no API key, or an unknown or revoked one. */
export class AuthenticationError extends ApiError {}
/** 403: the key's role or scope may not do this. */
export class PermissionDeniedError extends ApiError {}
/** 404: no such object in the caller's tenant (another tenant's ids look the same). */
export class NotFoundError extends ApiError {}
/** 409: the request conflicts with the current state. */
export class ConflictError extends ApiError {}
/** 413: the body or one of its parts is larger than the service accepts. */
export class PayloadTooLargeError extends ApiError {}
/** 422: e.g. `idempotency_key_reused` for a key sent with a different request. */
export class UnprocessableError extends ApiError {}
/** 429: too many requests; thrown once the retries are used up. */
export class RateLimitedError extends ApiError {}
/** 503: a dependency (database, Redis) is down; thrown once the retries are used up. */
export class ServiceUnavailableError extends ApiError {}
/** Any other 5xx. */
export class ServerError extends ApiError {}

const BY_STATUS: Record<number, typeof ApiError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: UnprocessableError,
  429: RateLimitedError,
  503: ServiceUnavailableError,
};

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The typed error for an error answer. Tolerant of bodies not in the service's shape (a proxy's
 * HTML page, say), which keep `code` as `http_<status>`.
 */
export function errorFor(
  status: number,
  body: unknown,
  retryAfter: number | null = null,
): ApiError {
  const error = isRecord(body) ? body.error : undefined;
  let code = `http_${status}`;
  let message = typeof body === "string" ? body.slice(0, 500) : "";
  let details: Record<string, unknown> = {};
  if (isRecord(error)) {
    code = typeof error.code === "string" && error.code ? error.code : code;
    message = typeof error.message === "string" ? error.message : "";
    details = isRecord(error.details) ? error.details : {};
  }
  const Class = BY_STATUS[status] ?? (status >= 500 ? ServerError : ApiError);
  return new Class(status, code, message, details, retryAfter);
}
