/**
 * The errors this package throws, as the Python client's (docs/agent-client.md, "Errors"):
 *
 * ```
 * GatewayClientError
 * ├── GatewayUnavailable           the gateway could not be reached (or kept answering 5xx)
 * ├── GatewayAPIError              a non-2xx answer: statusCode, code, message, details
 * │   ├── InvalidRequest      400
 * │   ├── Unauthorized        401
 * │   ├── Forbidden           403
 * │   ├── NotFound            404  (also another agent's request)
 * │   ├── Conflict            409
 * │   │   └── AlreadyDecided       code "already_decided"
 * │   ├── IdempotencyKeyReused 422
 * │   └── ServerError         5xx  (retried; thrown as GatewayUnavailable if it persists)
 * └── NoAnswer                     a question ended without an answer to return
 * ```
 */

/** Base class of every error this package throws. */
export class GatewayClientError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The gateway could not be reached (or kept failing with 5xx) for `reconnectFor` seconds. */
export class GatewayUnavailable extends GatewayClientError {}

/** The gateway answered with an error: `{"error": {"code", "message", "details"}}`. */
export class GatewayAPIError extends GatewayClientError {
  readonly statusCode: number;
  readonly code: string;
  /** The gateway's own message (the error's `message` is `HTTP <status> <code>: <message>`). */
  readonly apiMessage: string;
  readonly details: unknown;

  constructor(statusCode: number, code: string, message: string, details: unknown = null) {
    super(`HTTP ${statusCode} ${code}: ${message}`);
    this.statusCode = statusCode;
    this.code = code;
    this.apiMessage = message;
    this.details = details;
  }
}

/** 400: the request failed validation; `details` names each field. */
export class InvalidRequest extends GatewayAPIError {}
/** 401: missing, unknown or revoked API key. */
export class Unauthorized extends GatewayAPIError {}
/** 403. */
export class Forbidden extends GatewayAPIError {}
/** 404: no such confirmation request or question (or it belongs to another agent). */
export class NotFound extends GatewayAPIError {}
/** 409. */
export class Conflict extends GatewayAPIError {}
/** 409 `already_decided`: e.g. cancelling a request that was already decided. */
export class AlreadyDecided extends Conflict {}
/** 422: this idempotency key was used before with a different request body. */
export class IdempotencyKeyReused extends GatewayAPIError {}
/** 5xx. Retried like a network error; thrown as `GatewayUnavailable` when it persists. */
export class ServerError extends GatewayAPIError {}

const ERRORS_BY_STATUS: Record<number, new (...args: ConstructorParameters<typeof GatewayAPIError>) => GatewayAPIError> = {
  400: InvalidRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  422: IdempotencyKeyReused,
};

/** The error for a non-2xx answer, read from the contract's error shape when the body has it. */
export function apiError(status: number, statusText: string, body: unknown): GatewayAPIError {
  let code = "http_error";
  let message = statusText || "error";
  let details: unknown = null;
  const error = isObject(body) ? body["error"] : undefined;
  if (isObject(error)) {
    code = String(error["code"] || code);
    message = String(error["message"] || message);
    details = error["details"] ?? null;
  }
  if (status >= 500) return new ServerError(status, code, message, details);
  if (status === 409 && code === "already_decided") return new AlreadyDecided(status, code, message, details);
  const cls = ERRORS_BY_STATUS[status] ?? GatewayAPIError;
  return new cls(status, code, message, details);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
