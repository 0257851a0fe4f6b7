#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws a keel-sim scenario from a seed (issue 33 item 3): several tenants'
chains sharing one small rack, none of them tuned to.

Each chain is a random mix of 1-5 NFs of the library (bench/results/
nf_profile.json's NFs, ACLs at 10 rules), a median packet size from 64 B to
1500 B, an SLO from 30 us to 500 us, its own flow lifetime, and its own
traffic shape: a ramp, then steady load, a flash crowd (new flows x 5-20 for
10-30 s) or a day-like swing (diurnal). The offered load is sized from the
NFs' measured cycles a packet so that the chains' steady loads together
would keep the rack 20-50 % busy at Metron's run-to-completion cost (a
chain at most 4 Mpps, to keep keel-sim's run short), with flash crowds of
2-5x the arrivals on top: a policy that loses packets or misses an SLO here
does so with cores to spare.

With --long (issue 37), the flows are long (mean 600-1200 s, as Galleon
section 7.2.2's 600 s) and the load falls during the run: a ramp, a steady
stretch, then either a fall to 1/8-1/4 of the flows or a slow day-like swing
(period 600-900 s), over 900 s. There a policy that gives a core back only
when its last flow ends holds cores long after their load is gone; one that
moves flows need not. The rack is 2 workers x 8 cores, 50-70 % busy at the
peak, shared by 2-3 chains of 2-4 of the library's heavier NFs (those over
1000 cycles a packet at 1500 B) at 1000-1500 B packets, so that each chain
spans several cores at no more than 1 Mpps (keel-sim's run time grows with
the packets).

The same seed gives the same file, byte for byte:

    bench/scenarios/random_rack.py --seed 7 > bench/scenarios/random-7.yaml
    build/bin/keel-sim run --policy keel,metron,metron-slo bench/scenarios/random-7.yaml
"""
import argparse
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# NFs keel-sim's cost table knows and a chain may hold (the copy row is not an NF).
SKIP = {"copy", "bpf"}
GHZ = 2.4
IO_CYCLES = 300  # receive, transmit and the loop a packet, roughly (chain_length.json)
MAX_PPS = 4e6    # a chain's steady packets a second at most: keel-sim's run time grows with them
LONG_MAX_PPS = 1e6  # the same for --long, whose runs are 5 times longer


def library(profile):
    """{nf: (cycles at 80 B, cycles at 1500 B)} from nf_profile.json (ACL at 10 rules)."""
    rows = json.loads(Path(profile).read_text())["rows"]
    out = {}
    for r in rows:
        if r["nf"] in SKIP or r.get("rules") not in (None, 10):
            continue
        out.setdefault(r["nf"], {})[r["pkt_bytes"]] = r["cycles_per_pkt"]
    return {nf: (v[min(v)], v[max(v)]) for nf, v in out.items() if len(v) >= 2}


def cycles_at(lib, nfs, size):
    """The chain's cycles a packet in one thread at |size| bytes (linear in size)."""
    total = IO_CYCLES
    for nf in nfs:
        lo, hi = lib[nf]
        total += lo + (hi - lo) * (size - 80) / (1500 - 80)
    return total


def draw(seed, profile, long=False):
    rng = random.Random(seed)
    lib = library(profile)
    names = sorted(lib)
    if long:
        return draw_long(rng, seed, lib)
    workers, cores = rng.choice((1, 2)), rng.choice((4, 6, 8))
    busy = rng.uniform(0.2, 0.5)  # the rack's share the chains' steady loads take, at Metron's cost
    n_chains = rng.randint(3, 5)
    chains, weights = [], [rng.uniform(0.5, 2.0) for _ in range(n_chains)]
    for i in range(n_chains):
        nfs = [rng.choice(names) for _ in range(rng.randint(1, 5))]
        size = round(math.exp(rng.uniform(math.log(64), math.log(1500))))
        chains.append({"name": f"t{i}", "nfs": nfs, "slo_us": rng.choice((30, 50, 100, 200, 300, 500)),
                       "size": size})
    duration = 180
    for c, w in zip(chains, weights):
        # Peak packets a second of this chain: its share of the busy cores.
        share = busy * workers * cores * w / sum(weights)
        pps = min(MAX_PPS, share * GHZ * 1e9 / cycles_at(lib, c["nfs"], c["size"]))
        gbps = round(pps * c["size"] * 8 / 1e9, 3)
        flows = rng.choice((50, 100, 200, 400, 800))
        shape = rng.choice(("steady", "flash", "diurnal"))
        ramp = rng.choice((10, 30, 60))
        phases = [{"kind": "ramp", "duration_s": ramp, "flows": flows, "gbps": gbps}]
        if shape == "steady":
            phases.append({"kind": "steady", "duration_s": duration - ramp})
        elif shape == "flash":
            at = rng.randint(20, 60)
            phases += [{"kind": "steady", "duration_s": at},
                       {"kind": "flash", "duration_s": rng.choice((10, 20, 30)), "arrival_x": rng.choice((2, 3, 5))},
                       {"kind": "steady", "duration_s": max(10, duration - ramp - at - 30)}]
        else:
            period = rng.choice((120, 180))
            phases.append({"kind": "diurnal", "duration_s": duration - ramp, "period_s": period,
                           "shift_s": rng.randint(0, period), "flows_min": max(10, flows // 8), "flows": flows})
        c["packets"] = {"median_bytes": c.pop("size"), "sigma": 0.25, "min_bytes": 64, "max_bytes": 1500}
        c["flows"] = {"mean_s": rng.choice((10, 30, 60, 300)), "rate_sigma": 0.3}
        c["phases"] = phases
    return rack(f"random-{seed}", seed, workers, cores, chains)


def rack(name, seed, workers, cores, chains):
    """The scenario's fields around its chains."""
    return {"name": name, "seed": seed, "together": True, "workers": workers, "cores": cores,
            "ghz": GHZ, "packets": {"median_bytes": 512, "sigma": 0.25}, "flows": {"mean_s": 60, "rate_sigma": 0.3},
            "chains": chains, "tor_install_ms": 2, "cold_start_s": 2, "stats_ms": 100, "control_ms": 1000,
            "move_pause_ms": 0.5}


def draw_long(rng, seed, lib):
    """--long: heavy chains with long flows whose load falls (see the module's comment)."""
    heavy = sorted(nf for nf, (_, hi) in lib.items() if hi > 1000)
    workers, cores, duration = 2, 8, 900
    busy = rng.uniform(0.5, 0.7)
    n_chains = rng.randint(2, 3)
    weights = [rng.uniform(0.5, 2.0) for _ in range(n_chains)]
    chains = []
    for i, w in enumerate(weights):
        nfs = [rng.choice(heavy) for _ in range(rng.randint(2, 4))]
        size = rng.randint(1000, 1500)
        share = busy * workers * cores * w / sum(weights)
        pps = min(LONG_MAX_PPS, share * GHZ * 1e9 / cycles_at(lib, nfs, size))
        c = {"name": f"t{i}", "nfs": nfs, "slo_us": rng.choice((100, 200, 300, 500))}
        c.update(long_traffic(rng, pps, size, duration))
        chains.append(c)
    return rack(f"longflow-{seed}", seed, workers, cores, chains)


def long_traffic(rng, pps, size, duration):
    """A chain's packets, flows and phases for --long: long flows, a load that falls."""
    gbps = round(pps * size * 8 / 1e9, 3)
    flows = rng.choice((200, 400, 800))
    ramp, steady = rng.choice((30, 60)), rng.choice((120, 240))
    if rng.random() < 0.5:
        low = max(10, flows // rng.choice((4, 8)))
        fall = rng.choice((60, 120))
        phases = [{"kind": "ramp", "duration_s": ramp, "flows": flows, "gbps": gbps},
                  {"kind": "steady", "duration_s": steady},
                  {"kind": "ramp", "duration_s": fall, "flows": low},
                  {"kind": "steady", "duration_s": duration - ramp - steady - fall}]
    else:
        period = rng.choice((600, 900))
        phases = [{"kind": "ramp", "duration_s": ramp, "flows": flows, "gbps": gbps},
                  {"kind": "diurnal", "duration_s": duration - ramp, "period_s": period,
                   "shift_s": period // 2, "flows_min": max(10, flows // 8), "flows": flows}]
    return {"packets": {"median_bytes": size, "sigma": 0.25, "min_bytes": 64, "max_bytes": 1500},
            "flows": {"mean_s": rng.choice((600, 900, 1200)), "rate_sigma": 0.3}, "phases": phases}


def to_yaml(sc, seed, long=False):
    """The scenario as YAML (flow style per chain field, as the project's files)."""
    def flow(v):
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {flow(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(flow(x) for x in v) + "]"
        return str(v).lower() if isinstance(v, bool) else str(v)
    how = f"--seed {seed} --long" if long else f"--seed {seed}"
    out = [f"# Drawn by bench/scenarios/random_rack.py {how}; do not edit, draw again."]
    for k in ("name", "seed", "together", "workers", "cores", "ghz", "packets", "flows"):
        out.append(f"{k}: {flow(sc[k])}")
    out.append("chains:")
    for c in sc["chains"]:
        out.append(f"  - name: {c['name']}")
        for k in ("nfs", "slo_us", "packets", "flows"):
            out.append(f"    {k}: {flow(c[k])}")
        out.append("    phases:")
        out += [f"      - {flow(p)}" for p in c["phases"]]
    for k in ("tor_install_ms", "cold_start_s", "stats_ms", "control_ms", "move_pause_ms"):
        out.append(f"{k}: {flow(sc[k])}")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True, help="the scenario's seed (also keel-sim's)")
    ap.add_argument("--long", action="store_true",
                    help="long flows (mean 600-1200 s) and a falling load over 900 s (issue 37)")
    ap.add_argument("--nf-profile", default=str(ROOT / "bench" / "results" / "nf_profile.json"))
    ap.add_argument("--out", help="write the YAML there (default: standard output)")
    args = ap.parse_args()
    if args.seed < 0:
        sys.exit("random_rack: --seed must be 0 or more")
    text = to_yaml(draw(args.seed, args.nf_profile, args.long), args.seed, args.long)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
