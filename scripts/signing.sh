# shellcheck shell=bash
# The release signing key, for apt-repo.sh and release.sh. Sourced.
#   signing_setup   reads ADVLOCK_SIGNING_KEY: a file holding the OpenPGP secret key (armored or
#                   binary), imported into a keyring of its own in a temporary GNUPGHOME (the
#                   signer's keyring is untouched), or the id / fingerprint of a secret key in
#                   $GNUPGHOME's keyring; ADVLOCK_SIGNING_PASSPHRASE_FILE if the key has a
#                   passphrase. Sets signing_key (its fingerprint or id) and signing_gpg (the gpg
#                   command line that signs with it).
#   signing_done    removes the temporary GNUPGHOME, if any
# shellcheck disable=SC2034  # signing_key and signing_gpg are for the scripts that source this
signing_home="" signing_key="" signing_gpg=()
signing_setup() {
  local key=${ADVLOCK_SIGNING_KEY:-}
  [ -n "$key" ] || { echo "advlock: set ADVLOCK_SIGNING_KEY to the signing key (a secret key file or a key id)" >&2; return 1; }
  if [ -f "$key" ]; then
    signing_home=$(mktemp -d /tmp/advlock-sign.XXXXXX); chmod 700 "$signing_home"
    export GNUPGHOME=$signing_home
    gpg --batch --quiet --import "$key" 2>/dev/null || true
    key=$(gpg --batch --with-colons --list-secret-keys | awk -F: '$1 == "fpr" {print $10; exit}')
    [ -n "$key" ] || { echo "advlock: $ADVLOCK_SIGNING_KEY holds no secret key" >&2; return 1; }
  fi
  gpg --batch --list-secret-keys "$key" >/dev/null 2>&1 || { echo "advlock: no secret key '$key'" >&2; return 1; }
  # shellcheck disable=SC2034
  signing_key=$key
  signing_gpg=(gpg --batch --yes --local-user "$key")
  if [ -n "${ADVLOCK_SIGNING_PASSPHRASE_FILE:-}" ]; then
    signing_gpg+=(--pinentry-mode loopback --passphrase-file "$ADVLOCK_SIGNING_PASSPHRASE_FILE")
  fi
}
signing_done() { [ -z "$signing_home" ] || rm -rf "$signing_home"; signing_home=""; }
