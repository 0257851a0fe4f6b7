"""`keel-place eval`: every algorithm at t_min = delta x base rate (Lemur §5.1)."""

from __future__ import annotations

from dataclasses import replace
import math
from typing import Any

from .algos import ALGOS, run
from .model import Spec
from .pattern import Problem

LEMUR_T_MAX_GBPS = 100.0  # Lemur §5.1 sets t_max to 100 Gbps in every experiment


def with_delta(problem: Problem, delta: float) -> Problem:
    """A copy of the problem whose chains have t_min = delta x base rate, t_max = 100 Gbps."""
    chains = []
    for c, g in enumerate(problem.chains):
        slo = replace(g.slo, t_min=delta * problem.base_rate(c), t_max=LEMUR_T_MAX_GBPS)
        chains.append(replace(g, slo=slo))
    return Problem(Spec(chains), problem.topo, problem.profiles)


def evaluate(problem: Problem, deltas: list[float], algos: list[str] | None = None) -> dict[str, Any]:
    """Run each algorithm at each delta; rows of marginal throughput, feasibility, seconds."""
    algos = algos or list(ALGOS)
    rows = []
    for d in deltas:
        p = with_delta(problem, d)
        row: dict[str, Any] = {"delta": d, "t_min_gbps": {g.name: round(g.slo.t_min, 6) for g in p.chains},
                               "algos": {}}
        for a in algos:
            res = run(p, a)
            row["algos"][a] = {"feasible": res.feasible, "marginal_gbps": round(res.marginal_gbps, 6),
                               "seconds": round(res.seconds, 6), **result_notes(res)}
        rows.append(row)
    return {"chains": [g.name for g in problem.chains],
            "base_rate_gbps": {g.name: round(problem.base_rate(c), 6) for c, g in enumerate(problem.chains)},
            "rows": rows, "checks": checks(rows)}


def result_notes(res) -> dict[str, Any]:
    """Why a result is infeasible, or that a feasible one is not proven optimal."""
    if not res.feasible:
        return {"reason": res.reason}
    return {"note": res.reason} if res.reason else {}


def percentile(xs: list[float], q: float) -> float:
    """The q-th percentile of xs by the nearest-rank method (0 for no values)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))] if xs else 0.0


def checks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 16's figures over an eval table: heuristic against the optimum counted only where
    the optimum is feasible, time percentiles, and feasibility against the baselines."""
    out: dict[str, Any] = {}
    if not rows or "heuristic" not in rows[0]["algos"]:
        return out
    h = [r["algos"]["heuristic"] for r in rows]
    ht = [x["seconds"] for x in h]
    out["points"] = len(rows)
    out["heuristic_seconds"] = {"p50": percentile(ht, 50), "p90": percentile(ht, 90),
                                "p99": percentile(ht, 99), "max": max(ht)}
    out["heuristic_max_seconds"] = max(ht)
    if "optimal" in rows[0]["algos"]:
        o = [r["algos"]["optimal"] for r in rows]
        ot = [x["seconds"] for x in o]
        out["optimal_seconds"] = {"p50": percentile(ot, 50), "p90": percentile(ot, 90),
                                  "p99": percentile(ot, 99), "max": max(ot)}
        out["optimal_max_seconds"] = max(ot)
        pairs = [(a, b) for a, b in zip(h, o) if b["feasible"]]
        out["optimal_feasible_points"] = len(pairs)
        within = [a["feasible"] and a["marginal_gbps"] >= 0.99 * b["marginal_gbps"] - 1e-6 for a, b in pairs]
        equal = [a["feasible"] and a["marginal_gbps"] >= b["marginal_gbps"] - 1e-6 * max(1.0, b["marginal_gbps"])
                 for a, b in pairs]
        out["heuristic_within_1pct_fraction"] = sum(within) / len(pairs) if pairs else None
        out["heuristic_equals_optimal_fraction"] = sum(equal) / len(pairs) if pairs else None
        out["heuristic_infeasible_where_optimal_feasible"] = sum(not a["feasible"] for a, _ in pairs)
        ratios = [a["marginal_gbps"] / b["marginal_gbps"] if a["feasible"] else 0.0
                  for a, b in pairs if b["marginal_gbps"] > 1e-6]
        out["heuristic_worst_ratio"] = min(ratios) if ratios else None
        out["optimal_not_proven"] = sum(1 for b in o if b.get("note"))
        out["optimal_ge_heuristic"] = all(not a["feasible"] or (b["feasible"] and b["marginal_gbps"] >= a["marginal_gbps"] - 1e-6)
                                          for a, b in zip(h, o))
    base = [n for n in rows[0]["algos"] if n not in ("heuristic", "optimal")]
    if base:
        out["heuristic_feasible_wherever_a_baseline_is"] = all(
            r["algos"]["heuristic"]["feasible"] or not any(r["algos"][b]["feasible"] for b in base) for r in rows)
        out["feasible_points"] = {a: sum(r["algos"][a]["feasible"] for r in rows) for a in rows[0]["algos"]}
    return out
