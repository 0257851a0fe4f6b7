"""The placement algorithms by the names `--algo` accepts."""

from __future__ import annotations

from typing import Callable

from . import baselines, heuristic, optimal
from .model import Placement
from .pattern import Problem

ALGOS: dict[str, Callable[[Problem], Placement]] = {
    "heuristic": heuristic.place,
    "optimal": optimal.place,
    "hw-preferred": baselines.hw_preferred,
    "sw-preferred": baselines.sw_preferred,
    "min-bounce": baselines.min_bounce,
    "greedy": baselines.greedy,
}


def run(problem: Problem, algo: str) -> Placement:
    """Place the problem's chains with the named algorithm."""
    return ALGOS[algo](problem)
