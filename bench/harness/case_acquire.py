"""Case 2: uncontended acquire/release throughput with pgbench, advlock vs built-in idioms."""
from __future__ import annotations

import os
import random
import re
import subprocess
import time

from . import svg
from .common import Ctx, HarnessError, backend_cpu_ns, fmt_ratio, log, md_table, median, perf_md, perf_profile, target

KEY = r"\set k random(1, 1000000000000000)"  # distinct keys per client: collisions ~ never
PATTERNS = {
    "advlock xact": ("BEGIN;", "SELECT advlock_try_with_timeout(:k, 200);", "COMMIT;"),
    "built-in try xact": ("BEGIN;", "SELECT pg_try_advisory_xact_lock(:k);", "COMMIT;"),
    "client xact (SET LOCAL lock_timeout)": (
        "BEGIN;", "SET LOCAL lock_timeout = '200ms';", "SELECT pg_advisory_xact_lock(:k);", "COMMIT;"),
    "advlock session": (
        "SELECT advlock_try_with_timeout(:k, 200, scope => 'session');", "SELECT advlock_unlock(:k);"),
    "client session (SET lock_timeout)": (
        "SET lock_timeout = '200ms';", "SELECT pg_advisory_lock(:k);", "RESET lock_timeout;",
        "SELECT pg_advisory_unlock(:k);"),
}
SHORT = {  # file names / chart labels
    "advlock xact": "advlock_xact",
    "built-in try xact": "builtin_try_xact",
    "client xact (SET LOCAL lock_timeout)": "client_xact",
    "advlock session": "advlock_session",
    "client session (SET lock_timeout)": "client_session",
}


def pgbench(ctx: Ctx, script: str, clients: int, seconds: int, protocol: str, transactions: int = 0) -> float:
    """tps of one pgbench run: -T seconds, or -t transactions per client when given."""
    jobs = max(1, min(clients, os.cpu_count() or 1))
    length = ["-t", str(transactions)] if transactions else ["-T", str(seconds)]
    cmd = [f"{ctx.pgbin}/pgbench", "-n", "-h", "127.0.0.1", "-p", str(ctx.port), "-U", "postgres",
           "-M", protocol, "-c", str(clients), "-j", str(jobs), *length, "-f", script, ctx.dbname]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    if p.returncode != 0:
        raise HarnessError(f"pgbench failed ({' '.join(cmd)}):\n{p.stderr[-2000:]}")
    m = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", p.stdout, re.M)
    failed = re.search(r"^number of failed transactions: (\d+)", p.stdout, re.M)
    if not m:
        raise HarnessError(f"pgbench output without tps:\n{p.stdout[-2000:]}")
    if failed and int(failed.group(1)) != 0:
        raise HarnessError(f"pgbench reported failed transactions:\n{p.stdout[-2000:]}")
    return float(m.group(1))


def profile(ctx: Ctx, script: str, protocol: str = "prepared", seconds: float = 3.0) -> dict:
    """perf profile of the one backend serving a 1-client pgbench run of `script`."""
    cmd = [f"{ctx.pgbin}/pgbench", "-n", "-h", "127.0.0.1", "-p", str(ctx.port), "-U", "postgres",
           "-M", protocol, "-c", "1", "-T", str(int(seconds + 3)), "-f", script, ctx.dbname]
    admin = ctx.connect(app="bench-admin")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pid = None
        deadline = time.monotonic() + 10
        while pid is None and time.monotonic() < deadline:
            row = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'").fetchone()
            pid = row[0] if row else None
            time.sleep(0.05)
        if pid is None:
            raise HarnessError("pgbench backend not found in pg_stat_activity")
        prof = perf_profile(ctx, pid, lambda: time.sleep(0.1), seconds, "acquire")
        prof["runs"] = None  # pgbench drives the backend, not a loop of ours
        return prof
    finally:
        p.wait(timeout=60)
        admin.close()


