// advlock key spec v1 (docs/keys/SPEC.md): SipHash-2-4 with an all-zero 128-bit key over
// UTF-8(ns) || 0x00 || UTF-8(id), read as a signed 64-bit integer. An integer id hashes as its
// decimal text, so key("account", 42) === key("account", "42") === SELECT advlock_key('account', 42).

const M = (1n << 64n) - 1n;
const rotl = (x: bigint, b: bigint): bigint => ((x << b) | (x >> (64n - b))) & M;

function sipHash24(bytes: Uint8Array): bigint {
  let v0 = 0x736f6d6570736575n;
  let v1 = 0x646f72616e646f6dn;
  let v2 = 0x6c7967656e657261n;
  let v3 = 0x7465646279746573n;
  const round = (): void => {
    v0 = (v0 + v1) & M;
    v1 = rotl(v1, 13n) ^ v0;
    v0 = rotl(v0, 32n);
    v2 = (v2 + v3) & M;
    v3 = rotl(v3, 16n) ^ v2;
    v0 = (v0 + v3) & M;
    v3 = rotl(v3, 21n) ^ v0;
    v2 = (v2 + v1) & M;
    v1 = rotl(v1, 17n) ^ v2;
    v2 = rotl(v2, 32n);
  };
  const end = bytes.length - (bytes.length % 8);
  const buf = new Uint8Array(end + 8); // the tail block, zero-padded, with the length in its top byte
  buf.set(bytes);
  buf[end + 7] = bytes.length & 0xff;
  const dv = new DataView(buf.buffer);
  for (let i = 0; i <= end; i += 8) {
    const m = dv.getBigUint64(i, true);
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  v2 ^= 0xffn;
  round();
  round();
  round();
  round();
  return v0 ^ v1 ^ v2 ^ v3;
}

/** An id: a string, or an integer (a safe-integer number or a bigint in PostgreSQL's bigint range). */
export type Id = string | number | bigint;

const INT8_MIN = -(1n << 63n);
const INT8_MAX = (1n << 63n) - 1n;

/** The server's rules for ns (22004 NULL, 22023 empty), checked before any round trip. */
export function checkNs(ns: unknown): string {
  if (typeof ns !== "string") throw new TypeError(`ns must be a string, got ${describe(ns)}`);
  if (ns === "") throw new RangeError("ns must not be empty");
  if (ns.includes("\0")) throw new RangeError("ns must not contain NUL characters (PostgreSQL text cannot hold them)");
  return ns;
}

/** An id as the text the server hashes: a string as is, an integer as decimal. A boolean or a
 * fractional number is refused (true would silently become key(ns, 1)). */
export function idText(id: unknown, name = "id"): string {
  if (typeof id === "string") {
    if (id.includes("\0")) throw new RangeError(`${name} must not contain NUL characters (PostgreSQL text cannot hold them)`);
    return id;
  }
  if (typeof id === "number") {
    if (!Number.isSafeInteger(id)) {
      throw new RangeError(`${name} must be a safe integer (or a bigint or a string), got ${id}`);
    }
    return String(id);
  }
  if (typeof id === "bigint") {
    if (id < INT8_MIN || id > INT8_MAX) throw new RangeError(`${name} ${id} is out of the bigint range`);
    return id.toString();
  }
  if (typeof id === "object" && id !== null && Object.getPrototypeOf(id) === Object.prototype) {
    // An options object where the id goes: the id was left out.
    throw new TypeError(
      `${name} must be a string, an integer number or a bigint, got an object: the id comes before the options ` +
        `(for the empty id pass "", e.g. sessionLock(url, "migrate", "", { timeoutMs: 30000 }))`,
    );
  }
  throw new TypeError(`${name} must be a string, an integer number or a bigint, got ${describe(id)}`);
}

/** How a bad argument is named in an error: "undefined", "null", "string \"x\"", "number 1.5",
 * "an object", "a function", "a Pool". */
export function describe(x: unknown): string {
  if (x === null || x === undefined) return String(x);
  if (typeof x === "function") return "a function";
  if (typeof x === "object") {
    const name = (x as { constructor?: { name?: string } }).constructor?.name;
    return name && name !== "Object" ? `a ${name}` : "an object";
  }
  return typeof x === "string" ? `string ${JSON.stringify(x)}` : `${typeof x} ${String(x)}`;
}

const encoder = new TextEncoder();

function keyOfText(ns: string, id: string): bigint {
  const a = encoder.encode(ns);
  const b = encoder.encode(id);
  const bytes = new Uint8Array(a.length + 1 + b.length); // ns, 0x00, id
  bytes.set(a);
  bytes.set(b, a.length + 1);
  return BigInt.asIntN(64, sipHash24(bytes));
}

/** The advisory lock key of (ns, id), a bigint equal to `SELECT advlock_key(ns, id)`. */
export function key(ns: string, id: Id = ""): bigint {
  return keyOfText(checkNs(ns), idText(id));
}

/** key() of already checked arguments. */
export function keyOf(ns: string, idTextValue: string): bigint {
  return keyOfText(ns, idTextValue);
}
