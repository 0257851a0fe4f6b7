"""Write bench/results/octans_eval.json: Octans' placement against its baselines (Octans §VI).

There is no PMU here, so the "true" NF models are the synthetic ones of
placer/examples/octans_machine.json (Octans' Router, Firewall, NIDS and VPN). Octans works
as the paper's Model Generator does: it fits (alpha, beta, c) per NF and side by least
squares on 3000 simulated measurements (true drop + Gaussian noise, sigma 0.005), places
with the fitted models, and every placement is then scored with the true models.

Scenarios (aggregate throughput in Mpps, means over draws):
- paper-set-1..6: Octans Fig. 8(a)'s SFC sets on its server (6 free cores on the local
  node, 12 on the remote one);
- 2node-Nsfc: N = 1..6 random chains of 3 NFs on 2 nodes x 10 cores (Fig. 9a, c), 10 draws;
- 4node-Nsfc: N = 1..4 on 4 nodes x 10 cores (Fig. 9b), 10 draws.
random is the mean of 20 random placements per draw; exhaustive (the true optimum) is
null where a draw has more than 2^16 assignments.
Schema (issue 17): {"rows": [{"scenario", "octans", "random", "locality_first",
"exhaustive"}]}. --extra FILE adds gains, optimality gap, the chance of finding the
optimum, search times and the fit's errors.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from keel_placer import octans as o

HERE = Path(__file__).resolve().parent
PAPER_SETS = [
    [["router", "firewall", "nids"], ["router", "nids"], ["vpn", "firewall"]],
    [["router", "firewall", "vpn"], ["router", "firewall"], ["firewall", "nids"]],
    [["router", "firewall", "nids"], ["router", "firewall", "vpn"], ["nids", "firewall"]],
    [["router", "firewall", "nids"], ["firewall", "nids", "vpn"], ["firewall", "router"]],
    [["router", "firewall", "nids"], ["router", "firewall", "vpn"], ["firewall", "nids", "vpn"]],
    [["router", "firewall", "nids", "vpn"], ["router", "firewall", "nids"], ["nids", "router"]],
]
PAPER = {"gain_vs_node_first_pct": {"mean": 26.7, "range": [6.2, 45.1]},
         "gain_vs_node_balancing_pct": {"mean": 51.8, "range": [37.4, 66.3]},
         "optimality_gap_pct": [1.2, 3.5], "chance_optimal_pct": [58, 70],
         "search_seconds_2node_18nfs": 0.017, "search_seconds_4node_worst": 5.3}
RANDOM_DRAWS = 20


def fitted(truth: dict[str, o.NFModel], rng: random.Random) -> tuple[dict[str, o.NFModel], dict]:
    samples = o.synthetic_samples(truth, 2, 3000, rng, noise=0.005)
    got = o.fit(samples, {k: m.stalls for k, m in truth.items()})
    models, err = {}, {}
    for k, m in truth.items():
        models[k] = o.NFModel(k, m.stalls, m.ideal_local, m.ideal_remote, got[k][o.LOCAL], got[k][o.REMOTE])
        err[k] = {side: [round(a - b, 4) for a, b in zip(got[k][side], m.params(side))]
                  for side in (o.LOCAL, o.REMOTE)}
    return models, err


def run_case(chains: list[o.Chain], machine: o.Machine, truth, models, rng: random.Random) -> dict:
    score = lambda a: o.predict(chains, a, truth).total  # noqa: E731
    oc = o.octans(chains, machine, models)
    ex = o.exhaustive(chains, machine, truth)
    rnd = [score(o.random_placement(chains, machine, truth, rng).assign) for _ in range(RANDOM_DRAWS)]
    return {"octans": score(oc.assign), "octans_seconds": oc.seconds,
            "random": sum(rnd) / len(rnd),
            "locality_first": score(o.locality_first(chains, machine, truth).assign),
            "exhaustive": None if ex is None else ex.prediction.total,
            "exhaustive_seconds": None if ex is None else ex.seconds}


def summarize(name: str, cases: list[dict]) -> tuple[dict, dict]:
    mean = lambda k: sum(c[k] for c in cases) / len(cases)  # noqa: E731
    has_ex = all(c["exhaustive"] is not None for c in cases)
    row = {"scenario": name, "octans": round(mean("octans"), 4), "random": round(mean("random"), 4),
           "locality_first": round(mean("locality_first"), 4),
           "exhaustive": round(mean("exhaustive"), 4) if has_ex else None}
    extra = {"draws": len(cases),
             "gain_vs_locality_first_pct": round(100 * (row["octans"] / row["locality_first"] - 1), 2),
             "gain_vs_random_pct": round(100 * (row["octans"] / row["random"] - 1), 2),
             "octans_seconds_max": round(max(c["octans_seconds"] for c in cases), 4)}
    if has_ex:
        gaps = [(c["exhaustive"] - c["octans"]) / c["exhaustive"] for c in cases]
        extra.update({"optimality_gap_pct_mean": round(100 * sum(gaps) / len(gaps), 2),
                      "optimality_gap_pct_max": round(100 * max(gaps), 2),
                      "found_optimum_pct": round(100 * sum(g < 1e-6 for g in gaps) / len(gaps), 1),
                      "exhaustive_seconds_max": round(max(c["exhaustive_seconds"] for c in cases), 3)})
    return row, extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE.parent / "bench" / "results" / "octans_eval.json"))
    ap.add_argument("--extra", metavar="FILE", help="also write gains, gaps and fit errors here")
    ap.add_argument("--draws", type=int, default=10, help="random chain sets per scenario (default 10)")
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    t0 = time.perf_counter()
    paper_machine, truth = o.load_machine(str(HERE / "examples" / "octans_machine.json"))
    rng = random.Random(args.seed)
    models, fit_err = fitted(truth, rng)
    rows, extras = [], {}

    def add(name: str, cases: list[dict]) -> None:
        row, extra = summarize(name, cases)
        rows.append(row)
        extras[name] = extra
        print(f"{name:12} {row}  {extra}", flush=True)

    for n, sfcs in enumerate(PAPER_SETS, 1):
        chains = [o.Chain(f"sfc{i + 1}", list(c)) for i, c in enumerate(sfcs)]
        add(f"paper-set-{n}", [run_case(chains, paper_machine, truth, models, rng)])
    kinds = sorted(truth)
    for nodes, counts in ((2, range(1, 7)), (4, range(1, 5))):
        machine = o.Machine(tuple(tuple(range(k * 10, k * 10 + 10)) for k in range(nodes)))
        for n in counts:
            cases = []
            for _ in range(args.draws):
                chains = [o.Chain(f"sfc{i + 1}", [rng.choice(kinds) for _ in range(3)]) for i in range(n)]
                cases.append(run_case(chains, machine, truth, models, rng))
            add(f"{nodes}node-{n}sfc", cases)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    if args.extra:
        Path(args.extra).write_text(json.dumps({
            "paper": PAPER, "fit_error_alpha_beta_c": fit_err, "scenarios": extras,
            "seconds": round(time.perf_counter() - t0, 1)}, indent=1) + "\n")
        print(f"wrote {args.extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
