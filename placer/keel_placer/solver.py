"""A small model builder over HiGHS (highspy): columns, sparse rows, solve, values."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import highspy
import numpy as np

INF = highspy.kHighsInf


@dataclass
class LinearModel:
    """A maximisation LP/MILP built column by column and row by row."""

    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    rows: list[tuple[float, float, dict[int, float]]] = field(default_factory=list)

    def var(self, lb: float = 0.0, ub: float = INF, cost: float = 0.0, integer: bool = False) -> int:
        self.lb.append(lb)
        self.ub.append(INF if math.isinf(ub) else ub)
        self.cost.append(cost)
        self.integer.append(integer)
        return len(self.lb) - 1

    def row(self, coefs: dict[int, float], lb: float = -INF, ub: float = INF) -> None:
        if coefs:
            self.rows.append((lb, INF if math.isinf(ub) else ub, coefs))

    def solve(self, time_limit: float | None = None, mip_gap: float = 1e-7) -> "Solution":
        """Maximise with HiGHS; returns the status and (if optimal) the column values."""
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        if time_limit is not None:
            h.setOptionValue("time_limit", float(time_limit))
        if any(self.integer):
            h.setOptionValue("mip_rel_gap", mip_gap)
            h.setOptionValue("mip_abs_gap", 1e-9)
        lp = highspy.HighsLp()
        n = len(self.lb)
        lp.num_col_ = n
        lp.num_row_ = len(self.rows)
        lp.col_cost_ = np.array(self.cost, dtype=np.float64)
        lp.col_lower_ = np.array(self.lb, dtype=np.float64)
        lp.col_upper_ = np.array(self.ub, dtype=np.float64)
        lp.row_lower_ = np.array([r[0] for r in self.rows], dtype=np.float64)
        lp.row_upper_ = np.array([r[1] for r in self.rows], dtype=np.float64)
        lp.sense_ = highspy.ObjSense.kMaximize
        starts, index, value = [0], [], []
        for _, _, coefs in self.rows:
            for j, v in coefs.items():
                index.append(j)
                value.append(v)
            starts.append(len(index))
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(value, dtype=np.float64)
        if any(self.integer):
            lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                               for i in self.integer]
        h.passModel(lp)
        h.run()
        status = h.getModelStatus()
        optimal = status == highspy.HighsModelStatus.kOptimal
        values: list[float] = []
        if optimal or (status == highspy.HighsModelStatus.kTimeLimit and h.getInfo().primal_solution_status == 2):
            values = list(h.getSolution().col_value)
        return Solution(h.modelStatusToString(status), optimal, values,
                        h.getInfo().objective_function_value if values else -math.inf)


@dataclass
class Solution:
    status: str
    optimal: bool
    values: list[float]
    objective: float
