"""Case 1: key derivation throughput, advlock_key(ns, id) vs hash/digest idioms, in one query."""
from __future__ import annotations

import time

from . import svg
from .common import Ctx, check, fmt_ratio, log, md_table, median, target

# Every expression sees the same generated (ns, id) text pairs: 100 namespaces, N distinct ids.
# The planner inlines the LATERAL subquery, so each variant pays the same generation cost; the
# baseline only measures lengths of the generated strings (generation + aggregation overhead).
PATTERNS = [
    ("baseline (generation only)", "length(ns) + length(id)"),
    ("advlock_key(ns, id)", "advlock_key(ns, id)"),
    ("hashtextextended(ns||':'||id, 0)", "hashtextextended(ns || ':' || id, 0)"),
    ("md5 → bigint", "('x' || substr(md5(ns || ':' || id), 1, 16))::bit(64)::bigint"),
    ("sha256 → bigint",
     "('x' || substr(encode(sha256(convert_to(ns || ':' || id, 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint"),
]
QUERY = ("SELECT bit_xor(({expr})::bigint) FROM generate_series(1, {n}) g, "
         "LATERAL (SELECT 'ns' || (g % 100) AS ns, g::text AS id) x")


def run(ctx: Ctx) -> dict:
    n = ctx.size(1_000_000, 20_000)
    reps = ctx.size(5, 3)
    conn = ctx.connect()
    # Sanity: the function is the one being measured and is evaluated once per row.
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN VERBOSE " + QUERY.format(expr=PATTERNS[1][1], n=n)))
    check("advlock_key(" in plan, "case 1: advlock_key not in the plan")
    for _, expr in PATTERNS:  # warm-up: caches, function lookup, library load
        conn.execute(QUERY.format(expr=expr, n=min(n, 20_000))).fetchone()
    times: dict[str, list[float]] = {name: [] for name, _ in PATTERNS}
    for rep in range(reps):
        order = PATTERNS[rep % len(PATTERNS):] + PATTERNS[:rep % len(PATTERNS)]  # rotate: spread drift
        for name, expr in order:
            t = time.perf_counter()
            conn.execute(QUERY.format(expr=expr, n=n)).fetchone()
            times[name].append(time.perf_counter() - t)
    conn.close()
    log(f"case 1: {', '.join(f'{k}={median(v) * 1000:.0f}ms' for k, v in times.items())}")
    return {"n": n, "reps": reps, "times_s": times, "plan": plan}


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    n, times = res["n"], res["times_s"]
    base = median(times[PATTERNS[0][0]])
    rows, net_tput, gross_tput = [], {}, {}
    for name, expr in PATTERNS:
        m = median(times[name])
        gross_tput[name] = n / m
        if name != PATTERNS[0][0]:
            net_tput[name] = n / max(m - base, 1e-9)
    adv = "advlock_key(ns, id)"
    for name, expr in PATTERNS:
        m = median(times[name])
        net = "" if name not in net_tput else f"{(m - base) / n * 1e9:.0f}"
        rows.append([f"`{expr}`" if name != PATTERNS[0][0] else f"{name}: `{expr}`",
                     f"{m * 1000:.1f}", f"{min(times[name]) * 1000:.1f}", net,
                     "" if name not in net_tput else f"{net_tput[name] / 1e6:.2f}",
                     "" if name not in net_tput else fmt_ratio(net_tput[adv] / net_tput[name]),
                     "" if name == PATTERNS[0][0] else fmt_ratio(gross_tput[adv] / gross_tput[name])])
    table = md_table(["expression", "query median ms", "min ms", "net ns/key", "net M keys/s",
                      "advlock ÷ this (net)", "advlock ÷ this (whole query)"], rows)

    def ratio(other):
        return net_tput[adv] / net_tput[other]

    hte, md5, sha = PATTERNS[2][0], PATTERNS[3][0], PATTERNS[4][0]
    targets = [
        target("1", "advlock_key ≥ 1.0× hashtextextended throughput", fmt_ratio(ratio(hte)), ratio(hte) >= 1.0),
        target("1", "advlock_key ≥ 3× md5-based key throughput", fmt_ratio(ratio(md5)), ratio(md5) >= 3.0),
        target("1", "advlock_key ≥ 3× sha256-based key throughput", fmt_ratio(ratio(sha)), ratio(sha) >= 3.0),
    ]
    labels = [name for name, _ in PATTERNS[1:]]
    svg.hbars(f"{ctx.out}/keys_throughput.svg",
              f"Key derivation: million keys/s, net of generation ({n:,} distinct pairs)",
              labels, [net_tput[l] / 1e6 for l in labels], "million keys per second (higher is better)",
              value_fmt=lambda v: f"{v:.2f} M/s")
    md = f"""Query: `{QUERY.format(expr='<expr>', n=n)}` — {n:,} distinct `(ns, id)` pairs over 100 namespaces,
{res['reps']} repetitions per expression, run in rotated order, client-timed (the query returns one row).
The planner inlines the `LATERAL` subquery, so every expression is computed from the same generated strings;
the baseline row computes only their lengths, and **net** = median − baseline median is the cost of the
key expression itself (including the `ns || ':' || id` concatenation the idioms need and `advlock_key`
does not). Targets use net throughput; the whole-query ratio is shown for reference.

{table}

![key derivation throughput](keys_throughput.svg)
"""
    return md, targets