def cpu_per_cycle(ctx: Ctx, cycles: int, rounds: int) -> dict:
    """Backend CPU µs per acquire/release cycle, each pattern's statements driven from psycopg
    (prepared, or parsed every time), read from the backend's CPU-time clock: the server-side
    cost without the noise of a shared machine's scheduling."""
    out = {mode: {n: [] for n in PATTERNS} for mode in ("prepared", "unprepared")}
    rnd = random.Random(7)
    conns = {mode: ctx.connect(app=f"bench-cpu-{mode}") for mode in out}
    try:
        for mode, conn in conns.items():  # warm-up: library load, plan cache
            for stmts in PATTERNS.values():
                for _ in range(20):
                    _cycle(conn, stmts, rnd.randint(1, 10**15), mode == "prepared")
        names = list(PATTERNS)
        for r in range(rounds):
            for mode, conn in conns.items():
                pid = conn.info.backend_pid
                for name in names[r % len(names):] + names[:r % len(names)]:
                    keys = [rnd.randint(1, 10**15) for _ in range(cycles)]
                    c0 = backend_cpu_ns(pid)[0]
                    for k in keys:
                        _cycle(conn, PATTERNS[name], k, mode == "prepared")
                    out[mode][name].append((backend_cpu_ns(pid)[0] - c0) / cycles / 1000)
    finally:
        for c in conns.values():
            c.close()
    return out


def _cycle(conn, stmts, key: int, prepare: bool) -> None:
    for stmt in stmts:
        if ":k" in stmt:
            conn.execute(stmt.rstrip(";").replace(":k", "%s"), (key,), prepare=prepare)
        else:
            conn.execute(stmt.rstrip(";"), prepare=prepare)


