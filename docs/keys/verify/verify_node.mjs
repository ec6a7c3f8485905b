// Checks docs/keys/advlockKey.mjs against every vector in pg_test/vectors/advlock_key_v1.json.
// Usage: node verify_node.mjs [path/to/advlock_key_v1.json]
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { advlockKey } from '../advlockKey.mjs';

const path = process.argv[2] ?? fileURLToPath(new URL('../../../pg_test/vectors/advlock_key_v1.json', import.meta.url));
// Keys exceed 2^53: quote the integer fields before JSON.parse so no precision is lost.
const text = readFileSync(path, 'utf8').replace(/("(?:key|id_int)"\s*:\s*)(-?\d+)/g, '$1"$2"');
const { vectors } = JSON.parse(text);

let passed = 0, failed = 0;
const check = (ok, what) => { if (ok) passed++; else { failed++; console.log(`FAIL ${what}`); } };
for (const v of vectors) {
  const want = BigInt(v.key);
  const id = 'id_int' in v ? BigInt(v.id_int) : v.id;
  const got = advlockKey(v.ns, id);
  let ok = got === want;
  if ('id_int' in v && Number.isSafeInteger(Number(id))) ok &&= advlockKey(v.ns, Number(id)) === want;
  if (id === '') ok &&= advlockKey(v.ns) === want; // advlock_key(ns) = advlock_key(ns, '')
  check(ok, `${JSON.stringify(v.ns)}, ${JSON.stringify(String(id))}: got ${got}, want ${want}`);
}
let threw = false;
try { advlockKey('', 'x'); } catch { threw = true; }
check(threw, 'empty ns must be rejected');
console.log(`node: ${vectors.length} vectors + 1 empty-ns check`);
console.log(`node: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
