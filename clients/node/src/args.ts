// Arguments checked before any round trip: a bad one is a TypeError/RangeError naming it.
import { describe } from "./key.js";

export const INT4_MAX = 2 ** 31 - 1;

/** Milliseconds (an integer >= 0 that fits the server's int4), checked before any round trip. */
export function ms(value: unknown, name: string): number {
  if (typeof value !== "number") throw new TypeError(`${name} must be a number of milliseconds, got ${describe(value)}`);
  if (!Number.isFinite(value) || value < 0) {
    throw new RangeError(`${name} must be a finite number of milliseconds >= 0, got ${value}`);
  }
  let rounded = Math.round(value);
  if (value > 0) rounded = Math.max(rounded, 1); // a positive wait must not silently become a pure try
  if (rounded > INT4_MAX) throw new RangeError(`${name} must be at most ${INT4_MAX} ms, got ${value}`);
  return rounded;
}

export function modeOf(shared: unknown): "shared" | "exclusive" {
  if (shared === undefined) return "exclusive";
  if (typeof shared !== "boolean") throw new TypeError(`shared must be a boolean, got ${describe(shared)}`);
  return shared ? "shared" : "exclusive";
}

export function checkSchema(schema: unknown): string | undefined {
  if (schema === undefined) return undefined;
  if (typeof schema !== "string") throw new TypeError(`schema must be a string (a schema name), got ${describe(schema)}`);
  if (schema === "" || schema.includes("\0")) throw new RangeError(`schema must be a schema name, got ${JSON.stringify(schema)}`);
  return schema;
}

export function checkSignal(signal: unknown): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (!(signal instanceof AbortSignal)) throw new TypeError(`signal must be an AbortSignal, got ${describe(signal)}`);
  return signal;
}

export function checkOptions(options: unknown, allowed: readonly string[], what: string): Record<string, unknown> {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`options must be an object ({ ${allowed.join(", ")} }), got ${describe(options)}`);
  }
  for (const k of Object.keys(options)) {
    if (!allowed.includes(k)) throw new TypeError(`options.${k} is not an option of ${what} (options: ${allowed.join(", ")})`);
  }
  return options as Record<string, unknown>;
}

export function checkFn(fn: unknown, what: string): void {
  if (typeof fn !== "function") throw new TypeError(`fn must be a function (the code to run under ${what}), got ${describe(fn)}`);
}

/** A PostgreSQL text[] literal of the strings (sent as text and cast: the same for both drivers). */
export function textArray(items: readonly string[]): string {
  return "{" + items.map((s) => '"' + s.replaceAll("\\", "\\\\").replaceAll('"', '\\"') + '"').join(",") + "}";
}

export function toBigInt(v: unknown): bigint {
  if (typeof v === "bigint") return v;
  if (typeof v === "number" || typeof v === "string") return BigInt(v);
  throw new TypeError(`expected an integer from the server, got ${describe(v)}`);
}

export function toBool(v: unknown): boolean {
  return v === true || v === "t" || v === "true";
}
