/** JSON helpers: one canonical spelling of a value, and values made into JSON the gateway accepts. */

export type JsonObject = Record<string, unknown>;

export function isPlainObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `value` as JSON the gateway accepts: what is not JSON (a BigInt, a Date, a class) becomes its string. */
export function jsonable(value: unknown): unknown {
  if (value === undefined) return null;
  const text = JSON.stringify(value, (_key, item: unknown) => {
    if (typeof item === "bigint" || typeof item === "symbol" || typeof item === "function") return String(item);
    return item;
  });
  return text === undefined ? null : JSON.parse(text);
}

/** The one JSON spelling of a value (sorted keys, no spaces): for keys, fingerprints and comparisons. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(jsonable(value)));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (isPlainObject(value)) {
    const sorted: JsonObject = {};
    for (const key of Object.keys(value).sort()) sorted[key] = sortKeys(value[key]);
    return sorted;
  }
  return value;
}

/** A result as the model reads it: a string as is, anything else as JSON. */
export function resultText(result: unknown): string {
  return typeof result === "string" ? result : JSON.stringify(jsonable(result));
}

/** The object without its `undefined` (and, as the Python client, `null`) fields. */
export function dropEmpty<T extends JsonObject>(fields: T): Partial<T> {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined && v !== null)) as Partial<T>;
}

/** A random hex id (no dashes), `length` characters long (at most 32). */
export function randomHex(length = 32): string {
  return globalThis.crypto.randomUUID().replaceAll("-", "").slice(0, length);
}

/** SHA-256 of `text`, hex (Web Crypto: Node 20+, and every other modern runtime). */
export async function sha256Hex(text: string): Promise<string> {
  const digest = await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (byte) => byte.toString(16).padStart(2, "0")).join("");
}
