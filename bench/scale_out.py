# SPDX-License-Identifier: Apache-2.0
"""A scale-out's first packet: the agent attaching on the gateway's event, against waiting for
its next reconcile pass, side by side on the local stack.

Brings the local stack up (deploy/local/up.sh; taken down again at the end only if this script
started it) and deploys chain3 of stack.yml (ACL on the switch -> NAT in a container). Each
round waits until chain3 has no attached instance (the controller detaches an instance about a
second after its last flow ended), then opens one new chain3 flow with keel-trafgen: the
gateway attaches a pooled instance for it, and the flow's first packet waits for that attach.
Per round: the first packet's latency (keel-trafgen, source to sink) and the agent's
keel_agent_attach_delay_seconds (from the gateway's Watch event to coopsched running the
instance), and who attached it (via: event, or pass).

Modes, in alternating blocks of --rounds rounds: "event" (keel-agent as make up starts it) and
"pass" (keel-agent restarted with --attach-on-event=false: the attach waits for the reconcile
pass the event triggers, which first reads Docker, the VFs and coopsched). keel-agent is
restarted as make up started it at the end.

Then the same rounds with core 0 busy (--loops CPU-bound processes pinned to it during each
round, as under make demo's traffic), in alternating blocks: "waits" (keel-agent as make up
starts it: a reconcile pass waits for an attach on the event under way, and the agent has
two Go Ps) against "no_wait" (--pass-waits-for-attach=false and GOMAXPROCS=1: the pass the
same event triggers forks ovs-vsctl and ip while the attach's coopsched call waits for the
agent's one P).

    python bench/scale_out.py --out bench/results/scale_out.json [--rounds 6 --blocks 2]
"""
import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import promtext
from flow_setup import ROOT, deploy_chain3, faas
from stackparts import local_stack, restart, wait_until

AGENT_METRICS = "http://127.0.0.1:9101/metrics"
DELAY = "keel_agent_attach_delay_seconds"
TRAFGEN = ROOT / "build" / "bin" / "keel-trafgen"
SCENARIO = ROOT / "bench" / "scenarios" / "e2e.json"


def attached(chain: str) -> int:
    m = promtext.scrape(AGENT_METRICS)
    return sum(int(v) for k, v in m.items()
               if k.startswith("keel_agent_instance_attached{") and f'chain="{chain}"' in k)


def delays() -> dict[str, tuple[float, float]]:
    """{via: (count, sum in s)} of the agent's attach delay histogram."""
    m = promtext.scrape(AGENT_METRICS)
    out = {}
    for via in ("event", "pass"):
        out[via] = (m.get(f'{DELAY}_count{{via="{via}"}}', 0.0), m.get(f'{DELAY}_sum{{via="{via}"}}', 0.0))
    return out


def one_flow_scenario(path: Path) -> None:
    """chain3 of the demo's scenario, one flow of a few packets."""
    chains = json.loads(SCENARIO.read_text())["chains"]
    c = dict(next(c for c in chains if c["name"] == "chain3"))
    c["flow_lifetime_s"] = 0.3
    c["phases"] = [{"name": "one flow", "seconds": 0.5, "mbps": 0.05, "new_flows_per_s": 2}]
    path.write_text(json.dumps({"chains": [c]}))


def agent_restart(extra: list[str]) -> None:
    """Restarts keel-agent with make up's arguments plus extra (its instances run on)."""
    def ready() -> bool:
        try:
            return promtext.scrape(AGENT_METRICS).get("keel_agent_gateway_synced", 0) == 1
        except OSError:
            return False
    restart("keel-agent", ready, extra, remove=["--attach-on-event"])


def burn(stop) -> None:
    """A CPU-bound loop on core 0 until stop is set."""
    os.sched_setaffinity(0, {0})
    x = 0
    while not stop.is_set():
        for i in range(100000):
            x += i


def round_(scenario: Path, out: Path, loops: int = 0) -> dict:
    wait_until("chain3 still had an attached instance", 60, lambda: attached("chain3") == 0)
    time.sleep(0.5)  # the pass after the detach
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=burn, args=(stop,), daemon=True) for _ in range(loops)]
    for b in burners:
        b.start()
    try:
        if loops:
            time.sleep(0.3)
        return measure(scenario, out)
    finally:
        stop.set()
        for b in burners:
            b.join()


