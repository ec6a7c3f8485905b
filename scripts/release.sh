#!/usr/bin/env bash
# Writes everything a release page needs into one directory (default target/dist/advlock-<version>):
#   postgresql-NN-advlock_<version>-1_amd64.deb      every major's Debian package   (scripts/package.sh)
#   advlock-<version>-pgNN-linux-x86_64.tar.gz       every major's tarball          (scripts/package.sh)
#   advlock-<version>.tar.gz                         the source archive             (git archive HEAD)
#   advlock-<version>-py3-none-any.whl ...           the Python client, when clients/python exists
#   advlock-archive-keyring.gpg                      the public signing key, for apt's signed-by=
#   SHA256SUMS, SHA256SUMS.asc                       checksums of the files above, signed
#   apt/                                             the signed apt repository (scripts/apt-repo.sh):
#                                                    upload it as is to the repository's URL
# Refuses to start (exit 1, nothing written) unless scripts/versions.py finds one version in
# Cargo.toml, the SQL edition and every client.
# Usage: scripts/release.sh [OUTDIR]
# Environment:
#   ADVLOCK_SIGNING_KEY (required), ADVLOCK_SIGNING_PASSPHRASE_FILE, ADVLOCK_APT_SUITE: see apt-repo.sh
#   ADVLOCK_RELEASE_VERSION the version (or tag, v0.6.0) being released: refused unless it is the version
#   ADVLOCK_RELEASE_MAJORS  the majors to release (default: every supported major; all must build)
#   ADVLOCK_RELEASE_PREBUILT=1  take the packages already in target/packages (the test command
#                           has just built them) instead of running scripts/package.sh
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cd "$repo"
. "$here/majors.sh"
log() { printf '\033[1m[release]\033[0m %s\n' "$*"; }
[ -n "${ADVLOCK_SIGNING_KEY:-}" ] || { echo "release: set ADVLOCK_SIGNING_KEY to the signing key (a secret key file or a key id)" >&2; exit 1; }
# One version for the extension, the SQL edition and every client, or no release.
python3 "$here/versions.py" >&2 || { echo "release: the versions differ (above): nothing was built" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
if [ -n "${ADVLOCK_RELEASE_VERSION:-}" ] && [ "${ADVLOCK_RELEASE_VERSION#v}" != "$version" ]; then
  echo "release: asked to release ${ADVLOCK_RELEASE_VERSION}, but the version is $version: nothing was built" >&2; exit 1
fi
read -r -a majors <<<"${ADVLOCK_RELEASE_MAJORS:-${ADVLOCK_MAJORS[*]}}"
default_out="$repo/target/dist/advlock-$version"
out=${1:-$default_out}
if [ "$out" = "$default_out" ]; then rm -rf "$out"
elif [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then echo "release: $out is not empty" >&2; exit 1; fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  log "warning: the work tree has uncommitted changes; the source archive is HEAD ($(git rev-parse --short HEAD))"

if [ "${ADVLOCK_RELEASE_PREBUILT:-0}" != 1 ]; then
  "$here/package.sh" "${majors[@]}"
fi
debs=()
for major in "${majors[@]}"; do
  deb="target/packages/postgresql-$major-advlock_${version}-1_amd64.deb"
  tarball="target/packages/advlock-$version-pg$major-linux-x86_64.tar.gz"
  for f in "$deb" "$tarball"; do [ -f "$f" ] || { echo "release: $f is missing (scripts/package.sh $major)" >&2; exit 1; }; done
  install -m 644 "$deb" "$tarball" "$out/"
  debs+=("$deb")
done

log "source archive of $(git rev-parse --short HEAD)"
git archive --format=tar.gz --prefix="advlock-$version/" -o "$out/advlock-$version.tar.gz" HEAD

if [ -f clients/python/pyproject.toml ]; then
  log "Python client wheel (python3 -m build --wheel)"
  venv=$(mktemp -d /tmp/advlock-build-venv.XXXXXX)
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check build
  "$venv/bin/python" -m build --wheel --outdir "$out" clients/python >"$venv/build.log" 2>&1 ||
    { tail -20 "$venv/build.log"; rm -rf "$venv"; exit 1; }
  rm -rf "$venv"
else
  log "note: clients/python/pyproject.toml does not exist: no Python client wheel in this release"
fi

log "apt repository (suite ${ADVLOCK_APT_SUITE:-stable})"
"$here/apt-repo.sh" "$out/apt" "${debs[@]}"
install -m 644 "$out/apt/advlock-archive-keyring.gpg" "$out/"

(cd "$out" && find . -maxdepth 1 -type f ! -name 'SHA256SUMS*' -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
. "$here/signing.sh"
trap signing_done EXIT
signing_setup
"${signing_gpg[@]}" --detach-sign --armor --output "$out/SHA256SUMS.asc" "$out/SHA256SUMS"
signing_done
(cd "$out" && sha256sum --quiet -c SHA256SUMS)
gpgv --keyring "$out/advlock-archive-keyring.gpg" "$out/SHA256SUMS.asc" "$out/SHA256SUMS" 2>/dev/null

log "wrote $out:"
find "$out" -maxdepth 1 -mindepth 1 -printf '  %P\n' | sort
