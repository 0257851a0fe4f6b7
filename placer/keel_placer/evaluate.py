"""`keel-place eval`: every algorithm at t_min = delta x base rate (Lemur §5.1)."""

from __future__ import annotations

from dataclasses import replace
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
                               "seconds": round(res.seconds, 6),
                               **({} if res.feasible else {"reason": res.reason})}
        rows.append(row)
    return {"chains": [g.name for g in problem.chains],
            "base_rate_gbps": {g.name: round(problem.base_rate(c), 6) for c, g in enumerate(problem.chains)},
            "rows": rows, "checks": checks(rows)}


def checks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 4's done-when figures over an eval table."""
    out: dict[str, Any] = {}
    if not rows or "heuristic" not in rows[0]["algos"]:
        return out
    h = [r["algos"]["heuristic"] for r in rows]
    out["heuristic_max_seconds"] = max(x["seconds"] for x in h)
    if "optimal" in rows[0]["algos"]:
        o = [r["algos"]["optimal"] for r in rows]
        out["optimal_max_seconds"] = max(x["seconds"] for x in o)
        same = sum(1 for a, b in zip(h, o)
                   if a["feasible"] == b["feasible"]
                   and (not a["feasible"] or abs(a["marginal_gbps"] - b["marginal_gbps"]) <= 1e-6 * max(1, b["marginal_gbps"])))
        out["heuristic_equals_optimal_fraction"] = same / len(rows)
        out["optimal_ge_heuristic"] = all(not a["feasible"] or (b["feasible"] and b["marginal_gbps"] >= a["marginal_gbps"] - 1e-6)
                                          for a, b in zip(h, o))
    base = [n for n in rows[0]["algos"] if n not in ("heuristic", "optimal")]
    out["heuristic_feasible_wherever_a_baseline_is"] = all(
        r["algos"]["heuristic"]["feasible"] or not any(r["algos"][b]["feasible"] for b in base) for r in rows)
    return out