def run(ctx: Ctx) -> dict:
    clients_list = ctx.size([1, 8, 32], [1, 4])
    protocols = ["simple", "prepared"]
    seconds = ctx.size(2, 1)
    reps = ctx.size(5, 1)
    scripts = {}
    for name, stmts in PATTERNS.items():
        path = f"{ctx.work}/{SHORT[name]}.pgbench"
        with open(path, "w") as f:
            f.write(KEY + "\n" + "\n".join(stmts) + "\n")
        scripts[name] = path
    # Warm-up (library load in the first backends, catalog caches); not recorded.
    for name in PATTERNS:
        pgbench(ctx, scripts[name], 1, 0, "prepared", transactions=300)
    names = list(PATTERNS)
    tps: dict[str, dict[str, dict[str, list[float]]]] = {
        p: {str(c): {n: [] for n in names} for c in clients_list} for p in protocols}
    for rep in range(reps):
        for clients in clients_list:
            for proto in protocols:
                k = (rep + clients) % len(names)
                for name in names[k:] + names[:k]:  # rotate the order every round
                    tps[proto][str(clients)][name].append(pgbench(ctx, scripts[name], clients, seconds, proto))
            log(f"case 2: rep {rep + 1}/{reps} clients {clients}: " + ", ".join(
                f"{SHORT[n]}={tps['prepared'][str(clients)][n][-1]:.0f}" for n in names))
    cycles = ctx.size(1200, 100)
    cpu = cpu_per_cycle(ctx, cycles, ctx.size(5, 1))
    log("case 2: backend CPU µs/cycle (prepared): " + ", ".join(
        f"{SHORT[n]}={median(v):.1f}" for n, v in cpu["prepared"].items()))
    profiles = {}
    if not ctx.quick:
        for name in ("advlock xact", "built-in try xact", "advlock session"):
            profiles[name] = profile(ctx, scripts[name])
    return {"cpu_us": cpu, "cpu_cycles": cycles, "profiles": profiles, "clients": clients_list, "protocols": protocols, "seconds": seconds, "reps": reps,
            "tps": tps, "scripts": {n: KEY + "\n" + "\n".join(s) for n, s in PATTERNS.items()}}


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    names = list(PATTERNS)
    clients_list = res["clients"]
    md_parts = [f"""pgbench (`-n -T {res['seconds']} -j min(clients, cores)`), TCP over 127.0.0.1, both the **simple** and the
**prepared** (`-M prepared`) protocol; every pattern runs in the same round with the order rotated, {res['reps']}
round(s), median tps reported; a ratio is the median over rounds of A ÷ B measured in the same round (so slow
drift in machine load cancels). One pgbench transaction = one acquire + release cycle. Keys are random in
[1, 10^15], so clients never contend. pgbench and the server share the machine's cores.

Scripts (each starts with `{KEY}`):

{md_table(["pattern", "statements"], [[n, "<br>".join(f"`{s}`" for s in PATTERNS[n])] for n in names], align="ll")}
"""]
    targets = []
    checks = [
        ("advlock xact", "built-in try xact", 0.9, "advlock xact ≥ 0.9× built-in pg_try_advisory_xact_lock"),
        ("advlock xact", "client xact (SET LOCAL lock_timeout)", 1.25,
         "advlock xact ≥ 1.25× client xact pattern (SET LOCAL lock_timeout + pg_advisory_xact_lock)"),
        ("advlock session", "client session (SET lock_timeout)", 1.8,
         "advlock session ≥ 1.8× client session pattern (SET/RESET lock_timeout + lock/unlock)"),
    ]
    per_target: dict[str, list[tuple[str, float]]] = {c[3]: [] for c in checks}
    for proto in res["protocols"]:
        rows = []
        for clients in clients_list:
            t = res["tps"][proto][str(clients)]
            med = {n: median(t[n]) for n in names}
            ratios = []
            for a, b, thr, text in checks:
                per_round = [x / y for x, y in zip(t[a], t[b])]
                r = median(per_round)  # paired within each round
                per_target[text].append((f"{proto}, {clients} client{'s' if clients > 1 else ''}", r,
                                         min(per_round), max(per_round)))
                ratios.append(fmt_ratio(r) + (" ✓" if r >= thr else " ✗"))
            rows.append([str(clients)] + [f"{med[n]:,.0f}" for n in names] + ratios)
        md_parts.append(f"**{proto} protocol** — median tps\n\n" + md_table(
            ["clients"] + names + ["adv xact ÷ built-in try (≥0.9)", "adv xact ÷ client xact (≥1.25)",
                                   "adv session ÷ client session (≥1.8)"], rows))
        series = [(n, [median(res["tps"][proto][str(c)][n]) for c in clients_list]) for n in names]
        spread = [[(min(res["tps"][proto][str(c)][n]), max(res["tps"][proto][str(c)][n])) for c in clients_list]
                  for n in names]
        svg.grouped_bars(f"{ctx.out}/acquire_{proto}.svg",
                         f"Uncontended acquire + release, {proto} protocol (median tps, whiskers min–max)",
                         [f"{c} client{'s' if c > 1 else ''}" for c in clients_list], series,
                         "lock cycles per second (tps)", "pgbench clients", spread=spread)
        md_parts.append(f"![uncontended acquire, {proto} protocol](acquire_{proto}.svg)")
    for a, b, thr, text in checks:
        pts = per_target[text]
        ok = all(r >= thr for _, r, _, _ in pts)
        measured = (f"{fmt_ratio(min(p[1] for p in pts))}–{fmt_ratio(max(p[1] for p in pts))} "
                    f"(medians at {len(pts)} points)")
        note = "all points pass" if ok else "misses at: " + ", ".join(
            f"{where} {fmt_ratio(r)} (rounds {lo:.2f}–{hi:.2f})" for where, r, lo, hi in pts if r < thr)
        targets.append(target("2", text, measured, ok, note, value=min(p[1] for p in pts), better="higher"))
    cpu = res["cpu_us"]
    crow = []
    for mode in ("prepared", "unprepared"):
        med = {n: min(v) for n, v in cpu[mode].items()}
        crow.append([mode] + [f"{med[n]:.1f} ({median(cpu[mode][n]):.0f})" for n in names]
                    + [fmt_ratio(med["built-in try xact"] / med["advlock xact"]),
                       fmt_ratio(med["client xact (SET LOCAL lock_timeout)"] / med["advlock xact"]),
                       fmt_ratio(med["client session (SET lock_timeout)"] / med["advlock session"])])
    md_parts.append(
        "**Backend CPU per cycle.** The same statements driven from one psycopg connection "
        f"({len(next(iter(cpu['prepared'].values())))} round(s) of "
        f"{res.get('cpu_cycles', '')} cycles per pattern, rotated), the backend's CPU-time clock read before and "
        "after: what one acquire + release costs the server, free of the scheduling noise that dominates "
        "throughput on a shared 2-core machine. *prepared*: server-side prepared statements; *unprepared*: "
        "parsed and planned every time (extended protocol, unnamed statement). On this shared VM even CPU time is "
        "bimodal (a busy sibling vCPU roughly doubles it for a whole round), so the table shows the fastest "
        "round (median in parentheses) and the ratios use the fastest rounds. Ratios > 1 mean advlock costs "
        "the server less.\n\n"
        + md_table(["statements"] + [f"{n} µs min (median)" for n in names]
                   + ["built-in try ÷ adv xact", "client xact ÷ adv xact", "client session ÷ adv session"], crow))
    md_parts.append(analysis(res, targets))
    if res.get("profiles"):
        md_parts.append("#### Where an uncontended cycle's time goes (1 client, prepared)\n\n"
                        "Each profile samples the single backend serving pgbench; with one client the backend "
                        "spends much of its time waiting for the next message, so compare shares, not totals.")
        for name, p in res["profiles"].items():
            md_parts.append(f"**{name}**\n\n" + perf_md(p, f"pgbench's `{name}` script"))
    return "\n\n".join(md_parts) + "\n", targets


