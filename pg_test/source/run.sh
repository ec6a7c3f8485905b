#!/usr/bin/env bash
# The from-source install as a DBA runs it: scripts/install-from-source.sh --pg-config PG_CONFIG.
#   1. The README's from-source block is that one command. What it refuses, changing nothing: no
#      Rust on PATH (it names cargo, rustc and rustup), a PostgreSQL 14 pg_config (it names the
#      supported majors), a server without its headers (it names the -dev / -devel package), a
#      user who may not write the server's directories with --no-sudo, a rustc older than 1.89
#      (each before any build).
#   2. Per major (default: 18, a PyPI-wheel tree, not Debian's layout, and 15, Debian's): the
#      documented command, in a CARGO_TARGET_DIR of its own made empty first (no build of
#      scripts/up.sh or of the test command is reused: every crate is compiled anew, release),
#      into a copy of that server's tree made for this test, without advlock (scripts/majors.sh
#      copy_pg_tree: the system tree, which a running server may use, is not touched; the
#      copy's pg_config names its own directories, as a DBA's names theirs); the installed files are the build's;
#      then a smoke test on an instance of that server, advlock preloaded: CREATE EXTENSION, the
#      version, advlock_key against a published vector, advlock_try_with_timeout taking a free
#      key and giving up on a held one after its bounded wait; then the command once more while
#      that server runs with advlock loaded: advlock.so is replaced by a rename (a new inode, the
#      mapped file untouched) and the server goes on answering.
# Writes "source-refusals P F" and "pgNN-source P F (seconds of the build)" to $ADVLOCK_SUMMARY.
# Usage: pg_test/source/run.sh [MAJOR...]      ADVLOCK_TEST_PORT: the instance's port (5418)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
. "$repo/scripts/majors.sh"
summary=${ADVLOCK_SUMMARY:-/dev/null}
majors=("$@"); [ ${#majors[@]} -gt 0 ] || majors=(18 15)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
port=${ADVLOCK_TEST_PORT:-5418}
script="$repo/scripts/install-from-source.sh"
check_name=source-install
. "$repo/pg_test/check.sh"
status=0
scratch=$(mktemp -d /var/tmp/advlock-source.XXXXXX)
chmod 755 "$scratch"
cleanup() { [ -n "${ADVLOCK_TEST_KEEP:-}" ] || rm -rf "$scratch"; }
trap cleanup EXIT
# count_since P F NAME [NOTE]: the checks since P/F, as one summary line.
count_since() { echo "$3 $((passed - $1)) $((failed - $2))${4:+ $4}" >>"$summary"; }

# --- 1. the README's command, and the refusals -------------------------------------------------
p0=$passed f0=$failed
# The README's "From source" block is this one command; below it runs as written from the
# repository's root, with each test major's pg_config for the path.
readme_cmd=$(python3 - "$repo/README.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
section = text.split("### From source (works today)\n", 1)[1].split("\n### ", 1)[0]
print(re.search(r"^```sh\n(.*?)^```", section, re.S | re.M).group(1).strip())
PY
)
check "the README's from-source block is one command: scripts/install-from-source.sh --pg-config PATH ($readme_cmd)" \
  bash -c "grep -qxE 'scripts/install-from-source\.sh --pg-config /[^ ]+/pg_config' <<<'$readme_cmd'"
any_pgc=""
# (the test command's copy: were a refusal to fail, nothing of the system tree would change)
for m in "${majors[@]}" "${ADVLOCK_MAJORS[@]}"; do [ -x "$(test_pg_config_for "$m")" ] && { any_pgc=$(test_pg_config_for "$m"); break; }; done
mkdir -p "$scratch/home" "$scratch/fake"
refused() { # EXPECTED-TEXT... -- COMMAND...: exit status 1 and every text in the output
  local texts=() out rc
  while [ "$1" != -- ]; do texts+=("$1"); shift; done; shift
  out=$("$@" 2>&1); rc=$?
  printf '%s\n' "$out" | sed 's/^/    | /'
  [ "$rc" = 1 ] || { echo "    exit status $rc, not 1"; return 1; }
  for t in "${texts[@]}"; do grep -qF -- "$t" <<<"$out" || { echo "    no '$t' in the output"; return 1; }; done
}
if [ -n "$any_pgc" ]; then
  # A PATH without cargo/rustc, and a HOME without ~/.cargo (rustup's default place).
  check "no Rust: says cargo and rustc are missing, how to get them (rustup), exits 1" refused \
    "Rust: cargo and rustc not found" "rustup" "nothing was changed" -- \
    env -i PATH=/usr/bin:/bin HOME="$scratch/home" "$script" --pg-config "$any_pgc"
fi
# shellcheck disable=SC2016  # $1 is the fake pg_config's own argument
printf '#!/bin/sh\ncase $1 in --version) echo "PostgreSQL 14.12";; *) echo /nonexistent;; esac\n' >"$scratch/fake/pg14_config"
# shellcheck disable=SC2016
printf '#!/bin/sh\ncase $1 in --version) echo "PostgreSQL 17.7";; *) echo %s/nonexistent;; esac\n' "$scratch" >"$scratch/fake/nodev_config"
chmod +x "$scratch/fake/"*
check "PostgreSQL 14: refused, naming the supported majors" refused \
  "is PostgreSQL 14.12; advlock supports PostgreSQL 15, 16, 17 and 18 only" -- "$script" --pg-config "$scratch/fake/pg14_config"
check "a server without its headers: names postgresql-server-dev-17 and postgresql17-devel" refused \
  "server headers" "postgresql-server-dev-17" "postgresql17-devel" "nothing was changed" -- \
  "$script" --pg-config "$scratch/fake/nodev_config"
check "no pg_config at the path given: refused" refused "is not an executable pg_config" -- \
  "$script" --pg-config "$scratch/fake/none"
# A user who may not write the server's directories, with --no-sudo: refused before any build
# (cargo and rustc here are stand-ins that record a call; cc, libclang and headers are real).
if [ -n "$any_pgc" ] && id postgres >/dev/null 2>&1 && ! sudo -u postgres test -w "$("$any_pgc" --pkglibdir)"; then
  mkdir -p "$scratch/fakebin"; chmod 755 "$scratch" "$scratch/fakebin"
  for tool in cargo rustc; do
    printf '#!/bin/sh
echo called >>%s/fakebin/%s.calls
echo "%s 1.95.0 (stand-in)"
' "$scratch" "$tool" "$tool" >"$scratch/fakebin/$tool"
    chmod 755 "$scratch/fakebin/$tool"
  done
  chmod 777 "$scratch/fakebin"
  check "not writable by the user, --no-sudo: refused before building, nothing changed" refused \
    "is not writable by postgres (--no-sudo): nothing was changed" -- \
    sudo -u postgres env -i PATH="$scratch/fakebin:/usr/bin:/bin" HOME="$scratch/home" "$script" --pg-config "$any_pgc" --no-sudo
  check "... and cargo was never called" test ! -e "$scratch/fakebin/cargo.calls"
fi
# An old rustc (a distribution's): named, with its version and the minimum, before any build.
mkdir -p "$scratch/oldrust"
printf '#!/bin/sh\necho "rustc 1.75.0 (stand-in)"\n' >"$scratch/oldrust/rustc"
printf '#!/bin/sh\necho called >>%s/oldrust/cargo.calls\n' "$scratch" >"$scratch/oldrust/cargo"
chmod 755 "$scratch/oldrust/rustc" "$scratch/oldrust/cargo"
if [ -n "$any_pgc" ]; then
  check "rustc 1.75: refused, naming the version and the minimum 1.89, cargo never called" refused \
    "Rust 1.89 or newer: $scratch/oldrust/rustc is 1.75" "rustup update stable" "nothing was changed" -- \
    env -i PATH="$scratch/oldrust:/usr/bin:/bin" HOME="$scratch/home" "$script" --pg-config "$any_pgc"
  check "... and cargo was never called" test ! -e "$scratch/oldrust/cargo.calls"
fi
count_since "$p0" "$f0" source-refusals

# --- 2. per major: build from scratch, install, smoke test, reinstall under a running server --
export CARGO_TARGET_DIR="$scratch/target"   # empty: nothing reused
for major in "${majors[@]}"; do
  p0=$passed f0=$failed
  if ! major_installed "$major"; then
    check "PostgreSQL $major is installed (scripts/setup.sh)" false; count_since "$p0" "$f0" "pg$major-source"; status=1; continue
  fi
  echo "== install from source: PostgreSQL $major ($(major_source "$major")) =="
  if ! check "a copy of PostgreSQL $major's tree, without advlock" copy_pg_tree "$major" "$scratch/tree-$major"; then
    count_since "$p0" "$f0" "pg$major-source"; status=1; continue
  fi
  ADVLOCK_PG_MAJOR=$major ADVLOCK_PG_CONFIG=$(copied_pg_config "$major" "$scratch/tree-$major")
  . "$repo/pg_test/instance.sh"
  pgc=$PG_CONFIG
  libdir=$("$pgc" --pkglibdir) extdir=$("$pgc" --sharedir)/extension
  log="$scratch/install-$major.log"
  start=$(date +%s)
  check "scripts/install-from-source.sh --pg-config $pgc (the README's command, from the repository root)" bash -c \
    "cd '$repo' && scripts/install-from-source.sh --pg-config '$pgc' >'$log' 2>&1 || { tail -40 '$log'; exit 1; }"
  secs=$(($(date +%s) - start))
  echo "source-install: PostgreSQL $major: build from an empty target directory and install: $secs s"
  staged="$CARGO_TARGET_DIR/install-from-source/pg$major"
  check "it built with the release profile (cargo pgrx package)" grep -q "Finished \`release\` profile" "$log"
  check "the installed advlock.so is the one it built" bash -c \
    "cmp '$libdir/advlock.so' \"\$(find '$staged' -name advlock.so | head -1)\""
  check "advlock.control and advlock--$version.sql are in $extdir" test -f "$extdir/advlock.control" -a -f "$extdir/advlock--$version.sql"
  check "the upgrade scripts came along (advlock--A--B.sql)" bash -c "ls '$extdir'/advlock--*--*.sql >/dev/null"
  check "no temporary file left beside them" bash -c "! ls -a '$libdir' '$extdir' | grep -q advlock-install"
  check "it printed the next steps (CREATE EXTENSION, shared_preload_libraries)" bash -c \
    "grep -q 'CREATE EXTENSION IF NOT EXISTS advlock SCHEMA public;' '$log' && grep -q \"shared_preload_libraries = 'advlock'\" '$log'"

  # Smoke test, preloaded (the library loads in the postmaster too).
  work="$scratch/pg$major"
  if check "an instance of PostgreSQL $major starts with shared_preload_libraries = 'advlock'" \
       instance_start "$work" "$port" "shared_preload_libraries = 'advlock'"; then
    q() { psql_db -At -c "$1"; }
    check "CREATE EXTENSION advlock" q "CREATE EXTENSION advlock SCHEMA public"
    check "extversion is $version (Cargo.toml)" test "$(q "SELECT extversion FROM pg_extension WHERE extname = 'advlock'")" = "$version"
    check "advlock_key('account', 42) = 7700915891107303510 (the published vector)" \
      test "$(q "SELECT advlock_key('account', 42)")" = 7700915891107303510
    check "advlock_try_with_timeout on a free key: t" \
      test "$(q "BEGIN; SELECT advlock_try_with_timeout('account', 42, timeout_ms => 200); COMMIT;")" = t
    # Another session holds the key (session scope) while this one asks with a 300 ms bound.
    as_postgres "$PGBIN/psql" -X -q -At -h "$work" -p "$port" -U postgres -v ON_ERROR_STOP=1 \
      -c "SELECT advlock_try_with_timeout('account', 42, 0, scope => 'session')" -c "SELECT pg_sleep(600)" \
      >"$work/holder.out" 2>&1 &
    holder=$!
    for _ in $(seq 50); do
      [ "$(q "SELECT count(*) FROM advlock_holders WHERE key = advlock_key('account', 42) AND granted")" = 1 ] && break
      sleep 0.1
    done
    t0=$(date +%s%N)
    got=$(q "BEGIN; SELECT advlock_try_with_timeout('account', 42, timeout_ms => 300); COMMIT;")
    waited=$((($(date +%s%N) - t0) / 1000000))
    check "advlock_try_with_timeout on a held key: f after its bounded wait (${waited} ms, bound 300 ms)" \
      test "$got" = f -a "$waited" -ge 290 -a "$waited" -lt 5000
    check "preloaded: advlock_holders shows the holder's label account:42" \
      test "$(q "SELECT label FROM advlock_holders WHERE key = advlock_key('account', 42) AND granted")" = account:42
    # Reinstall while the server runs with advlock mapped (the holder's backend, the postmaster).
    before=$(stat -c %i "$libdir/advlock.so")
    t0=$(date +%s)
    check "install-from-source.sh again, the server running (incremental build)" bash -c \
      "'$script' --pg-config '$pgc' >'$log.2' 2>&1 || { tail -40 '$log.2'; exit 1; }"
    echo "source-install: PostgreSQL $major: the second run took $(($(date +%s) - t0)) s"
    after=$(stat -c %i "$libdir/advlock.so")
    check "advlock.so was replaced by a rename (inode $before -> $after), not rewritten in place" test "$before" != "$after"
    check "the running server still answers, the holder still holds" \
      test "$(q "SELECT count(*) FROM advlock_holders WHERE key = advlock_key('account', 42) AND granted")" = 1
    q "SELECT pg_terminate_backend(pid) FROM advlock_holders WHERE key = advlock_key('account', 42) AND granted" >/dev/null
    wait "$holder" 2>/dev/null
    check "a new session after the reinstall: advlock_key still the vector" \
      test "$(q "SELECT advlock_key('account', 42)")" = 7700915891107303510
    instance_stop "$work"
  fi
  count_since "$p0" "$f0" "pg$major-source" "(build from scratch ${secs}s)"
done

echo "source-install: $passed checks passed, $failed failed"
[ $status -eq 0 ] && [ $failed -eq 0 ]
