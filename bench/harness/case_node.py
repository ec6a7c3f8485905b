"""Case 12: the Node client's overhead (issue #32 item 4).

An uncontended lock-and-commit through `withLock(client, ns, id, {timeoutMs}, fn)` (node-postgres
Client; and postgres.js `sql`) against the same SQL sent by hand through the same driver on the
same kind of connection: `BEGIN; SELECT advlock_lock_with_timeout(...); COMMIT` (postgres.js:
inside `sql.begin`). One node process (clients/node/bench/lock-commit.mjs), one connection per
pattern, the patterns alternating operation by operation in a new random order each time (a burst
of other work on the machine lands on all alike, and no pattern always follows an operation on its
own backend, as a fixed rotation on shared connections did); per round, each pattern's mean microseconds per lock-and-commit; the
ratio is the median of the rounds' ratios. Target: the client costs at most 1.05x the
hand-written SQL (node-postgres).
"""
from __future__ import annotations

import json
import os
import subprocess

from .common import Ctx, HarnessError, md_table, median, target

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE = os.path.join(REPO, "clients", "node")
PAIRS = [("pg: withLock", "pg: by hand"), ("postgres.js: withLock", "postgres.js: by hand")]


def run(ctx: Ctx) -> dict:
    # npm ci (cached) and tsc: the same build run_tests.sh makes (skipped when dist/ is newer than
    # every source, as after clients/node/run_tests.sh in the test command).
    src = [os.path.join(NODE, "src", f) for f in os.listdir(os.path.join(NODE, "src"))]
    dist = os.path.join(NODE, "dist", "index.js")
    fresh = os.path.exists(dist) and os.path.exists(os.path.join(NODE, "node_modules", "pg")) and \
        all(os.path.getmtime(f) <= os.path.getmtime(dist) for f in src)
    build = subprocess.CompletedProcess([], 0, "", "") if fresh else subprocess.run([os.path.join(NODE, "build.sh"), "--package"], capture_output=True, text=True)
    if build.returncode != 0:
        raise HarnessError(f"clients/node/build.sh failed: {(build.stdout + build.stderr)[-1500:]}")
    url = f"postgresql://postgres@127.0.0.1:{ctx.port}/{ctx.dbname}"
    rounds, per = ctx.size(9, 1), ctx.size(1000, 50)
    out = subprocess.run(["node", os.path.join(NODE, "bench", "lock-commit.mjs"), url, str(rounds), str(per)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise HarnessError(f"lock-commit.mjs failed: {out.stderr[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    us = {name: median(v) for name, v in res["us"].items()}
    rows, targets = [], []
    for client, hand in PAIRS:
        ratio = median([c / h for c, h in zip(res["us"][client], res["us"][hand])])
        rows.append([client.split(":")[0], f"{us[client]:.1f}", f"{us[hand]:.1f}", f"{ratio:.3f}×"])
        if client.startswith("pg:"):
            targets.append(target("12", "the Node client's uncontended lock-and-commit costs ≤ 1.05× the same SQL by "
                                        "hand through the same driver (node-postgres)",
                                  f"{ratio:.3f}× ({us[hand]:.1f} → {us[client]:.1f} µs)", ratio <= 1.05,
                                  value=ratio))
    md = "\n".join([
        f"`withLock(db, 'bench', i, {{timeoutMs: 1000}}, fn)` vs `BEGIN; SELECT advlock_lock_with_timeout(...); COMMIT` "
        f"by hand, one connection per pattern, {res['rounds']} rounds of {res['per']} lock-and-commits per pattern, "
        "alternating operation by operation in a random order; µs: median of the rounds' means; ratio: median of the rounds' ratios "
        "(the node process and the server share the machine).",
        "",
        md_table(["driver", "withLock µs", "by hand µs", "ratio"], rows, align="lrrr"),
    ])
    return md, targets
