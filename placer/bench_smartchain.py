"""Write bench/results/smartchain_eval.json: SmartChain's simulations (SmartChain §V-C, V-D).

Element graphs of three shapes (our reading of the paper's Fig. 7, which the text does not
spell out): linear (7 elements, as §V-E says of topology 1), two-branch (a classifier,
two arms of 3, a merge element: 8) and nested (a classifier whose first arm holds another
two-arm branch: 10). Branch points are Header Classifiers; every other element is drawn
uniformly from Table I (the paper draws by enterprise-network ratios it does not list).
Between 5 and 20 random action dependencies join element pairs on a common path; 1000
trials per point. theta^est = 1 Gbps, the SmartNIC whole (C2 <= 1), the CPU 6 cores (one
Xeon E5-2620 v2 of the paper's testbed), t_trans = 26 us. A draw whose ILP is infeasible is
drawn again. The strawmen fill the SmartNIC without looking at the CPU's capacity; a strawman
placement that leaves the CPU over its capacity is infeasible and is credited with no benefit
(the operator keeps the all-CPU graph), as in the sensitivity study below.

Rows (schema of issue 17): {"rows": [{"topology", "action_deps", "benefit_us":
{"smartchain", "sequential", "suitability-greedy"}, "infeasible_pct": {"sequential",
"suitability-greedy"}, "solve_ms_p90"}]}; benefit_us is the mean latency saved against the
all-CPU graph (0 for an infeasible placement), infeasible_pct the share of trials a strawman
left over capacity. --extra FILE also writes the gains in per
cent, the sensitivity to +-50 % suitability error and to +-50 % capacity error with
push-aside migration on overload (§V-E: optimality ratio, eq. 10), the solve time of 1-10
copies of the two-branch graph placed together (§V-D), and of 1-10 copies on 1-10 servers
(§V-D, Fig. 9(b): "10 graphs and 10 servers ... approximately 1s").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

from keel_placer import smartchain as sc
from keel_placer.model import EGRESS, INGRESS

HERE = Path(__file__).resolve().parent
KINDS = list(sc.TABLE_I)
CPU_CORES = 6.0
RATE_GBPS = 1.0
DEPS = [5, 10, 15, 20]
PAPER = {
    "benefit_gain_max_pct_vs_strawmen": 58,
    "benefit_gain_max_us": 320,
    "solve_seconds_most_cases": 0.5,
    "solve_seconds_10_graphs_10_servers": 1.0,
    "optimality_ratio_suitability_error": ">= 0.99",
    "optimality_ratio_capacity_error": "about 0.90 on average (strawmen 0.50-0.65), with push-aside migration",
}


def shape(topology: str) -> tuple[int, list[tuple[int, int]], list[int]]:
    """Node count, edges and branch points of a topology."""
    if topology == "linear":
        n = 7
        return n, [(INGRESS, 0)] + [(i, i + 1) for i in range(n - 1)] + [(n - 1, EGRESS)], []
    if topology == "two-branch":
        e = [(INGRESS, 0), (0, 1), (1, 2), (2, 3), (0, 4), (4, 5), (5, 6), (3, 7), (6, 7), (7, EGRESS)]
        return 8, e, [0]
    if topology == "nested":
        e = [(INGRESS, 0), (0, 1), (1, 2), (2, 3), (1, 4), (4, 5), (3, 6), (5, 6),
             (0, 7), (7, 8), (6, 9), (8, 9), (9, EGRESS)]
        return 10, e, [0, 1]
    raise ValueError(topology)


TOPOLOGIES = ["linear", "two-branch", "nested"]


def draw(rng: random.Random, topology: str, n_deps: int) -> tuple[sc.Graph, list[sc.Dependency]]:
    n, edges, branch_points = shape(topology)
    kinds = ["HeaderClassifier" if i in branch_points else rng.choice(KINDS) for i in range(n)]
    g = sc.Graph([f"{k}#{i}" for i, k in enumerate(kinds)], [sc.TABLE_I[k] for k in kinds], edges,
                 rate_gbps=[RATE_GBPS])
    pairs = [(i, j) for i in range(n) for j in sorted(x for x in g.reach(i) if x >= 0)]
    chosen = rng.sample(pairs, min(n_deps, len(pairs)))
    return g, sc.branch_dependencies(g) + [sc.Dependency(i, j, "action") for i, j in chosen]


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[max(0, -(-9 * len(s) // 10) - 1)]


def main_rows(trials: int, seed: int) -> tuple[list[dict], dict]:
    rows, gains = [], {}
    for topo in TOPOLOGIES:
        for n_deps in DEPS:
            rng = random.Random(f"{seed}/{topo}/{n_deps}")
            sums = {a: 0.0 for a in sc.ALGOS}
            solve_ms, redraws, rel = [], 0, {a: [] for a in sc.ALGOS[1:]}
            infeasible = {a: 0 for a in sc.ALGOS[1:]}
            done = 0
            while done < trials:
                g, deps = draw(rng, topo, n_deps)
                best = sc.solve_ilp(g, deps, cpu_cores=CPU_CORES)
                if not best.feasible:
                    redraws += 1
                    continue
                done += 1
                solve_ms.append(best.seconds * 1e3)
                sums["smartchain"] += best.benefit_us
                for a in sc.ALGOS[1:]:
                    r = sc.place(g, a, cpu_cores=CPU_CORES)
                    benefit = r.benefit_us if r.feasible else 0.0
                    infeasible[a] += not r.feasible
                    sums[a] += benefit
                    rel[a].append(best.benefit_us - benefit)
            mean = {a: round(v / trials, 3) for a, v in sums.items()}
            rows.append({"topology": topo, "action_deps": n_deps, "benefit_us": mean,
                         "infeasible_pct": {a: round(100 * n / trials, 1) for a, n in infeasible.items()},
                         "solve_ms_p90": round(p90(solve_ms), 3)})
            gains[f"{topo}/{n_deps}"] = {
                "gain_pct_vs": {a: round(100 * (mean["smartchain"] - mean[a]) / abs(mean[a]), 1)
                                for a in sc.ALGOS[1:]},
                "max_gain_us_vs": {a: round(max(rel[a]), 1) for a in sc.ALGOS[1:]},
                "redrawn_infeasible": redraws}
            print(f"{topo:10} deps {n_deps:2}: {mean}  p90 {rows[-1]['solve_ms_p90']} ms", flush=True)
    return rows, gains


def sensitivity(trials: int, seed: int) -> dict:
    """§V-E: one random element's suitability is measured with an error; the placement made
    with it is scored with the true values, over the true optimum (eq. 10)."""
    out = {}
    rng = random.Random(f"{seed}/sensitivity")
    for err in (-0.5, -0.25, -0.1, 0.1, 0.25, 0.5):
        ratios = {a: [] for a in sc.ALGOS}
        while len(ratios["smartchain"]) < trials:
            g, deps, opt = draw_solvable(rng)
            k = rng.randrange(len(g.names))
            true = g.kinds[k]
            measured = true.suitability * (1 + err)
            wrong = dataclasses.replace(g, kinds=list(g.kinds))
            wrong.kinds[k] = dataclasses.replace(true, t_nic_us=true.t_cpu_us - measured)
            for a in sc.ALGOS:
                r = sc.place(wrong, a, deps, cpu_cores=CPU_CORES)
                q, _ = sc.score(g, r.positions, r.order, sc.T_TRANS_US)
                ratios[a].append(q / opt.benefit_us)
        out[f"{err:+.0%}"] = {a: {"mean": round(sum(v) / len(v), 4), "min": round(min(v), 4)}
                              for a, v in ratios.items()}
    return out


def draw_solvable(rng: random.Random):
    """A linear graph (10 action dependencies) whose optimum gains something: (graph, deps,
    optimum), drawn again until one does."""
    while True:
        g, deps = draw(rng, "linear", 10)
        opt = sc.solve_ilp(g, deps, cpu_cores=CPU_CORES)
        if opt.feasible and opt.benefit_us > 0:
            return g, deps, opt


def sensitivity_capacity(trials: int, seed: int) -> dict:
    """§V-E, capacity: one random element of topology 1 (linear, 7 elements) has one of its
    capacities, theta^C or theta^S (chosen at random), measured with an error (+5 %: the
    true value is the measured one / 1.05). Each algorithm places with the measured values;
    where the true capacities are then overloaded, push-aside migration repairs the placement
    (smartchain.push_aside, after CoCo [14] as the paper does), and it is scored with the true
    values over the true optimum (eq. 10). A placement that cannot be repaired, or an ILP
    that the measured values make infeasible, counts 0: the operator keeps the all-CPU graph,
    the zero of the benefit scale. Per error: mean, min and max ratio (Fig. 10's average,
    minimal and maximal), and the per cent of trials that migrated and that failed."""
    out = {}
    rng = random.Random(f"{seed}/sensitivity-capacity")
    for err in (-0.5, -0.25, -0.1, 0.1, 0.25, 0.5):
        ratios: dict[str, list[float]] = {a: [] for a in sc.ALGOS}
        migrated = {a: 0 for a in sc.ALGOS}
        failed = {a: 0 for a in sc.ALGOS}
        while len(ratios["smartchain"]) < trials:
            g, deps, opt = draw_solvable(rng)
            k = rng.randrange(len(g.names))
            key = rng.choice(("cap_cpu_gbps", "cap_nic_gbps"))
            true = g.kinds[k]
            wrong = dataclasses.replace(g, kinds=list(g.kinds))
            wrong.kinds[k] = dataclasses.replace(true, **{key: getattr(true, key) * (1 + err)})
            for a in sc.ALGOS:
                r = sc.place(wrong, a, deps, cpu_cores=CPU_CORES)
                if not r.positions:
                    failed[a] += 1
                    ratios[a].append(0.0)
                    continue
                fixed = sc.push_aside(g, r, cpu_cores=CPU_CORES)
                migrated[a] += fixed.migrations > 0
                failed[a] += not fixed.feasible
                ratios[a].append(fixed.benefit_us / opt.benefit_us if fixed.feasible else 0.0)
        out[f"{err:+.0%}"] = {a: {"mean": round(sum(v) / len(v), 4), "min": round(min(v), 4),
                                  "max": round(max(v), 4),
                                  "migrated_pct": round(100 * migrated[a] / len(v), 1),
                                  "failed_pct": round(100 * failed[a] / len(v), 1)}
                              for a, v in ratios.items()}
    return out


def copies(rng: random.Random, n: int) -> tuple[sc.Graph, list[sc.Dependency]]:
    """n random two-branch graphs with 10 action dependencies each, as one big element graph
    (§IV-B3: each copy its own chain, dependencies only inside a copy)."""
    g = sc.Graph([], [], [], [], [f"g{c}" for c in range(n)], [RATE_GBPS] * n)
    deps: list[sc.Dependency] = []
    for c in range(n):
        one, d1 = draw(rng, "two-branch", 10)
        base = len(g.names)
        g.names += [f"g{c}.{x}" for x in one.names]
        g.kinds += one.kinds
        g.chain += [c] * len(one.names)
        g.edges += [(a if a < 0 else a + base, b if b < 0 else b + base) for a, b in one.edges]
        deps += [sc.Dependency(d.before + base, d.after + base, d.kind) for d in d1]
    return g, deps


def scaling(seed: int) -> dict:
    """§V-D: 1-10 copies of a two-branch graph with 10 action dependencies, placed as one big
    graph (each copy its own chain) on a SmartNIC and CPU scaled with the copies."""
    rng = random.Random(f"{seed}/scaling")
    out = {}
    for n in (1, 2, 5, 10):
        times = []
        for _ in range(20):
            g, deps = copies(rng, n)
            r = sc.solve_ilp(g, deps, nic_share=float(n), cpu_cores=CPU_CORES * n)
            times.append(r.seconds * 1e3)
        out[str(n)] = {"solve_ms_p90": round(p90(times), 3), "elements": 8 * n}
    return out


def scaling_servers(seed: int, graphs: tuple[int, ...] = (1, 2, 5, 10),
                    servers: tuple[int, ...] = (1, 2, 5, 10), reps: int = 10) -> dict:
    """§V-D, Fig. 9(b): 1-10 copies of topology 2 (two-branch) placed as one big graph on
    1-10 servers, P extended to every server's three positions (solve_ilp(servers=k)); each
    server has the single-server runs' SmartNIC (C2 <= 1) and 6 CPU cores, each graph 1 Gbps.
    Per cell ("G graphs x S servers"): the solve time's p90 and median, wall clock (what the
    paper reports) and the solver process's CPU time (robust to a shared machine), the
    elements and 0-1 variables, and the share of draws that fit (10 graphs need more than
    one server's 6 cores: HiGHS then proves infeasibility, which is timed too)."""
    rng = random.Random(f"{seed}/scaling-servers")
    out = {}
    for n in graphs:
        for k in servers:
            wall, cpu, feasible = [], [], 0
            for _ in range(reps):
                g, deps = copies(rng, n)
                t0 = time.process_time()
                r = sc.solve_ilp(g, deps, cpu_cores=CPU_CORES, servers=k)
                cpu.append((time.process_time() - t0) * 1e3)
                wall.append(r.seconds * 1e3)
                feasible += r.feasible
            out[f"{n} graphs x {k} servers"] = {
                "graphs": n, "servers": k, "elements": len(g.names),
                "variables": len(g.names) * 3 * k + n,
                "solve_ms_p90": round(p90(wall), 3), "solve_ms_median": round(sorted(wall)[len(wall) // 2], 3),
                "cpu_ms_p90": round(p90(cpu), 3), "feasible_pct": round(100 * feasible / reps, 1)}
            print(f"{n:2} graphs x {k:2} servers: {out[f'{n} graphs x {k} servers']}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", metavar="FILE", default=str(HERE.parent / "bench" / "results" / "smartchain_eval.json"),
                    help="where the rows go (default bench/results/smartchain_eval.json)")
    ap.add_argument("--extra", metavar="FILE", help="also write the gains, the suitability and capacity "
                    "sensitivity and both solve-time scalings here")
    ap.add_argument("--trials", type=int, default=1000,
                    help="graphs per row (default 1000, as the paper); each sensitivity error gets "
                         "trials/5 (at least 50), each graphs x servers cell trials/100 (at least 3)")
    ap.add_argument("--seed", type=int, default=17, help="seed of every random draw (default 17)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows, gains = main_rows(args.trials, args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    if args.extra:
        extra = {"paper": PAPER, "params": {"rate_gbps": RATE_GBPS, "cpu_cores": CPU_CORES,
                                            "t_trans_us": sc.T_TRANS_US, "trials": args.trials},
                 "gains": gains, "sensitivity_suitability": sensitivity(max(50, args.trials // 5), args.seed),
                 "sensitivity_capacity": sensitivity_capacity(max(50, args.trials // 5), args.seed),
                 "scaling_graphs": scaling(args.seed),
                 "scaling_servers": scaling_servers(args.seed, reps=max(3, args.trials // 100)),
                 "seconds": round(time.perf_counter() - t0, 1)}
        Path(args.extra).write_text(json.dumps(extra, indent=1) + "\n")
        print(json.dumps({k: extra[k] for k in ("sensitivity_suitability", "sensitivity_capacity",
                                                "scaling_graphs", "scaling_servers")}, indent=1))
        print(f"wrote {args.extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
