#!/usr/bin/env bash
# Writes a signed apt repository from .deb files, with the standard Debian tools:
#   REPO/pool/main/a/advlock/*.deb
#   REPO/dists/SUITE/main/binary-amd64/Packages, Packages.gz   (apt-ftparchive packages)
#   REPO/dists/SUITE/Release                                  (apt-ftparchive release)
#   REPO/dists/SUITE/InRelease, Release.gpg                   (gpg --clearsign / --detach-sign)
#   REPO/advlock-archive-keyring.gpg                          the public key, for signed-by=
# and checks the result with gpgv against that keyring before it returns.
#
# Usage: scripts/apt-repo.sh REPO DEB...
# Environment:
#   ADVLOCK_SIGNING_KEY   (required) a file holding the OpenPGP secret key (armored or binary),
#                         or the id / fingerprint of a secret key in $GNUPGHOME's keyring
#   ADVLOCK_SIGNING_PASSPHRASE_FILE   the key's passphrase, if it has one (scripts/signing.sh)
#   ADVLOCK_APT_SUITE     the suite (default: stable)
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 REPO DEB..." >&2; exit 2; }
repo=$1; shift
suite=${ADVLOCK_APT_SUITE:-stable}
command -v apt-ftparchive >/dev/null || { echo "apt-repo: apt-ftparchive missing (apt-utils; scripts/setup.sh)" >&2; exit 1; }

. "$(dirname "${BASH_SOURCE[0]}")/signing.sh"
trap signing_done EXIT
signing_setup
sign=("${signing_gpg[@]}") key=$signing_key

pool=pool/main/a/advlock
bin=dists/$suite/main/binary-amd64
mkdir -p "$repo/$pool" "$repo/$bin"
for deb in "$@"; do install -m 644 "$deb" "$repo/$pool/"; done
(
  cd "$repo"
  apt-ftparchive --arch amd64 packages "$pool" >"$bin/Packages"
  gzip -9n <"$bin/Packages" >"$bin/Packages.gz"
  # The Release file lists the index files with their hashes; written beside, then moved in, so
  # that it does not describe itself.
  rel=$(mktemp)
  apt-ftparchive \
    -o APT::FTPArchive::Release::Origin=advlock -o APT::FTPArchive::Release::Label=advlock \
    -o APT::FTPArchive::Release::Suite="$suite" -o APT::FTPArchive::Release::Codename="$suite" \
    -o APT::FTPArchive::Release::Architectures=amd64 -o APT::FTPArchive::Release::Components=main \
    -o APT::FTPArchive::Release::Description="advlock: safe, observable advisory locks for PostgreSQL" \
    release "dists/$suite" >"$rel"
  mv "$rel" "dists/$suite/Release"; chmod 644 "dists/$suite/Release"
  rm -f "dists/$suite/InRelease" "dists/$suite/Release.gpg"
  "${sign[@]}" --clearsign --output "dists/$suite/InRelease" "dists/$suite/Release"
  "${sign[@]}" --detach-sign --armor --output "dists/$suite/Release.gpg" "dists/$suite/Release"
  gpg --batch --export "$key" >advlock-archive-keyring.gpg
  # What apt will do: verify both signatures with nothing but the shipped keyring.
  gpgv --keyring ./advlock-archive-keyring.gpg "dists/$suite/InRelease" 2>/dev/null
  gpgv --keyring ./advlock-archive-keyring.gpg "dists/$suite/Release.gpg" "dists/$suite/Release" 2>/dev/null
) || { echo "apt-repo: writing or verifying the repository in $repo failed" >&2; exit 1; }
echo "apt-repo: $repo (suite $suite, $# package(s), signed by $key)"
