#!/usr/bin/env bash
# The .deb of an earlier release, for the apt upgrade test: the source of COMMIT (git archive,
# nothing of this checkout is touched) built by that commit's own scripts/package.sh for MAJOR.
# Cached under $ADVLOCK_CACHE (default /var/cache/advlock) by commit, so later runs reuse it.
# Prints the path of the .deb.
# Usage: pg_test/release/old_deb.sh COMMIT MAJOR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
commit=$(git -C "$repo" rev-parse --verify "$1^{commit}") major=$2
cache=${ADVLOCK_CACHE:-/var/cache/advlock}/debs/$commit
version=$(git -C "$repo" show "$commit:Cargo.toml" | sed -n 's/^version = "\(.*\)"/\1/p' | head -1)
deb=$cache/postgresql-$major-advlock_${version}-1_amd64.deb
if [ ! -f "$deb" ]; then
  echo "old_deb: building advlock $version (${commit:0:7}) for PostgreSQL $major with its own scripts/package.sh" >&2
  src=$(mktemp -d /var/tmp/advlock-old-src.XXXXXX)
  git -C "$repo" archive "$commit" | tar -x -C "$src"
  # Its own target directory (inside the temporary tree, removed with it: only the .deb is kept).
  export CARGO_TARGET_DIR=$src/target
  # The source archive has no git history: the changelog's date is the commit's.
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct "$commit") "$src/scripts/package.sh" "$major" >"$src/package.log" 2>&1 ||
    { tail -30 "$src/package.log" >&2; rm -rf "$src"; exit 1; }
  mkdir -p "$cache"
  install -m 644 "$src/target/packages/$(basename "$deb")" "$deb.tmp" && mv "$deb.tmp" "$deb"
  rm -rf "$src"
fi
echo "$deb"
