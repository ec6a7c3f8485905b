#!/usr/bin/env bash
# Verifies every client-side advlock key snippet in docs/keys/ against all vectors in
# pg_test/vectors/advlock_key_v1.json, with whichever toolchains are installed. No server needed.
# Prints "<lang>: N passed, M failed" per language (N counts the vectors plus one empty-ns check),
# "<lang>: SKIPPED (...)" for a missing toolchain, and a total line. Exit 1 if anything failed.
#   Node:   node >= 12 only (no npm install).
#   Go:     apt-get install golang-go golang-siphash-dev   (github.com/dchest/siphash, GOPATH mode)
#   Java:   a JDK (javac); Guava (apt-get install libguava-java, or GUAVA_JAR=/path/guava.jar)
#           for AdvlockKey.java, AdvlockKeyNoDeps.java needs nothing.
#   Rust:   cargo; siphasher + serde_json from the local cargo cache, else from crates.io.
#   Python: python3.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
keys="$(dirname "$here")"
vectors="${1:-$(cd "$keys/../.." && pwd)/pg_test/vectors/advlock_key_v1.json}"
work="$(mktemp -d /tmp/advlock-keys-verify.XXXXXX)"
trap 'rm -rf "$work"' EXIT
total_pass=0 total_fail=0 failed_langs=()

# Runs a harness, echoes its output, adds up its "<lang>: N passed, M failed" lines.
tally() {
  local lang="$1"; shift
  local out rc
  out="$("$@" 2>&1)"; rc=$?
  printf '%s\n' "$out"
  local p f
  p=$(printf '%s\n' "$out" | sed -n 's/^.*: \([0-9]\+\) passed, \([0-9]\+\) failed$/\1/p' | awk '{s+=$1} END {print s+0}')
  f=$(printf '%s\n' "$out" | sed -n 's/^.*: \([0-9]\+\) passed, \([0-9]\+\) failed$/\2/p' | awk '{s+=$1} END {print s+0}')
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "$lang: harness exited $rc"; fi
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  [ "$f" -eq 0 ] || failed_langs+=("$lang")
}
skip() { echo "$1: SKIPPED ($2)"; }

echo "vectors: $vectors"

if command -v node >/dev/null; then
  tally node node "$here/verify_node.mjs" "$vectors"
else skip node "node not installed"; fi

gopath_lib=/usr/share/gocode/src/github.com/dchest/siphash
if ! command -v go >/dev/null; then skip go "go not installed: apt-get install golang-go golang-siphash-dev"
elif [ ! -d "$gopath_lib" ]; then skip go "github.com/dchest/siphash not in /usr/share/gocode: apt-get install golang-siphash-dev"
else
  mkdir -p "$work/go/src/example.com/advlock" "$work/go/src/verify"
  cp "$keys/advlock_key.go" "$work/go/src/example.com/advlock/"
  cp "$here/verify.go" "$work/go/src/verify/"
  tally go env -C "$work/go/src/verify" GO111MODULE=off GOFLAGS= GOPATH="$work/go:/usr/share/gocode" \
    GOCACHE="$work/go/cache" go run . "$vectors"
fi

if command -v javac >/dev/null && command -v java >/dev/null; then
  guava="${GUAVA_JAR:-/usr/share/java/guava.jar}"
  srcs=("$keys/AdvlockKeyNoDeps.java" "$here/Verify.java") impls=(AdvlockKeyNoDeps)
  if [ -f "$guava" ]; then srcs+=("$keys/AdvlockKey.java"); impls=(AdvlockKey "${impls[@]}")
  else skip "java (AdvlockKey)" "no Guava jar at $guava: apt-get install libguava-java or set GUAVA_JAR"; fi
  if javac -encoding UTF-8 -d "$work/java" -cp "$guava" "${srcs[@]}"; then
    tally java java -cp "$work/java:$guava" Verify "$vectors" "${impls[@]}"
  else echo "java: 0 passed, 1 failed (compilation)"; total_fail=$((total_fail + 1)); failed_langs+=(java); fi
else skip java "javac/java not installed"; fi

if command -v cargo >/dev/null; then
  mkdir -p "$work/rust/src"
  cp "$here/verify.rs" "$work/rust/src/main.rs"; cp "$keys/advlock_key.rs" "$work/rust/src/"
  cat > "$work/rust/Cargo.toml" <<'TOML'
[package]
name = "advlock-keys-verify"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
siphasher = "1"
serde_json = "1"
TOML
  if (cd "$work/rust" && { cargo build -q --offline 2>/dev/null || cargo build -q; }); then
    tally rust "$work/rust/target/debug/advlock-keys-verify" "$vectors"
  else echo "rust: 0 passed, 1 failed (build)"; total_fail=$((total_fail + 1)); failed_langs+=(rust); fi
else skip rust "cargo not installed"; fi

if command -v python3 >/dev/null; then
  tally python python3 "$here/verify_py.py" "$vectors"
else skip python "python3 not installed"; fi

[ ${#failed_langs[@]} -eq 0 ] || echo "failing: ${failed_langs[*]}"
echo "keys: $total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ] && [ "$total_pass" -gt 0 ]
