#!/usr/bin/env bash
# One version: scripts/versions.py and scripts/release.sh on copies of the repository's version
# carriers (Cargo.toml, the SQL edition, clients/python), each copy set to agree and then made
# to disagree in one place:
#   - all agreeing: versions.py passes; release.sh gets past its version check (and stops later,
#     at the missing packages: nothing is built here), also for the tag v<version>; another tag
#     (ADVLOCK_RELEASE_VERSION, as the release workflow passes it) is refused;
#   - the Python package where its version lives (_version.py, single-sourced; else
#     pyproject.toml), a static version back in pyproject.toml, a literal __version__ in
#     __init__.py, a package with no version, the edition's header or advlock_edition_version(),
#     another client: versions.py fails naming the file and both versions, and release.sh refuses
#     with "the versions differ", exit 1, before writing anything.
# Writes "versions P F" to $ADVLOCK_SUMMARY.   Usage: pg_test/release/versions.sh
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
summary=${ADVLOCK_SUMMARY:-/dev/null}
check_name=versions
. "$repo/pg_test/check.sh"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
tmp=$(mktemp -d /tmp/advlock-versions.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# fresh NAME: a copy of the carriers in $tmp/NAME, every version set to Cargo.toml's.
fresh() {
  local d=$tmp/$1
  mkdir -p "$d/edition" "$d/clients/python"
  cp -r "$repo/scripts" "$d/"
  cp "$repo/Cargo.toml" "$d/"
  cp "$repo/edition/advlock_sql.sql" "$d/edition/"
  cp "$repo/clients/python/pyproject.toml" "$d/clients/python/"
  cp -r "$repo/clients/python/src" "$d/clients/python/"
  if compgen -G "$repo/clients/ruby/*.gemspec" >/dev/null; then   # the Ruby gem: gemspec + version.rb
    mkdir -p "$d/clients/ruby/lib"
    cp "$repo"/clients/ruby/*.gemspec "$d/clients/ruby/"
    cp -r "$repo"/clients/ruby/lib/* "$d/clients/ruby/lib/"
    sed -i "s/^\( *VERSION *= *\)[\"'][^\"']*[\"']/\1\"$version\"/" "$d"/clients/ruby/lib/*/version.rb
  fi
  sed -i "0,/^version = /s/^version = .*/version = \"$version\"/" "$d/clients/python/pyproject.toml"
  sed -i "s/^__version__ = .*/__version__ = \"$version\"/" "$d/clients/python/src/advlock/__init__.py"
  [ ! -f "$d/clients/python/src/advlock/_version.py" ] ||
    sed -i "s/^__version__ = .*/__version__ = \"$version\"/" "$d/clients/python/src/advlock/_version.py"
  echo "$d"
}
# detected DIR TEXT: versions.py fails on DIR, printing TEXT; release.sh refuses, writing nothing.
detected() {
  local out rc
  out=$(python3 "$1/scripts/versions.py" "$1" 2>&1); rc=$?
  printf '%s\n' "$out" | sed 's/^/    | /'
  if [ "$rc" != 1 ] || ! grep -qF -- "$2" <<<"$out"; then echo "    versions.py: exit $rc, or no '$2'"; return 1; fi
  out=$(ADVLOCK_SIGNING_KEY=unused "$1/scripts/release.sh" 2>&1); rc=$?
  printf '%s\n' "$out" | tail -2 | sed 's/^/    release.sh | /'
  if [ "$rc" != 1 ] || ! grep -q "release: the versions differ (above): nothing was built" <<<"$out"; then return 1; fi
  [ ! -e "$1/target" ] || { echo "    release.sh wrote $1/target"; return 1; }
}

d=$(fresh agree)
check "all agreeing ($version): versions.py passes" python3 "$d/scripts/versions.py" "$d"
check "all agreeing: release.sh passes its version check (stops later, at the missing packages)" bash -c \
  "out=\$(ADVLOCK_SIGNING_KEY=unused ADVLOCK_RELEASE_PREBUILT=1 ADVLOCK_RELEASE_MAJORS=17 '$d/scripts/release.sh' 2>&1);
   echo \"\$out\" | tail -1; ! grep -q 'versions differ' <<<\"\$out\" && grep -q 'is missing (scripts/package.sh 17)' <<<\"\$out\""

check "the tag v$version (ADVLOCK_RELEASE_VERSION): release.sh goes on" bash -c \
  "out=\$(ADVLOCK_SIGNING_KEY=unused ADVLOCK_RELEASE_VERSION=v$version ADVLOCK_RELEASE_PREBUILT=1 ADVLOCK_RELEASE_MAJORS=17 '$d/scripts/release.sh' 2>&1);
   grep -q 'is missing (scripts/package.sh 17)' <<<\"\$out\""
d=$(fresh tag)
check "the tag v9.9.9 for $version: release.sh refuses, writing nothing" bash -c \
  "out=\$(ADVLOCK_SIGNING_KEY=unused ADVLOCK_RELEASE_VERSION=v9.9.9 '$d/scripts/release.sh' 2>&1); rc=\$?; echo \"\$out\" | tail -1;
   [ \$rc = 1 ] && grep -q 'asked to release v9.9.9, but the version is $version: nothing was built' <<<\"\$out\" && [ ! -e '$d/target' ]"

# The Python package's version where it lives (_version.py, single-sourced; else pyproject.toml).
d=$(fresh python)
if [ -f "$d/clients/python/src/advlock/_version.py" ]; then
  printf '__version__ = "9.9.9"\n' >"$d/clients/python/src/advlock/_version.py"
  check "Python package 9.9.9 (_version.py, the single source): refused" detected "$d" \
    "clients/python/src/advlock/_version.py: 9.9.9, but the extension (Cargo.toml) is $version"
else
  sed -i "0,/^version = /s/^version = .*/version = \"9.9.9\"/" "$d/clients/python/pyproject.toml"
  check "Python package 9.9.9 (pyproject.toml): refused" detected "$d" \
    "clients/python/pyproject.toml: 9.9.9, but the extension (Cargo.toml) is $version"
fi
# A second place creeping back: a static version in pyproject.toml, a literal in __init__.py.
d=$(fresh pyproject-static)
if grep -q '^dynamic = \["version"\]' "$d/clients/python/pyproject.toml"; then
  sed -i 's/^dynamic = \["version"\]/version = "0.0.7"/' "$d/clients/python/pyproject.toml"
  sed -i '/^\[tool.hatch.version\]/,/^path = /d' "$d/clients/python/pyproject.toml"
else
  sed -i "0,/^version = /s/^version = .*/version = \"0.0.7\"/" "$d/clients/python/pyproject.toml"
fi
check "a static version 0.0.7 in pyproject.toml: refused" detected "$d" \
  "clients/python/pyproject.toml: 0.0.7, but the extension (Cargo.toml) is $version"
d=$(fresh init-literal)
printf '__version__ = "0.0.3"\n' >>"$d/clients/python/src/advlock/__init__.py"
check "a literal __version__ 0.0.3 in __init__.py: refused" detected "$d" \
  "clients/python/src/advlock/__init__.py: 0.0.3, but the extension (Cargo.toml) is $version"
# No version anywhere: pyproject dynamic, no _version.py.
d=$(fresh no-version)
rm -f "$d/clients/python/src/advlock/_version.py"
sed -i 's/^from ._version import __version__$//; s/^__version__ = .*//' "$d/clients/python/src/advlock/__init__.py"
sed -i 's/^version = .*/dynamic = ["version"]/' "$d/clients/python/pyproject.toml"
check "a Python package with no version to read: refused" detected "$d" \
  "clients/python/pyproject.toml: no version found"

if [ -d "$tmp/agree/clients/ruby" ]; then
  d=$(fresh ruby)
  sed -i "s/^\( *VERSION *= *\)[\"'][^\"']*[\"']/\1\"0.0.4\"/" "$d"/clients/ruby/lib/*/version.rb
  check "Ruby gem 0.0.4 (lib/*/version.rb, the gemspec's source): refused" detected "$d" \
    "/version.rb: 0.0.4, but the extension (Cargo.toml) is $version"
fi

d=$(fresh edition)
sed -i "1s/^-- advlock [^,]*, SQL edition/-- advlock 0.0.9, SQL edition/" "$d/edition/advlock_sql.sql"
check "SQL edition header 0.0.9: refused" detected "$d" "edition/advlock_sql.sql (its header): 0.0.9"
d=$(fresh edition-fn)
sed -i "/advlock_edition_version()/,/^RETURN '/s/^RETURN '[^']*'/RETURN '0.0.9'/" "$d/edition/advlock_sql.sql"
check "advlock_edition_version() 0.0.9: refused" detected "$d" "edition/advlock_sql.sql (advlock_edition_version()): 0.0.9"

d=$(fresh other-client)
mkdir -p "$d/clients/node"; printf '{"name": "advlock", "version": "0.0.2"}\n' >"$d/clients/node/package.json"
mkdir -p "$d/clients/elixir"; : >"$d/clients/elixir/mix.exs"
check "another client (package.json 0.0.2) and one without a version readable: refused" detected "$d" \
  "clients/node/package.json: 0.0.2, but the extension"
check "... the client without a readable version is named" bash -c \
  "python3 '$d/scripts/versions.py' '$d' | grep -qF 'clients/elixir: no version found'"

echo "versions $passed $failed" >>"$summary"
echo "versions: $passed checks passed, $failed failed"
[ "$failed" -eq 0 ]
