# SPDX-License-Identifier: Apache-2.0
"""bench/migration.py's pieces that need no stack: the quantiles of its figures, and that it
writes only the "moves" part of migration.json (keel-sim migration writes "sim")."""
import json
import sys

import pytest

from keelenv import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import migration  # noqa: E402

MOVES = {"pause_us_p50": 310.5, "pause_us_p99": 1200.0, "batch100_ms_p99": 45.2, "cpu_us_per_move": 80.1,
         "lost": 0, "reordered": 0}


def test_quantile_interpolates_between_ranks():
    assert migration.quantile(0.5, [3, 1, 2]) == 2
    assert migration.quantile(0.99, [0, 100]) == pytest.approx(99)
    assert migration.quantile(0.0, [5]) == migration.quantile(1.0, [5]) == 5
    with pytest.raises(ValueError):
        migration.quantile(0.5, [])


def test_write_moves_keeps_the_sim_part(tmp_path):
    path = tmp_path / "migration.json"
    sim = [{"scenario": "longflow-21", "cores_with_moves": 5.0, "cores_without": 5.6, "metron_cores": 4.2, "loss": 0,
            "slo_misses": 0}]
    path.write_text(json.dumps({"moves": None, "sim": sim}, indent=2) + "\n")
    migration.write_moves(path, MOVES)
    got = json.loads(path.read_text())
    assert list(got) == ["moves", "sim"] and got["moves"] == MOVES and got["sim"] == sim
    assert list(got["moves"]) == ["pause_us_p50", "pause_us_p99", "batch100_ms_p99", "cpu_us_per_move", "lost", "reordered"]


def test_write_moves_starts_a_file_and_refuses_another_kind(tmp_path):
    path = tmp_path / "new" / "migration.json"
    migration.write_moves(path, MOVES)
    assert json.loads(path.read_text()) == {"moves": MOVES, "sim": []}
    for text in ("not json", "[1, 2]", '{"sim": 3}'):
        path.write_text(text)
        with pytest.raises(SystemExit, match="not a migration.json"):
            migration.write_moves(path, MOVES)
        assert path.read_text() == text  # not overwritten
