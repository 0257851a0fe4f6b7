# SPDX-License-Identifier: Apache-2.0
"""bench/scenarios/random_rack.py: racks drawn from a seed (issue 33 item 3)."""
import subprocess
import sys

import yaml

from keelenv import ROOT

SCRIPT = ROOT / "bench" / "scenarios" / "random_rack.py"


def draw(seed):
    return subprocess.run([sys.executable, str(SCRIPT), "--seed", str(seed)], capture_output=True, text=True,
                          check=True, timeout=30).stdout


def test_the_same_seed_draws_the_same_file_and_the_committed_ones_are_drawn():
    assert draw(5) == draw(5)
    assert draw(5) != draw(6)
    for seed in (11, 12, 13):
        assert (ROOT / "bench" / "scenarios" / f"random-{seed}.yaml").read_text() == draw(seed), \
            f"random-{seed}.yaml is not what random_rack.py --seed {seed} draws"


def test_drawn_racks_stay_in_the_issue_ranges():
    for seed in range(40):
        sc = yaml.safe_load(draw(seed))
        assert sc["together"] and sc["seed"] == seed and 3 <= len(sc["chains"]) <= 5
        for c in sc["chains"]:
            assert 1 <= len(c["nfs"]) <= 5 and 30 <= c["slo_us"] <= 500
            assert 64 <= c["packets"]["median_bytes"] <= 1500
            assert c["phases"][0]["kind"] == "ramp" and c["phases"][0]["gbps"] > 0
            assert sum(p["duration_s"] for p in c["phases"]) <= 180


def test_a_bad_seed_is_refused_with_the_reason():
    r = subprocess.run([sys.executable, str(SCRIPT), "--seed", "-1"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "--seed" in r.stderr
