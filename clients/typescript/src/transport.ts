/**
 * One call to the agent API over `fetch`, sent again through an outage as the Python client does
 * (docs/agent-client.md, "How pre_tool_use waits"): a connection that never reached the gateway, and
 * any failure of a call that is safe to repeat (`resend`), are retried with exponential backoff and
 * jitter for up to `reconnectFor` seconds from the first failure, and never past the caller's deadline.
 * A 5xx that persists, or a failure that may not be repeated, becomes `GatewayUnavailable`; a 4xx is
 * thrown at once as its `GatewayAPIError`.
 *
 * The package has no runtime dependency (the brief of its folder: `fetch` only), so the backoff is
 * these few lines rather than a retry library.
 */

import { apiError, GatewayUnavailable, ServerError } from "./errors.js";

export interface Call {
  method: "GET" | "POST";
  path: string;
  json?: unknown;
  params?: Record<string, string | number>;
  /** Seconds the gateway may hold this request before answering (added to the read timeout). */
  hold?: number;
  /** Safe to send again after a lost response (idempotent). */
  resend?: boolean;
}

export interface TransportOptions {
  baseUrl: string;
  headers: Record<string, string>;
  /** Seconds for one request the gateway does not hold. */
  timeout: number;
  /** Seconds an outage is retried. */
  reconnectFor: number;
  fetch: typeof fetch;
}

/** A request that failed below HTTP: no answer came. `connect` when it never reached the gateway. */
class TransportError extends Error {
  constructor(
    message: string,
    readonly connect: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "TransportError";
  }
}

// Errors of a connection that was never made: the request cannot have reached the gateway.
const CONNECT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
]);

export class Transport {
  constructor(private readonly options: TransportOptions) {}

  /** The parsed JSON answer of `call`, retried through an outage (see the module comment). */
  async send(call: Call, deadline: number | null, signal?: AbortSignal): Promise<any> {
    let firstFailure: number | null = null;
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await this.once(call, signal);
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        if (!(error instanceof TransportError || error instanceof ServerError)) throw error; // a 4xx
        const now = Date.now();
        firstFailure ??= now;
        let giveUpAt = firstFailure + this.options.reconnectFor * 1000;
        if (deadline !== null) giveUpAt = Math.min(giveUpAt, deadline);
        const sleep = backoff(attempt);
        if (!isTransient(error, call) || now + sleep >= giveUpAt) throw unavailable(error, call);
        await delay(sleep, signal);
      }
    }
  }

  private async once(call: Call, signal?: AbortSignal): Promise<any> {
    const url = new URL(this.options.baseUrl + call.path); // a gateway under a path prefix keeps it
    for (const [name, value] of Object.entries(call.params ?? {})) url.searchParams.set(name, String(value));
    const headers: Record<string, string> = { ...this.options.headers, ...traceHeaders() };
    if (call.json !== undefined) headers["Content-Type"] = "application/json";
    const limit = (this.options.timeout + (call.hold ?? 0)) * 1000;
    const timer = new AbortController();
    const timeout = setTimeout(() => timer.abort(new Error(`no answer within ${limit / 1000} s`)), limit);
    const unlink = follow(signal, timer);
    let response: Response;
    let text: string;
    try {
      response = await this.options.fetch(url, {
        method: call.method,
        headers,
        body: call.json === undefined ? undefined : JSON.stringify(call.json),
        signal: timer.signal,
      });
      text = await response.text();
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      throw transportError(error, timer.signal);
    } finally {
      clearTimeout(timeout);
      unlink();
    }
    let body: unknown = undefined;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = undefined;
    }
    if (response.status >= 300) throw apiError(response.status, response.statusText, body);
    if (body === undefined) {
      throw new ServerError(response.status, "malformed", "the gateway answered with something other than JSON");
    }
    return body;
  }
}

/** Worth sending again: the gateway was not reached, or the call is safe to repeat. */
function isTransient(error: TransportError | ServerError, call: Call): boolean {
  if (error instanceof TransportError) return error.connect || Boolean(call.resend);
  return Boolean(call.resend) || [502, 503, 504].includes(error.statusCode);
}

/** Milliseconds before the next attempt: 0.1 s doubling, at most 2 s, plus up to 0.1 s of jitter. */
function backoff(attempt: number): number {
  return Math.min(100 * 2 ** attempt + Math.random() * 100, 2000);
}

function unavailable(error: TransportError | ServerError, call: Call): GatewayUnavailable {
  if (error instanceof ServerError) {
    return new GatewayUnavailable(`${call.method} ${call.path} kept failing: ${error.message}`, { cause: error });
  }
  return new GatewayUnavailable(`${call.method} ${call.path}: ${error.message}`, { cause: error });
}

function transportError(error: unknown, timer: AbortSignal): TransportError {
  if (timer.aborted) {
    const reason = timer.reason instanceof Error ? timer.reason.message : String(timer.reason);
    return new TransportError(`ReadTimeout: ${reason}`, false, { cause: error });
  }
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
  const code = cause?.code ?? "";
  const message = cause?.message ?? (error instanceof Error ? error.message : String(error));
  return new TransportError(code ? `${code}: ${message}` : message, CONNECT_CODES.has(code), { cause: error });
}

/** Abort `controller` when `signal` aborts; returns the function that stops following it. */
export function follow(signal: AbortSignal | undefined, controller: AbortController): () => void {
  if (!signal) return () => {};
  if (signal.aborted) {
    controller.abort(signal.reason);
    return () => {};
  }
  const onAbort = () => controller.abort(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  return () => signal.removeEventListener("abort", onAbort);
}

/** Resolves after `ms` milliseconds; rejects with the signal's reason if it aborts first. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The W3C trace context a parent process handed down (`TRACEPARENT` / `TRACESTATE`), as the Python client sends it. */
function traceHeaders(): Record<string, string> {
  const env = globalThis.process?.env ?? {};
  if (!env["TRACEPARENT"]) return {};
  const headers: Record<string, string> = { traceparent: env["TRACEPARENT"] };
  if (env["TRACESTATE"]) headers["tracestate"] = env["TRACESTATE"];
  return headers;
}