def analysis(res: dict, targets: list[dict]) -> str:
    cpu = {m: {n: min(v) for n, v in d.items()} for m, d in res["cpu_us"].items()}
    p = cpu["prepared"]
    share = {n: dict(pr.get("by_dso", [])).get("advlock.so") for n, pr in res.get("profiles", {}).items()}
    lines = ["**Reading the results.** Statements per cycle: advlock xact 3, built-in try 3, client xact 4, "
             "advlock session 2, client session 4. Every statement is a round trip over TCP plus PostgreSQL's "
             "per-statement work, so with equal per-statement cost the ceilings are ≈ 1.33× (xact vs client "
             "xact) and ≈ 2× (session vs client session); the targets 1.25× and 1.8× sit close to them. "
             f"Server CPU per cycle (prepared, fastest round): advlock xact {p['advlock xact']:.1f} µs vs built-in try "
             f"{p['built-in try xact']:.1f} µs (built-in ÷ advlock = "
             f"{p['built-in try xact'] / p['advlock xact']:.2f}), advlock session {p['advlock session']:.1f} µs "
             f"vs client session {p['client session (SET lock_timeout)']:.1f} µs."]
    if any(v is not None for v in share.values()):
        lines.append("In the perf profiles advlock.so itself is " + ", ".join(
            f"{v:.1f}% ({n})" for n, v in share.items() if v is not None)
            + " of the serving backend's CPU samples: the extension's own code is not where a cycle's time goes; "
              "round trips, parse/bind/execute and transaction start/commit are.")
    misses = [t for t in targets if t["case"] == "2" and not t["ok"]]
    if misses:
        lines.append("Where a median misses, the per-round range is given in the target table: when it straddles "
                     "the threshold, the miss is within this machine's run-to-run spread rather than a stable gap.")
    return " ".join(lines)
