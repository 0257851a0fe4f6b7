"""Write bench/results/uno_eval.json: UNO's placement ILP and migration (UNO §3.2, §5.3).

Static (UNO §5.3, Fig. 15-16): a placement graph of 9 VMs and 18 DPI NFs: traffic enters
at a SmartNIC port, passes one DPI to the first VM, then each VM sends it through two DPIs
to the next, and the last VM through one DPI out of the other port (the paper's Fig. 15
repeats a unit 7 times; its exact wiring is not in the text, this is keel's). 4 Gbps on
every edge; a DPI takes 5 x86 cores or 10 SmartNIC cores per 9 Gbps (§5.3); D = 36
SmartNIC cores; the PCIe limit T varies from 10 to 100 Gbps. "fig15-2snic" puts the two
ports on two SmartNICs of 18 cores and T/2 each.

Dynamic (§3.2.2): 48 traffic matrices of a day and a half, each chain's rate
4 Gbps x (1 + 0.5 sin(2 pi t / 24 + phase)) with its own phase plus 5 % noise, T = 40 Gbps;
and "oscillating", two matrices that alternate. Policies: always (migrate to every new
optimum), threshold (only when it saves > 1 host core) and hysteresis (> 1 core for 2
matrices in a row, or at once when the placement no longer fits; each move costs 0.5 host
cores in the target's objective, so a forced change moves few NFs).

Rows (issue 17): {"rows": [{"scenario", "host_cores_saved", "pcie_gbps", "migrations"}]}:
host cores saved against running every NF on the host, PCIe Gbps (summed over links),
both means over the matrices of a dynamic scenario, and the number of NF moves.
--extra FILE adds solve times on graphs of about 100 and 500 vertices (UNO §5.3: 0.06 s
and 1 s with CPLEX).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

from keel_placer import uno
from keel_placer.uno import Migrator, PlacementGraph, Vertex

HERE = Path(__file__).resolve().parent
R_HOST, R_NIC = 5 / 9, 10 / 9
GBPS = 4.0


def fig15(units: int = 8, nics: dict[str, tuple[float, float]] | None = None,
          two_cards: bool = False) -> tuple[PlacementGraph, list[list[tuple[str, str]]]]:
    """The placement graph and, per chain segment, the edges that carry its traffic."""
    first = "snic0"
    second = "snic1" if two_cards else first
    vs = [Vertex("eth0", "port", nic=first), Vertex("eth1", "port", nic=second), Vertex("vm0", "vm")]
    segs = [[("eth0", "dpi0"), ("dpi0", "vm0")]]
    vs.append(Vertex("dpi0", "nf", R_HOST, R_NIC))
    k = 1
    for i in range(1, units + 1):
        a, b = f"dpi{k}", f"dpi{k + 1}"
        k += 2
        vs += [Vertex(a, "nf", R_HOST, R_NIC), Vertex(b, "nf", R_HOST, R_NIC), Vertex(f"vm{i}", "vm")]
        segs.append([(f"vm{i - 1}", a), (a, b), (b, f"vm{i}")])
    last = f"dpi{k}"
    vs.append(Vertex(last, "nf", R_HOST, R_NIC))
    segs.append([(f"vm{units}", last), (last, "eth1")])
    g = PlacementGraph({v.name: v for v in vs}, nics or {first: (36.0, 40.0)})
    return g, segs


def traffic(segs, rates: list[float]) -> dict[tuple[str, str], float]:
    return {e: r for seg, r in zip(segs, rates) for e in seg}


def static_rows() -> list[dict]:
    rows = []
    for two in (False, True):
        for t in (10, 20, 40, 60, 80, 100):
            nics = {"snic0": (18.0, t / 2), "snic1": (18.0, t / 2)} if two else {"snic0": (36.0, float(t))}
            g, segs = fig15(nics=nics, two_cards=two)
            g = g.with_traffic(traffic(segs, [GBPS] * len(segs)))
            r = uno.solve(g)
            base = uno.usage(g, uno.all_host(g)).host_cores
            name = f"fig15{'-2snic' if two else ''}-T{t}"
            if not r.feasible:
                rows.append({"scenario": name, "host_cores_saved": None, "pcie_gbps": None, "migrations": 0})
            else:
                rows.append({"scenario": name, "host_cores_saved": round(base - r.usage.host_cores, 3),
                             "pcie_gbps": round(sum(r.usage.pcie_gbps.values()), 3), "migrations": 0})
            print(rows[-1], f"{r.seconds:.3f}s", flush=True)
    return rows


POLICIES = {"always": (0.0, 1, 0.0), "threshold": (1.0, 1, 0.0), "hysteresis": (1.0, 2, 0.5)}


def dynamic_rows(seed: int) -> list[dict]:
    g, segs = fig15()
    rng = random.Random(seed)
    phases = [rng.uniform(0, 2 * math.pi) for _ in segs]
    diurnal = [[GBPS * (1 + 0.5 * math.sin(2 * math.pi * t / 24 + p)) * rng.uniform(0.95, 1.05)
                for p in phases] for t in range(48)]
    a = [GBPS * (1.1 if i % 2 else 0.9) for i in range(len(segs))]
    b = [GBPS * (0.9 if i % 2 else 1.1) for i in range(len(segs))]
    scenarios = {"diurnal": diurnal, "oscillating": [a, b] * 12}
    rows = []
    for name, mats in scenarios.items():
        for pol, (thr, pat, cost) in POLICIES.items():
            m = Migrator(g, threshold=thr, patience=pat, move_cost=cost)
            saved, pcie = [], []
            for rates in mats:
                tr = traffic(segs, rates)
                where, u, _ = m.step(tr)
                gt = g.with_traffic(tr)
                saved.append(uno.usage(gt, uno.all_host(gt)).host_cores - u.host_cores)
                pcie.append(sum(u.pcie_gbps.values()))
            rows.append({"scenario": f"{name}/{pol}", "host_cores_saved": round(sum(saved) / len(saved), 3),
                         "pcie_gbps": round(sum(pcie) / len(pcie), 3), "migrations": m.migrations})
            print(rows[-1], flush=True)
    return rows


def scaling() -> dict:
    out = {}
    for units in (32, 165):
        g, segs = fig15(units=units, nics={"snic0": (36.0, 40.0)})
        g = g.with_traffic(traffic(segs, [GBPS] * len(segs)))
        r = uno.solve(g, time_limit=120)
        out[str(len(g.vertices))] = {"seconds": round(r.seconds, 3), "status": r.status}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE.parent / "bench" / "results" / "uno_eval.json"))
    ap.add_argument("--extra", metavar="FILE", help="also write solve times by graph size here")
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = static_rows() + dynamic_rows(args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    if args.extra:
        extra = {"paper": {"solve_seconds_100_vertices": 0.06, "solve_seconds_500_vertices": 1.0,
                           "offload_grows_with_T_until_snic_full_beyond_gbps": 80},
                 "solve_seconds_by_vertices": scaling(), "seconds": round(time.perf_counter() - t0, 1)}
        Path(args.extra).write_text(json.dumps(extra, indent=1) + "\n")
        print(json.dumps(extra))
        print(f"wrote {args.extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
