#!/usr/bin/env bash
# The release as a DBA gets it. With a throwaway signing key (and a second, wrong one):
#   1. scripts/release.sh writes the release directory from the packages in target/packages;
#      its files, checksums, signatures and apt indexes are checked, and the README's tarball
#      verification runs as written (readme_verify.sh) ("release-dir")
#   2. pg_test/release/install.sh in clean Debian systems (debootstrap, cached): PostgreSQL 15
#      on bookworm, 17 on trixie, 18 on forky, each Debian's own server
#   3. pg_test/release/upgrade.sh: apt-get upgrade from the previous release on trixie (17)
# Each writes "NAME passed failed" lines to $ADVLOCK_SUMMARY.
# Usage: pg_test/release/run.sh [MAJOR...]  (after scripts/package.sh MAJOR...; default: every
#        major whose .deb and tarball are in target/packages)
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
# shellcheck source=../../scripts/majors.sh
. "$repo/scripts/majors.sh"
summary=${ADVLOCK_SUMMARY:-/dev/null}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
majors=("$@")
if [ ${#majors[@]} -eq 0 ]; then
  for m in "${ADVLOCK_MAJORS[@]}"; do
    [ -f "$repo/target/packages/postgresql-$m-advlock_${version}-1_amd64.deb" ] && majors+=("$m")
  done
fi
check_name=release
# shellcheck source=../check.sh
. "$repo/pg_test/check.sh"
status=0
work=$(mktemp -d /tmp/advlock-release-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
dist=$work/dist

# --- throwaway keys: the release's, and a wrong one ----------------------------------------------------
mkdir -m 700 "$work/gnupg"
for k in signing wrong; do
  GNUPGHOME=$work/gnupg gpg --batch --quiet --passphrase '' \
    --quick-gen-key "advlock $k test key <advlock-$k@localhost.invalid>" ed25519 sign never 2>/dev/null
done
fpr() { GNUPGHOME=$work/gnupg gpg --batch --with-colons --list-keys "advlock-$1@localhost.invalid" 2>/dev/null | awk -F: '$1 == "fpr" {print $10; exit}'; }
GNUPGHOME=$work/gnupg gpg --batch --armor --export-secret-keys "$(fpr signing)" >"$work/signing-key.asc"
GNUPGHOME=$work/gnupg gpg --batch --export "$(fpr wrong)" >"$work/wrong-keyring.gpg"

# --- the release directory -----------------------------------------------------------------------------
check "scripts/release.sh refuses to run without a signing key" \
  bash -c "! env -u ADVLOCK_SIGNING_KEY ADVLOCK_RELEASE_PREBUILT=1 '$repo/scripts/release.sh' '$work/nokey' >/dev/null 2>&1"
check "scripts/release.sh (majors ${majors[*]}, packages from target/packages)" \
  env ADVLOCK_SIGNING_KEY="$work/signing-key.asc" ADVLOCK_RELEASE_PREBUILT=1 ADVLOCK_RELEASE_MAJORS="${majors[*]}" \
  "$repo/scripts/release.sh" "$dist"
if [ "$failed" -gt 0 ]; then
  echo "release-dir $passed $failed" >>"$summary"; echo "release: no release directory, nothing more to test"; exit 1
fi
suite=${ADVLOCK_APT_SUITE:-stable}
for m in "${majors[@]}"; do
  d=postgresql-$m-advlock_${version}-1_amd64.deb
  check "$d and the pg$m tarball are in the release and the .deb in the apt pool" \
    test -f "$dist/$d" -a -f "$dist/advlock-$version-pg$m-linux-x86_64.tar.gz" -a -f "$dist/apt/pool/main/a/advlock/$d"
  check "Packages lists postgresql-$m-advlock $version-1" \
    bash -c "grep -A3 -x 'Package: postgresql-$m-advlock' '$dist/apt/dists/$suite/main/binary-amd64/Packages' | grep -qx 'Version: $version-1'"
done
check "the source archive is this commit's tree (git archive HEAD)" \
  bash -c "diff <(tar -tzf '$dist/advlock-$version.tar.gz' | grep -v '/\$' | sed 's|^advlock-$version/||' | sort) <(git -C '$repo' ls-tree -r --name-only HEAD | sort)"
if [ -f "$repo/clients/python/pyproject.toml" ]; then
  check "the Python client wheel is in the release" bash -c "ls '$dist'/*.whl"
else
  echo "release: clients/python/pyproject.toml is absent: no wheel expected"
fi
check "SHA256SUMS names every file of the release page" bash -c \
  "diff <(find '$dist' -maxdepth 1 -type f ! -name 'SHA256SUMS*' -printf '%f\n' | sort) <(awk '{print \$2}' '$dist/SHA256SUMS' | sort)"
check "sha256sum -c SHA256SUMS" bash -c "cd '$dist' && sha256sum -c SHA256SUMS"
cp -r "$dist" "$work/corrupt"; printf 'x' >>"$work/corrupt/advlock-$version.tar.gz"
check "sha256sum -c fails for a corrupted file" bash -c "cd '$work/corrupt' && ! sha256sum -c --quiet SHA256SUMS 2>/dev/null"
check "SHA256SUMS.asc verifies with the shipped keyring, not with another" bash -c \
  "gpgv --keyring '$dist/advlock-archive-keyring.gpg' '$dist/SHA256SUMS.asc' '$dist/SHA256SUMS' 2>/dev/null &&
   ! gpgv --keyring '$work/wrong-keyring.gpg' '$dist/SHA256SUMS.asc' '$dist/SHA256SUMS' 2>/dev/null"
check "InRelease and Release.gpg verify with the shipped keyring, not with another" bash -c \
  "gpgv --keyring '$dist/advlock-archive-keyring.gpg' '$dist/apt/dists/$suite/InRelease' 2>/dev/null &&
   gpgv --keyring '$dist/advlock-archive-keyring.gpg' '$dist/apt/dists/$suite/Release.gpg' '$dist/apt/dists/$suite/Release' 2>/dev/null &&
   ! gpgv --keyring '$work/wrong-keyring.gpg' '$dist/apt/dists/$suite/InRelease' 2>/dev/null"
check "the keyring holds the signing key only (no secret key)" bash -c \
  "gpg --batch --show-keys --with-colons '$dist/advlock-archive-keyring.gpg' | grep -q '^fpr:.*:$(fpr signing):' &&
   ! gpg --batch --show-keys --with-colons '$dist/advlock-archive-keyring.gpg' | grep -q '^sec'"
check "Release lists Packages and Packages.gz with their SHA256" bash -c \
  "cd '$dist/apt/dists/$suite' && for f in main/binary-amd64/Packages main/binary-amd64/Packages.gz; do
     grep -qE \"^ \$(sha256sum \$f | cut -d' ' -f1) +[0-9]+ \$f\\\$\" Release || exit 1; done"
check "Packages.gz is Packages" bash -c \
  "cmp <(zcat '$dist/apt/dists/$suite/main/binary-amd64/Packages.gz') '$dist/apt/dists/$suite/main/binary-amd64/Packages'"
# The README's tarball path as written: its gpgv and sha256sum lines in a DBA's download directory
# (and refusing a wrong keyring, a changed tarball); the apt path's gpg --show-keys.
if [[ " ${majors[*]} " == *" 17 "* ]]; then
  check "the README's tarball verification, as written (readme_verify.sh)" \
    "$here/readme_verify.sh" "$dist" "$work/wrong-keyring.gpg" "$(fpr signing)"
fi
echo "release-dir $passed $failed" >>"$summary"
echo "release: $passed checks passed, $failed failed"
[ "$failed" -eq 0 ] || status=1

# --- clean Debian systems --------------------------------------------------------------------------------
for pair in "bookworm 15" "trixie 17" "forky 18"; do
  read -r suite_name major <<<"$pair"
  [[ " ${majors[*]} " == *" $major "* ]] || { echo "release: PostgreSQL $major not released here: no $suite_name test"; continue; }
  [ -f "$dist/apt/pool/main/a/advlock/postgresql-$major-advlock_${version}-1_amd64.deb" ] || continue
  start=$(date +%s)
  "$here/install.sh" "$suite_name" "$major" "$dist" "$work/wrong-keyring.gpg" || status=1
  echo "release: $suite_name ($major) took $(($(date +%s) - start)) s"
done
if [[ " ${majors[*]} " == *" 17 "* ]] && [ -f "$dist/apt/pool/main/a/advlock/postgresql-17-advlock_${version}-1_amd64.deb" ]; then
  start=$(date +%s)
  "$here/upgrade.sh" "$dist" "$work/signing-key.asc" || status=1
  echo "release: the apt upgrade took $(($(date +%s) - start)) s"
fi
exit $status
