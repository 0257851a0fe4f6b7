# SPDX-License-Identifier: Apache-2.0
"""deploy/local/server_time.py (make demo's "server time" line): two snapshots of instances'
statistics files give the run's figures, with the histograms' quantiles read as their buckets'
upper edges (keel/sojourn.h), never under the true value."""
import json
import sys

from keelenv import ROOT

sys.path.insert(0, str(ROOT / "deploy" / "local"))
import server_time  # noqa: E402

HZ = 1_000_000_000  # 1 cycle = 1 ns, so µs = cycles / 1000


def hist(values: list[int]) -> dict:
    b: dict = {}
    for v in values:
        k = v if v < 64 else ((v.bit_length() - 7) + 1) * 64 + ((v >> (v.bit_length() - 7)) & 63)
        b[k] = b.get(k, 0) + 1
    return {"unit": "tsc_cycles", "sub_bucket_bits": 6, "count": len(values), "sum": sum(values),
            "max": max(values, default=0), "buckets": sorted([k, n] for k, n in b.items())}


def files(tmp, inst, rx, batches, batch_cycles, sojourn, waits, turns, nf1):
    d = tmp / inst
    d.mkdir(exist_ok=True)
    p0 = {"position": 0, "tsc_hz": HZ, "port": {"rx_packets": rx}, "batches": batches,
          "cycles_per_batch": batch_cycles / batches if batches else 0.0, "sojourn": hist(sojourn),
          "rx_wait_bound": hist(sojourn), "handoff_wait": hist(waits[0]), "turn_busy": hist(turns[0]),
          "cycles": {"nf": 0}, "nfs": [{"nf": "acl"}]}
    p1 = {"position": 1, "tsc_hz": HZ, "handoff_wait": hist(waits[1]), "turn_busy": hist(turns[1]),
          "cycles": {"nf": nf1}, "nfs": [{"nf": "encrypt"}]}
    for k, s in enumerate((p0, p1)):
        (d / f"stats-{k}.json").write_text(json.dumps(s))


def test_the_runs_figures_are_the_growth_between_the_snapshots(tmp_path):
    files(tmp_path, "c2.0", rx=100, batches=50, batch_cycles=50 * 4000, sojourn=[9000] * 100,
          waits=([1000] * 50, [2000] * 50), turns=([4000] * 50, [3000] * 50), nf1=50 * 3000)
    before = server_time.snapshot(tmp_path)
    # the run: 100 packets in 20 batches, 10 of them slow (1 ms); its position 1 waits 5 µs
    files(tmp_path, "c2.0", rx=200, batches=70, batch_cycles=50 * 4000 + 20 * 6000,
          sojourn=[9000] * 100 + [10000] * 90 + [1_000_000] * 10,
          waits=([1000] * 70, [2000] * 50 + [5000] * 20), turns=([4000] * 50 + [6000] * 20, [3000] * 70),
          nf1=70 * 3000)
    got = server_time.breakdown(before, server_time.snapshot(tmp_path))
    c = got["c2"]
    assert (c["instances"], c["packets"], c["batches"], c["packets_per_batch"]) == (["c2.0"], 100, 20, 5.0)
    # quantiles: upper bucket edges, at most 1/64 over
    assert 10.0 <= c["sojourn_p50_us"] <= 10.2 and 1000 <= c["sojourn_p99_us"] <= 1016
    assert c["sojourn_mean_us"] == round((90 * 10000 + 10 * 1_000_000) / 100 / 1000, 1)
    p0, p1 = c["positions"]
    assert (p0["nfs"], p1["nfs"]) == (["acl"], ["encrypt"])
    assert p0["turns_with_packets"] == 20 and p0["work_per_batch_us"] == 6.0 and p0["handoff_wait_mean_us"] == 1.0
    assert 5.0 <= p1["handoff_wait_p50_us"] <= 5.1 and p1["work_per_batch_us"] == 3.0
    assert c["mean_accounted_us"] == 6.0 + 1.0 + 5.0 + 3.0


def test_an_instance_rebuilt_between_the_snapshots_counts_from_its_new_start(tmp_path):
    files(tmp_path, "c3.0", rx=1000, batches=500, batch_cycles=500 * 4000, sojourn=[9000] * 1000,
          waits=([1000] * 500, [1000] * 500), turns=([1000] * 500, [1000] * 500), nf1=1000)
    before = server_time.snapshot(tmp_path)
    files(tmp_path, "c3.0", rx=30, batches=10, batch_cycles=10 * 2000, sojourn=[3000] * 30,
          waits=([1000] * 10, [1000] * 10), turns=([1000] * 10, [1000] * 10), nf1=500)
    c = server_time.breakdown(before, server_time.snapshot(tmp_path))["c3"]
    assert (c["packets"], c["batches"], c["sojourn_mean_us"]) == (30, 10, 3.0)
    assert c["positions"][0]["work_per_batch_us"] == 2.0


def test_idle_instances_and_unreadable_files_are_left_out(tmp_path):
    files(tmp_path, "c2.0", rx=5, batches=5, batch_cycles=5000, sojourn=[1] * 5, waits=([1], [1]),
          turns=([1], [1]), nf1=1)
    (tmp_path / "c9.0").mkdir()
    (tmp_path / "c9.0" / "stats-0.json").write_text("{half")
    snap = server_time.snapshot(tmp_path)
    assert list(snap) == ["c2.0"]
    assert server_time.breakdown(snap, snap) == {}
