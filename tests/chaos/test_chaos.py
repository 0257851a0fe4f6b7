# SPDX-License-Identifier: Apache-2.0
"""The short chaos run of make test: every part of the local stack (NF container, agent,
coopsched, ingress, torctl, gateway, Redis, ovs-vswitchd) killed once with SIGKILL under
traffic, in a seeded order, eight seconds apart (tests/chaos/chaos.py; make chaos runs the
long one). Seeded by $CHAOS_SEED (default 38), so a failure can be replayed."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chaos  # noqa: E402
from keelenv import BIN, ROOT  # noqa: E402
from keelstack import SKIP_REASON, running_stack  # noqa: E402

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)

# Faults of the data plane: their loss is bounded, not zero (see README, "Failures").
DATA_PLANE = ("nf", "coopsched", "ovs")


def test_every_part_dies_once_under_traffic_and_nothing_is_lost_for_good(tmp_path):
    seed = int(os.environ.get("CHAOS_SEED", 38))
    with running_stack():
        sys.path.insert(0, str(ROOT / "deploy" / "local"))
        import demo  # noqa: E402 - deploy/local/demo.py: the images stack.yml needs
        demo.ensure_images(demo.Faas(), BIN)
        res = chaos.run(seconds=len(chaos.COMPONENTS) * 8, interval=8, seed=seed, out=tmp_path / "chaos.json",
                        count=len(chaos.COMPONENTS))
    why = f"(seed {seed}; details in {chaos.detail_file(tmp_path / 'chaos.json')})"
    killed = {f["component"] for f in res["faults"]}
    assert killed == set(chaos.COMPONENTS), f"not every part was killed: {sorted(killed)} {why}"
    for f in res["faults"]:
        assert f["recover_ms_p99"] is not None, f"{f['component']} did not recover within 90 s {why}"
        assert f["recover_ms_p99"] < 60000, f"{f['component']} took {f['recover_ms_p99']} ms to recover {why}"
    assert not res["chains_not_ready"], f"chains lost: {res['chains_not_ready']} {why}"
    assert res["state_lost"] == 0, f"{res['state_lost']} NAT mappings changed mid-flow {why}"
    assert res["wrong_packets"] == 0, f"{res['wrong_packets']} packets delivered wrongly transformed {why}"
    assert not any(res["leaks"].values()), f"leaked: {res['leaks']} {why}"
    # Established flows lose nothing to a control-plane fault: chain3's flows live for the
    # whole run and need no new rule, so none of its packets may be lost to one.
    for f in res["faults_each"]:
        if f["component"] not in DATA_PLANE:
            assert f["lost_by_chain"]["chain3"] == 0, f"{f['component']}'s death lost {f['lost_by_chain']} {why}"
