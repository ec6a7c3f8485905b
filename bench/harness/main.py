"""Entry point: runs the cases, writes results.json, REPORT.md and the SVG charts.
Invoked by bench/run.sh (which builds, installs and starts the server)."""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback

from . import (case_acquire, case_edition, case_election, case_fence, case_handoff, case_holders, case_idle_timeout,
               case_keys, case_keysets, case_leases, case_node, case_preload, case_timeout, case_tokens)
from .common import Ctx, HarnessError, log, md_table

CASES = [
    ("1", "Key derivation", case_keys),
    ("2", "Uncontended acquire (pgbench)", case_acquire),
    ("3", "Hand-off latency and FIFO under contention", case_handoff),
    ("4", "Timeout precision and CPU while waiting", case_timeout),
    ("5", "Diagnostics at scale: advlock_holders", case_holders),
    ("6", "Preloaded vs not preloaded uncontended acquire", case_preload),
    ("7", "Ten keys at once: one array call vs single calls vs the unnest idiom", case_keysets),
    ("8", "Fencing tokens: token acquisition vs plain acquisition", case_tokens),
    ("9", "SQL edition vs extension: keys and uncontended acquire", case_edition),
    ("10", "Leases: cost, hand-off on release and on expiry, memory", case_leases),
    ("11", "Fences: advlock_fence vs the single-row upsert it replaces", case_fence),
    ("12", "Node client: withLock vs the same SQL by hand", case_node),
    ("13", "Leader election: observer wake latency on resignation, grant and expiry", case_election),
    ("14", "The idle-lock timeout's cost on an uncontended transaction", case_idle_timeout),
]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sha(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def machine_facts(ctx: Ctx) -> list[tuple[str, str]]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    osname = ""
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    conn = ctx.connect()
    (version,) = conn.execute("SELECT version()").fetchone()
    (extv,) = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'advlock'").fetchone()
    settings = conn.execute(
        "SELECT name, setting FROM pg_settings WHERE name IN ('max_connections', 'max_locks_per_transaction', "
        "'shared_buffers', 'jit', 'fsync', 'synchronous_commit', 'max_parallel_workers_per_gather', "
        "'autovacuum') ORDER BY name").fetchall()
    so = _sha(ctx.lib)
    (probins,) = conn.execute("SELECT array_agg(DISTINCT probin) FROM pg_proc p JOIN pg_depend d ON "
                              "d.classid = 'pg_proc'::regclass AND d.objid = p.oid JOIN pg_extension e ON "
                              "e.oid = d.refobjid WHERE e.extname = 'advlock' AND p.prolang = "
                              "(SELECT oid FROM pg_language WHERE lanname = 'c')").fetchone()
    if probins != [ctx.lib]:
        raise HarnessError(f"advlock's C functions point at {probins}, not the pinned copy {ctx.lib}")
    # The backend that ran advlock_key above mapped exactly the pinned copy.
    conn.execute("SELECT advlock_key('bench', 'pin')").fetchone()
    with open(f"/proc/{conn.info.backend_pid}/maps") as f:
        # (by file name: a wheel major's own binaries live under /opt/advlock-pg)
        maps = {line.split()[-1] for line in f if "advlock" in os.path.basename(line.split()[-1])}
    if maps != {ctx.lib}:
        raise HarnessError(f"backend mapped {maps}, expected only the pinned {ctx.lib}")
    conn.close()
    build = "matches neither target/release/ nor target/debug/libadvlock.so (rebuilt since?)"
    for prof in ("release", "debug"):
        if so and so == _sha(f"{REPO}/target/{prof}/libadvlock.so"):
            build = f"matches target/{prof}/libadvlock.so"
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src", "sql", "Cargo.toml"],
                           capture_output=True, text=True).stdout.strip()
    return [
        ("date (UTC)", dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")),
        ("CPU", f"{cpu}, {os.cpu_count()} cores visible (server, pgbench and harness share them)"),
        ("memory", mem),
        ("OS / kernel", f"{osname} / {platform.release()}"),
        ("PostgreSQL", version),
        ("advlock", f"{extv}, commit {commit}{' + uncommitted changes in src/sql' if dirty else ''}"),
        ("build profile", f"{ctx.profile}; advlock.so {build} (sha256 {so[:12] if so else '?'}), copied at start "
                          "and pinned: the bench database's C functions load that copy, so a reinstall elsewhere "
                          "during the run cannot mix builds"),
        ("server settings", ", ".join(f"{k}={v}" for k, v in settings)
         + "; TCP over 127.0.0.1 for every client"),
        ("mode", "QUICK (tiny sizes; targets reported, not meaningful)" if ctx.quick else "full"),
    ]


def verdict(ctx: Ctx, target) -> str:
    """PASS/FAIL for a full run; none in quick mode, whose tiny sizes measure nothing."""
    if ctx.quick:
        return "— (smoke run)"
    return "**PASS**" if target["ok"] else "**FAIL**"


def write_report(ctx: Ctx, facts, sections, targets, errors, elapsed: float, nice: int = 0) -> str:
    ok_all = all(t["ok"] for t in targets)
    head = [
        "# advlock benchmark report",
        "",
        f"Generated by `bench/run.sh{' --quick' if ctx.quick else ''}{f' --nice {nice}' if nice else ''}` "
        f"in {elapsed:.0f} s. "
        "**The claims are ratios measured side by side in this one run on one server** (patterns interleaved, "
        "repeated, medians); absolute times are this machine's and are shown only to make the ratios checkable.",
        "",
    ]
    if ctx.quick:
        head += ["> **Quick mode (smoke run)**: sizes are far too small for the numbers to mean anything; this "
                 "run only proves the harness works end to end, so no target gets a verdict.", ""]
    head += ["## Machine and setup", "", md_table(["", ""], [[k, v] for k, v in facts], align="ll"), ""]
    head += ["## Targets", "",
             md_table(["case", "target", "measured", "result", "notes"],
                      [[t["case"], t["target"], t["measured"], verdict(ctx, t), "" if ctx.quick else t["note"]]
                       for t in targets], align="lllcl"), "",
             ("Quick mode: no verdicts." if ctx.quick else
              f"{sum(t['ok'] for t in targets)} of {len(targets)} targets pass"
              + ("." if ok_all else f"; misses: {', '.join(t['case'] + ': ' + t['target'] for t in targets if not t['ok'])}.")),
             ""]
    if errors:
        head += ["## Harness errors", ""] + [f"- case {c}: `{e}`" for c, e in errors] + [""]
    body = []
    for (num, title, _), md in zip(CASES, sections):
        body += [f"## {num}. {title}", "", md or "_not run_", ""]
    body += [
        "## Method notes",
        "",
        "- Everything runs on one throwaway PostgreSQL 17 instance started by `bench/run.sh` "
        "(`pg_test/instance.sh`), stopped on exit; raw numbers are in `results.json` next to this report.",
        "- Compared patterns are run in the same rounds with rotated order; ratios are ratios of medians.",
        "- Server-side timestamps (`clock_timestamp()`) are used wherever two sessions' times are compared, "
        "so there is one clock.",
        "- Any harness failure (a case raising, a sanity check failing) makes `bench/run.sh` exit non-zero; "
        "missed targets do not.",
        "",
    ]
    path = f"{ctx.out}/REPORT.md"
    with open(path, "w") as f:
        f.write("\n".join(head + body))
    return path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dbname", default="bench")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--pgbin", required=True)
    ap.add_argument("--profile", default="unknown")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cases", default="")
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--lib", required=True, help="the pinned copy of advlock.so the bench database uses")
    a = ap.parse_args()
    ctx = Ctx(a.port, a.dbname, a.out, a.work, a.pgbin, a.quick, a.profile, a.lib)
    wanted = set(a.cases.split(",")) if a.cases else {c[0] for c in CASES}
    started = time.perf_counter()
    os.makedirs(ctx.out, exist_ok=True)
    facts = machine_facts(ctx)
    load_start = os.getloadavg()
    results, sections, targets, errors = {}, [], [], []
    for num, title, mod in CASES:
        if num not in wanted:
            sections.append(None)
            continue
        log(f"case {num}: {title}")
        t = time.perf_counter()
        try:
            res = mod.run(ctx)
            res["elapsed_s"] = time.perf_counter() - t
            results[num] = res
            md, tg = mod.render(res, ctx)
            sections.append(md + f"\n_Case time: {res['elapsed_s']:.0f} s._\n")
            targets += tg
        except Exception as e:  # the harness broke: report it, go on with the other cases, exit 1
            traceback.print_exc()
            errors.append((num, f"{type(e).__name__}: {e}".replace("\n", " ")[:500]))
            sections.append(f"**Harness error:** `{type(e).__name__}: {e}`")
        log(f"case {num} done in {time.perf_counter() - t:.1f} s")
    with open(f"{ctx.out}/results.json", "w") as f:
        json.dump({"facts": facts, "quick": ctx.quick, "results": results, "targets": targets}, f, indent=1,
                  default=str)
    load_end = os.getloadavg()
    facts.append(("machine load", "1-min load average {:.2f} at start, {:.2f} at end (other work on the machine "
                  "competes for the same cores); ".format(load_start[0], load_end[0])
                  + (f"server, pgbench and harness ran at nice {a.nice}" if a.nice else "no renice")))
    path = write_report(ctx, facts, sections, targets, errors, time.perf_counter() - started, a.nice)
    if ctx.quick:
        log(f"quick mode (smoke run): {len(targets)} targets measured at tiny sizes, no verdicts")
    else:
        for t in targets:
            log(f"{'PASS' if t['ok'] else 'FAIL'}  [{t['case']}] {t['target']}: {t['measured']}")
    log(f"report: {path}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
