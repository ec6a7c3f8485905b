# shellcheck shell=bash disable=SC2154  # the variables named below are bench/run.sh's
# `bench/run.sh --baseline [REF]`, sourced by bench/run.sh after it parsed its arguments (it sets
# repo, here, quick, install, port, out, cases, nice, rounds, baseline, PG_CONFIG and
# ADVLOCK_PG_MAJOR; pg_test/instance.sh and scripts/majors.sh are sourced). The builds are
# measured by run.sh itself, once per build and round (--no-install, ADVLOCK_PG_CONFIG naming the
# build's tree), so both builds go through the same harness code and the same instance setup.

# baseline_commit REF: the commit REF names; "previous-release" is the last release recorded in
# sql/archive/RELEASES (the commit it was cut from).
baseline_commit() {
  local ref=$1
  if [ "$ref" = previous-release ]; then
    ref=$(awk '!/^#/ && NF == 2 { last = $2 } END { print last }' "$repo/sql/archive/RELEASES")
    [ -n "$ref" ] || { echo "bench: sql/archive/RELEASES names no release" >&2; return 1; }
  fi
  git -C "$repo" rev-parse --verify --quiet "$ref^{commit}" ||
    { echo "bench: --baseline $1: not a commit of this repository" >&2; return 1; }
}

# package_release SRC TARGET_DIR STAGE: `cargo pgrx package` (release) of the source in SRC
# into STAGE, for this major's test tree (the layout under STAGE follows that tree's paths:
# nothing is installed into it). Both builds are made this way.
package_release() {
  (cd "$1" && PGRX_HOME=${PGRX_HOME:-$ADVLOCK_TEST_PGRX_HOME} CARGO_TARGET_DIR=$2 \
     cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$3")
}

# baseline_stage SHA: the release build of SHA, staged; built once per commit and kept in the
# cache with its own target directory (a later baseline's build is then incremental).
baseline_stage() {
  local sha=$1 root=${ADVLOCK_BENCH_CACHE:-/var/cache/advlock/bench-baseline} src log
  local stage="$root/$sha-pg$ADVLOCK_PG_MAJOR"
  if [ ! -f "$stage/.complete" ]; then
    mkdir -p "$root"
    rm -rf "$stage" "$stage.new"
    src=$(mktemp -d /tmp/advlock-bench-baseline-src.XXXXXX)
    log=$(mktemp /tmp/advlock-bench-baseline-build.XXXXXX.log)
    echo "bench: building the baseline $sha (release; log $log)" >&2
    git -C "$repo" archive "$sha" | tar -x -C "$src" || { rm -rf "$src"; return 1; }
    if ! package_release "$src" "$root/target" "$stage.new" >"$log" 2>&1; then
      tail -30 "$log" >&2; rm -rf "$src" "$stage.new"
      echo "bench: the baseline build failed" >&2; return 1
    fi
    rm -rf "$src"
    touch "$stage.new/.complete" && mv "$stage.new" "$stage"
  fi
  echo "$stage"
}

# tree_with STAGE DEST: a copy of this major's tree in DEST with the staged build installed;
# prints its pg_config. Each build gets its own copy, so nothing else that installs into the
# test tree meanwhile (another run, a developer) can change what a round measures.
tree_with() {
  local stage=$1 dest=$2 pgc f
  copy_pg_tree "$ADVLOCK_PG_MAJOR" "$dest" >&2 || return 1
  pgc=$(copied_pg_config "$ADVLOCK_PG_MAJOR" "$dest")
  install -m 755 "$stage$("$PG_CONFIG" --pkglibdir)/advlock.so" "$("$pgc" --pkglibdir)/advlock.so" || return 1
  for f in "$stage$("$PG_CONFIG" --sharedir)"/extension/advlock*; do
    install -m 644 "$f" "$("$pgc" --sharedir)/extension/" || return 1
  done
  echo "$pgc"
}

run_against_baseline() {
  local sha short version stage trees new_pgc old_pgc r build rc failed_new=0 failed_old=() common
  sha=$(baseline_commit "$baseline") || return 1
  short=$(git -C "$repo" rev-parse --short "$sha")
  version=$(git -C "$repo" show "$sha:Cargo.toml" | sed -n 's/^version = "\(.*\)"/\1/p' | head -1)
  if [ -z "$out" ]; then
    if [ "$quick" = 1 ]; then out=$(mktemp -d /tmp/advlock-bench-baseline.XXXXXX); else out=$here/results/baseline; fi
  fi
  rm -rf "$out/rounds"; mkdir -p "$out/rounds"
  trees=$(mktemp -d /tmp/advlock-bench-trees.XXXXXX)
  chmod 755 "$trees"
  # shellcheck disable=SC2064  # expand now: $trees is local to this function
  trap "rm -rf '$trees'" EXIT
  echo "bench: this build (release; log $trees/build.log)"
  package_release "$repo" "${CARGO_TARGET_DIR:-$repo/target}" "$trees/stage-new" >"$trees/build.log" 2>&1 ||
    { tail -30 "$trees/build.log"; echo "bench: this build failed" >&2; return 1; }
  new_pgc=$(tree_with "$trees/stage-new" "$trees/new") || { echo "bench: could not install this build" >&2; return 1; }
  stage=$(baseline_stage "$sha") || return 1
  old_pgc=$(tree_with "$stage" "$trees/old") || { echo "bench: could not install the baseline" >&2; return 1; }
  echo "bench: this build in $trees/new, the baseline (advlock $version, $short) in $trees/old"
  common=(--no-install --port "$port" --nice "$nice")
  [ "$quick" = 1 ] && common+=(--quick)
  [ -n "$cases" ] && common+=(--cases "$cases")
  for r in $(seq 1 "$rounds"); do
    # Odd rounds measure this build first, even rounds the baseline first.
    for build in $( [ $((r % 2)) = 1 ] && echo new old || echo old new ); do
      echo "bench: round $r of $rounds: $build build"
      if [ "$build" = new ]; then
        ADVLOCK_PG_CONFIG=$new_pgc \
          ADVLOCK_BENCH_PROFILE="release build of this checkout, $(git -C "$repo" rev-parse --short HEAD) (bench/run.sh --baseline, round $r)" \
          "$here/run.sh" "${common[@]}" --out "$out/rounds/new-$r"; rc=$?
        [ $rc = 0 ] || failed_new=1
      else
        ADVLOCK_PG_CONFIG=$old_pgc \
          ADVLOCK_BENCH_PROFILE="baseline: release build of $short, advlock $version (bench/run.sh --baseline, round $r)" \
          "$here/run.sh" "${common[@]}" --out "$out/rounds/old-$r"; rc=$?
        [ $rc = 0 ] || failed_old+=("$r")
      fi
    done
  done
  (cd "$repo" && "$repo/pg_test/.venv/bin/python" -m bench.harness.compare "$out") || return 1
  if [ ${#failed_old[@]} -gt 0 ]; then
    echo "bench: the baseline's harness reported errors in round(s) ${failed_old[*]} (cases it lacks show as" \
         "not measured in BASELINE.md; see rounds/old-N/REPORT.md)" >&2
  fi
  [ $failed_new = 0 ] || { echo "bench: this build's harness broke in a round (rounds/new-N/REPORT.md)" >&2; return 1; }
}