def measure(scenario: Path, out: Path) -> dict:
    before = delays()
    gen = subprocess.run([str(TRAFGEN), "--scenario", str(scenario), "--out", str(out)],
                         capture_output=True, text=True, timeout=60)
    if gen.returncode != 0:
        sys.exit(f"scale_out: keel-trafgen failed: {gen.stderr[-400:]}")
    r = json.loads(out.read_text())["chains"][0]
    wait_until("no attach was measured", 10, lambda: delays() != before)
    after = delays()
    via = next(v for v in after if after[v][0] > before[v][0])
    n = after[via][0] - before[via][0]
    worst = r.get("setup_worst") or []
    return {"via": via, "first_packet_ms": worst[0]["ms"] if worst else None, "flows": r.get("flows"),
            "attach_delay_ms": round((after[via][1] - before[via][1]) / n * 1e3, 3), "attaches": int(n),
            "lost": r.get("lost", 0)}


def summary(rows: list[dict]) -> dict:
    first = [r["first_packet_ms"] for r in rows if r["first_packet_ms"] is not None]
    att = [r["attach_delay_ms"] for r in rows]
    return {"rounds": len(rows), "first_packet_ms_p50": round(statistics.median(first), 3),
            "first_packet_ms_max": round(max(first), 3), "attach_delay_ms_p50": round(statistics.median(att), 3),
            "attach_delay_ms_max": round(max(att), 3)}


def blocks(a, scenario: Path, out: Path, modes: dict[str, list[str]], loops: int,
           env: dict[str, dict[str, str]] | None = None) -> list[dict]:
    """a.blocks blocks per mode of a.rounds rounds each, alternating the modes; before each block
    keel-agent is restarted with the mode's extra flags (and environment, env[mode])."""
    rows = []
    for block in range(len(modes) * a.blocks):
        mode = list(modes)[block % len(modes)]
        extra_env = (env or {}).get(mode, {})
        os.environ.update(extra_env)
        try:
            agent_restart(modes[mode])
        finally:
            for k in extra_env:
                del os.environ[k]
        for _ in range(a.rounds):
            r = {"mode": mode, **({"loops": loops} if loops else {}), **round_(scenario, out, loops)}
            print(json.dumps(r), file=sys.stderr, flush=True)
            rows.append(r)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale_out.json"))
    p.add_argument("--rounds", type=int, default=6, help="rounds per block")
    p.add_argument("--blocks", type=int, default=2, help="blocks per mode, alternating event, pass, ...")
    p.add_argument("--loops", type=int, default=4, help="CPU-bound processes on core 0 in the busy rounds")
    a = p.parse_args()
    rows = []
    with local_stack("scale_out"):
        deploy_chain3(fresh=False)
        with tempfile.TemporaryDirectory() as tmp:
            scenario, out = Path(tmp) / "one-flow.json", Path(tmp) / "result.json"
            one_flow_scenario(scenario)
            rows += blocks(a, scenario, out, {"event": [], "pass": ["--attach-on-event=false"]}, loops=0)
            # "no_wait" is the agent as it was: no wait, and one Go P (GOMAXPROCS=1).
            rows += blocks(a, scenario, out, {"waits": [], "no_wait": ["--pass-waits-for-attach=false"]},
                           loops=a.loops, env={"no_wait": {"GOMAXPROCS": "1"}})
        agent_restart([])
        wt = summary([r for r in rows if r["mode"] == "waits"])
        nw = summary([r for r in rows if r["mode"] == "no_wait"])
        ev = summary([r for r in rows if r["mode"] == "event"])
        ps = summary([r for r in rows if r["mode"] == "pass"])
        result = {"event": ev, "pass": ps,
                  "first_packet_p50_ratio": round(ev["first_packet_ms_p50"] / ps["first_packet_ms_p50"], 3),
                  "attach_delay_p50_ratio": round(ev["attach_delay_ms_p50"] / ps["attach_delay_ms_p50"], 3),
                  "busy_core0": {"loops": a.loops, "waits": wt, "no_wait": nw,
                                 "first_packet_p50_ratio": round(wt["first_packet_ms_p50"] / nw["first_packet_ms_p50"], 3),
                                 "attach_delay_p50_ratio": round(wt["attach_delay_ms_p50"] / nw["attach_delay_ms_p50"], 3)},
                  "rows": rows, "chain": "chain3: ACL@switch -> NAT@server, one new flow per round onto a "
                  "pooled instance", "method": "first_packet_ms: keel-trafgen source to sink; attach_delay_ms: "
                  "keel_agent_attach_delay_seconds (the gateway's Watch event to coopsched running the instance)"}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
        faas("remove", "chain3")
    return 0


if __name__ == "__main__":
    sys.exit(main())
