#!/usr/bin/env bash
# The README's tarball path, its verification as written: the `gpgv` and `sha256sum` lines of
# the sh block under "### From the tarball (once published)", run in a directory holding what a
# DBA downloads (the pg17 tarball, SHA256SUMS, SHA256SUMS.asc, advlock-archive-keyring.gpg) from
# the release directory DIST; and the same lines refusing a keyring that did not sign it, and a
# tarball changed after signing. Also the key check of the apt path (`gpg --show-keys` on the
# keyring prints the signing key's fingerprint). Prints "readme-verify: ok|FAIL ..." lines and
# exits non-zero on a failure; pg_test/release/run.sh counts them.
# Usage: pg_test/release/readme_verify.sh DIST WRONG_KEYRING SIGNING_FINGERPRINT
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
dist=$1 wrong=$2 fpr=$3
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
check_name=readme-verify
. "$repo/pg_test/check.sh"
work=$(mktemp -d /tmp/advlock-readme-verify.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The block, as written; its verification lines are those starting with gpgv and sha256sum.
block=$(python3 - "$repo/README.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
section = text.split("### From the tarball (once published)\n", 1)[1].split("\n### ", 1)[0]
print(re.search(r"^```sh\n(.*?)^```", section, re.S | re.M).group(1), end="")
PY
)
verify=$(grep -E '^(gpgv|sha256sum) ' <<<"$block")
tarball="advlock-$version-pg17-linux-x86_64.tar.gz"
check "the README's tarball block verifies (gpgv, sha256sum) and names $tarball" bash -c \
  "[ \"\$(grep -c . <<<'$verify')\" = 2 ] && grep -qF 'tar xzf $tarball' <<<'$block'"
download() { # DIR: what a DBA downloads for PostgreSQL 17
  mkdir -p "$1" && cp "$dist/$tarball" "$dist/SHA256SUMS" "$dist/SHA256SUMS.asc" "$dist/advlock-archive-keyring.gpg" "$1/"
}
# The two lines as a script that stops at the first failure, as a DBA would.
{ echo "set -e"; echo "$verify"; } >"$work/verify.sh"
download "$work/good"
check "as written, in the download directory: gpgv and sha256sum -c pass, the tarball OK" bash -c \
  "cd '$work/good' && bash '$work/verify.sh' 2>&1 | tee '$work/good.out' >/dev/null && [ \${PIPESTATUS[0]} = 0 ] && grep -qx '$tarball: OK' '$work/good.out'"
download "$work/wrong-key"; cp "$wrong" "$work/wrong-key/advlock-archive-keyring.gpg"
check "as written, with a keyring that did not sign the release: gpgv refuses" bash -c \
  "cd '$work/wrong-key' && ! bash '$work/verify.sh' >/dev/null 2>&1"
download "$work/changed"; printf 'x' >>"$work/changed/$tarball"
check "as written, with the tarball changed after signing: sha256sum -c refuses" bash -c \
  "cd '$work/changed' && ! bash '$work/verify.sh' >/dev/null 2>&1"
check "the apt path's key check: gpg --show-keys prints the signing key's fingerprint" bash -c \
  "cd '$work/good' && gpg --show-keys advlock-archive-keyring.gpg 2>/dev/null | tr -d ' ' | grep -qix '$fpr'"
echo "readme-verify: $passed checks passed, $failed failed"
[ "$failed" -eq 0 ]
