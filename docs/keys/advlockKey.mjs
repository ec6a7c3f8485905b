// advlock key contract v1 in plain JavaScript (Node >= 12, browsers): no npm dependency.
// advlockKey(ns, id) === SELECT advlock_key(ns, id): SipHash-2-4 with an all-zero key over
// UTF-8(ns) || 0x00 || UTF-8(id), read as a signed 64-bit integer. Returns a BigInt, because a
// key does not fit in a Number: hand it to the driver as a string or BigInt, never a Number
// (node-postgres: client.query('SELECT pg_try_advisory_lock($1)', [key.toString()])).
const M = (1n << 64n) - 1n;
const rotl = (x, b) => ((x << b) | (x >> (64n - b))) & M;

function sipHash24(bytes) { // k0 = k1 = 0
  let v0 = 0x736f6d6570736575n, v1 = 0x646f72616e646f6dn, v2 = 0x6c7967656e657261n, v3 = 0x7465646279746573n;
  const round = () => {
    v0 = (v0 + v1) & M; v1 = rotl(v1, 13n) ^ v0; v0 = rotl(v0, 32n);
    v2 = (v2 + v3) & M; v3 = rotl(v3, 16n) ^ v2;
    v0 = (v0 + v3) & M; v3 = rotl(v3, 21n) ^ v0;
    v2 = (v2 + v1) & M; v1 = rotl(v1, 17n) ^ v2; v2 = rotl(v2, 32n);
  };
  const end = bytes.length - (bytes.length % 8);
  const buf = new Uint8Array(end + 8); // the tail block, zero-padded, with the length in its last byte
  buf.set(bytes); buf[end + 7] = bytes.length & 0xff;
  const dv = new DataView(buf.buffer);
  for (let i = 0; i <= end; i += 8) {
    const m = dv.getBigUint64(i, true);
    v3 ^= m; round(); round(); v0 ^= m;
  }
  v2 ^= 0xffn; round(); round(); round(); round();
  return v0 ^ v1 ^ v2 ^ v3;
}

// id: a string, or an integer (Number or BigInt in the bigint range), hashed as its decimal text.
export function advlockKey(ns, id = '') {
  if (typeof ns !== 'string' || ns === '') throw new TypeError('advlockKey: ns must be a non-empty string');
  if (typeof id === 'number' && !Number.isSafeInteger(id)) throw new RangeError('advlockKey: id must be an integer');
  if (typeof id === 'bigint' && BigInt.asIntN(64, id) !== id) throw new RangeError('advlockKey: id out of bigint range');
  if (typeof id === 'number' || typeof id === 'bigint') id = id.toString();
  if (typeof id !== 'string') throw new TypeError('advlockKey: id must be a string or an integer');
  const enc = new TextEncoder(), a = enc.encode(ns), b = enc.encode(id);
  const bytes = new Uint8Array(a.length + 1 + b.length); // ns, 0x00, id
  bytes.set(a); bytes.set(b, a.length + 1);
  return BigInt.asIntN(64, sipHash24(bytes));
}
