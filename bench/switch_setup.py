# SPDX-License-Identifier: Apache-2.0
"""A switch-only chain's new flows: released by the chain's reinject VLAN (one ToR rule per
chain) against a stage-1 rule per flow, side by side on the local stack.

Brings the local stack up (deploy/local/up.sh; taken down again at the end only if this script
started it) and deploys chain1 of stack.yml (Tunnel -> IPv4Fwd, both on the switch). In
alternating blocks keel-ingress runs with --chain-reinject on (make up's) and off, and
keel-trafgen opens chain1 flows for --seconds (--rate new flows a second, a few packets each).
Per block: the first packet's latency of its flows (keel-trafgen, source to sink: p50, p99 and
the slowest), packets lost or wrongly transformed, the flows the ingress released by the
chain's VLAN (keel_ingress_chain_reinjects_total) and the stage-1 rules keel-torctl installed
(keel_torctl_installs_total{stage="1"}). keel-ingress is restarted as make up started it at the
end.

    python bench/switch_setup.py --out bench/results/switch_setup.json [--blocks 2 --seconds 20]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import promtext
from flow_setup import ROOT, faas
from stackparts import local_stack, restart

INGRESS_METRICS = "http://127.0.0.1:9103/metrics"
TORCTL_METRICS = "http://127.0.0.1:9102/metrics"
TRAFGEN = ROOT / "build" / "bin" / "keel-trafgen"
SCENARIO = ROOT / "bench" / "scenarios" / "e2e.json"


def scenario(path: Path, seconds: float, rate: float, dport: int) -> None:
    """chain1 of the demo's scenario: `rate` new flows a second for `seconds`, each 2 s long, to
    `dport` (each block its own, so that no flow of a block finds an earlier block's rule)."""
    chains = json.loads(SCENARIO.read_text())["chains"]
    c = dict(next(c for c in chains if c["name"] == "chain1"))
    c["flow_lifetime_s"], c["dport"] = 2, dport
    c["phases"] = [{"name": "new flows", "seconds": seconds, "mbps": 0.5, "new_flows_per_s": rate}]
    path.write_text(json.dumps({"chains": [c]}))


def counts() -> tuple[float, float]:
    ing, tor = promtext.scrape(INGRESS_METRICS), promtext.scrape(TORCTL_METRICS)
    stage1 = sum(v for k, v in tor.items() if k.startswith("keel_torctl_installs_total{") and 'stage="1"' in k
                 and 'result="ok"' in k)
    return ing.get("keel_ingress_chain_reinjects_total", 0.0), stage1


def ingress_restart(mode: str) -> None:
    def ready() -> bool:
        try:
            return promtext.scrape(INGRESS_METRICS).get("keel_ingress_chains", 0) >= 1
        except OSError:
            return False
    restart("keel-ingress", ready, [] if mode == "on" else ["--chain-reinject", "off"], remove=["--chain-reinject"])


def block(mode: str, scen: Path, out: Path) -> dict:
    r0, s0 = counts()
    gen = subprocess.run([str(TRAFGEN), "--scenario", str(scen), "--out", str(out)], capture_output=True, text=True,
                         timeout=600)
    if gen.returncode != 0:
        sys.exit(f"switch_setup: keel-trafgen failed: {gen.stderr[-400:]}")
    c = json.loads(out.read_text())["chains"][0]
    r1, s1 = counts()
    worst = c.get("setup_worst") or []
    return {"mode": mode, "flows": c.get("flows"), "setup_p50_ms": round(c["setup_p50_us"] / 1e3, 3),
            "setup_p99_ms": round(c["setup_p99_us"] / 1e3, 3), "setup_max_ms": worst[0]["ms"] if worst else None,
            "lost": c.get("lost", 0), "wrong": c.get("wrong", 0), "chain_reinjects": int(r1 - r0),
            "stage1_installs": int(s1 - s0)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "switch_setup.json"))
    p.add_argument("--blocks", type=int, default=2, help="blocks per mode, alternating on, off, ...")
    p.add_argument("--seconds", type=float, default=20, help="per block")
    p.add_argument("--rate", type=float, default=5, help="new chain1 flows a second")
    a = p.parse_args()
    rows = []
    with local_stack("switch_setup"):
        faas("deploy", "-f", "stack.yml", "--filter", "chain1")
        with tempfile.TemporaryDirectory() as tmp:
            scen, out = Path(tmp) / "chain1.json", Path(tmp) / "result.json"
            for i in range(2 * a.blocks):
                mode = ("on", "off")[i % 2]
                scenario(scen, a.seconds, a.rate, 6001 + i)
                ingress_restart(mode)
                r = block(mode, scen, out)
                print(json.dumps(r), file=sys.stderr, flush=True)
                rows.append(r)
        ingress_restart("on")
    summary = {}
    for mode in ("on", "off"):
        rs = [r for r in rows if r["mode"] == mode]
        summary[mode] = {"blocks": len(rs), "flows": sum(r["flows"] or 0 for r in rs),
                         "setup_p50_ms": round(statistics.mean(r["setup_p50_ms"] for r in rs), 3),
                         "setup_p99_ms": round(statistics.mean(r["setup_p99_ms"] for r in rs), 3),
                         "setup_max_ms": max(r["setup_max_ms"] or 0 for r in rs),
                         "lost": sum(r["lost"] for r in rs), "wrong": sum(r["wrong"] for r in rs),
                         "chain_reinjects": sum(r["chain_reinjects"] for r in rs),
                         "stage1_installs": sum(r["stage1_installs"] for r in rs)}
    result = {"chain_reinject_on": summary["on"], "chain_reinject_off": summary["off"],
              "setup_p50_ratio": round(summary["on"]["setup_p50_ms"] / summary["off"]["setup_p50_ms"], 3),
              "setup_p99_ratio": round(summary["on"]["setup_p99_ms"] / summary["off"]["setup_p99_ms"], 3),
              "rows": rows, "chain": "chain1: Tunnel@switch -> IPv4Fwd@switch",
              "method": f"{a.rate:g} new flows/s for {a.seconds:g} s a block; setup_*: keel-trafgen's first "
                        "packet of each flow, source to sink; p50/p99 the mean of the blocks'"}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
