#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""keel demo: Galleon's three chains (stack.yml) deployed with the stock faas-cli on the local
stack, real traffic through the ToR, the ingress and the chain instances on coopsched's core,
and a report of what every chain got against its SLO and how the controller scaled it.

Steps, each skipped when already done:
  1. make up            the local stack (deploy/local/up.sh): Redis, dockerd, Open vSwitch with
                        the ToR, keel-place, keel-gateway, keel-coopsched, keel-agent,
                        keel-torctl, keel-ingress, Prometheus
  2. images             keel/hello (the normal function) and keel/nf-ttlguard (the tenant's
                        packet function, built from the packet-cpp template with faas-cli)
  3. faas-cli login and faas-cli deploy -f stack.yml
  4. traffic            keel-trafgen in netns keelsrc (generator) and keelsink (sink) with the
                        scenario bench/scenarios/e2e.json: a ramp up, a steady phase and a ramp
                        down per chain; chain2's flows rise past its capacity target so the
                        controller attaches a second instance, and fall again
  5. report             per chain: offered and delivered rate, loss, p50/p99 end to end against
                        the SLO; the server's share beside it (server_p99_us, the instances'
                        measured sojourn, against the server budget, the SLO less the network's)
                        and the ToR's (tor_p50_us/tor_p99_us: the scenario's "tor-probe" flow,
                        which the ToR sends from the source straight to the sink, no ingress
                        and no server, under the same traffic); instances and cores over time;
                        written to bench/results/e2e.json, with server_time: where each
                        chain's server time went, from its instances' statistics files
                        (deploy/local/server_time.py)

The stack stays up afterwards for you to explore; `make down` stops it. Must run as root.
"""
import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import server_time  # deploy/local/server_time.py

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "run"
GATEWAY = "http://127.0.0.1:8080"
PROMETHEUS = "http://127.0.0.1:9090"
SCENARIO = ROOT / "bench" / "scenarios" / "e2e.json"
RESULT = ROOT / "bench" / "results" / "e2e.json"
SIM_SCENARIO = ROOT / "bench" / "scenarios" / "e2e-sim.yaml"
SIM_RESULT = ROOT / "bench" / "results" / "e2e_sim.json"
CHAIN_RATE = ROOT / "bench" / "results" / "chain_rate.json"
SERVER_NFS = {"chain2": "acl,urlfilter,encrypt", "chain3": "acl,nat"}  # stack.yml's, as placed
CHAINS = ("chain1", "chain2", "chain3")
PKTBUF = Path("/run/keel/pktbuf")  # keel-agent --pktbuf-dir under make up (deploy/local/lib.sh)


def unmanaged_cpus() -> set:
    """The CPUs keel-coopsched does not manage (deploy/local/lib.sh MANAGED_CORES)."""
    managed = {int(c) for c in re.search(r"^MANAGED_CORES=([\d,]+)", (ROOT / "deploy" / "local" / "lib.sh")
                                         .read_text(), re.M)[1].split(",")}
    return (os.sched_getaffinity(0) - managed) or os.sched_getaffinity(0)


def say(msg: str) -> None:
    print(msg, flush=True)


def die(msg: str) -> None:
    sys.exit(f"demo: {msg}")


def run(args, what: str, timeout=900, env=None, quiet=True, cwd=None) -> str:
    """Runs a step (in the repository, or cwd); on failure, stops the demo with the step's output."""
    r = subprocess.run([str(a) for a in args], capture_output=quiet, text=True, timeout=timeout, env=env, cwd=cwd or ROOT)
    if r.returncode != 0:
        out = ((r.stdout or "") + (r.stderr or ""))[-3000:]
        die(f"{what} failed (exit {r.returncode})\n{out}")
    return r.stdout or ""


def faas_cli() -> str:
    found = os.environ.get("FAAS_CLI") or shutil.which("faas-cli")
    shipped = ROOT.parent / "shared" / "tools" / "faas-cli"
    if found:
        return found
    if shipped.exists():
        return str(shipped)
    die("faas-cli is not installed: install it the usual way (https://github.com/openfaas/faas-cli "
        "releases, or `curl -sSL https://cli.openfaas.com | sh`) or set FAAS_CLI=/path/to/faas-cli")


class Faas:
    """faas-cli against the local gateway, with its own HOME (run/faas-home) for the login."""

    def __init__(self):
        self.cli = faas_cli()
        self.env = {**os.environ, "HOME": str(RUN / "faas-home"), "DOCKER_BUILDKIT": "0"}
        self.password = (RUN / "secrets" / "basic-auth-password").read_text().strip()

    def __call__(self, *args, what=None, timeout=300, cwd=None) -> str:
        return run([self.cli, *args], what or f"faas-cli {' '.join(args[:2])}", timeout=timeout, env=self.env, cwd=cwd)

    def login(self) -> None:
        r = subprocess.run([self.cli, "login", "-g", GATEWAY, "-u", "admin", "--password-stdin"],
                           input=self.password, capture_output=True, text=True, env=self.env, timeout=30)
        if r.returncode:
            die(f"faas-cli login failed: {r.stdout}{r.stderr}")

    def topology(self) -> dict:
        req = urllib.request.Request(f"{GATEWAY}/system/keel/topology")
        token = base64.b64encode(f"admin:{self.password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.load(resp)


def image_present(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


def ensure_images(faas: Faas, bin_dir: Path) -> None:
    if not image_present("keel/hello:latest") or not image_present("keel/nf-sdk:latest"):
        say("  images: building keel/nf-base, keel/nf-sdk and keel/hello (make images)")
        run(["make", "--no-print-directory", "images", f"BUILD={bin_dir.parent}"], "make images")
    if not image_present("keel/nf-ttlguard:latest"):
        say("  images: building keel/nf-ttlguard from the packet-cpp template (faas-cli build)")
        faas("build", "-f", "stack.yml", what="faas-cli build ttlguard", timeout=900, cwd=ROOT / "functions")
    say("  images: keel/hello, keel/nf-ttlguard present")


def slo_us(stack_yml: Path) -> dict:
    """Each chain's p99 SLO in µs from stack.yml's com.keel.slo annotations."""
    out, chain = {}, None
    for line in stack_yml.read_text().splitlines():
        m = re.match(r"^  (\w[\w-]*):\s*$", line)
        if m:
            chain = m[1]
        m = re.search(r'com\.keel\.slo:\s*"?p99=(\d+(?:\.\d+)?)(us|ms)', line)
        if m and chain:
            out[chain] = float(m[1]) * (1000 if m[2] == "ms" else 1)
    return out


def ready_pools(topo: dict) -> set:
    """Chains with at least one pre-deployed instance ready, or a switch-only chain."""
    ok = {c["name"] for c in topo["chains"] if c["switch_only"]}
    for w in topo["workers"]:
        ok |= {sg["chain"] for sg in w["pool"] if sg["phase"] == "ready"}
    for w in topo["workers"]:
        for core in w["cores"]:
            ok |= {sg["chain"] for sg in core["sgroups"] if sg["phase"] == "ready"}
    return ok


class Sampler(threading.Thread):
    """Samples the gateway's topology once a second: each chain's attached instances (sgroups)
    and the cores they are on."""

    def __init__(self, faas: Faas):
        super().__init__(daemon=True)
        self.faas, self.t0, self.samples, self.stop = faas, time.time(), [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                topo = self.faas.topology()
                t = round(time.time() - self.t0, 1)
                for c in topo["chains"]:
                    if c["name"] in CHAINS:
                        self.samples.append({"t_s": t, "chain": c["name"], "sgroups_attached": c["attached"],
                                             "cores": len(c["cores"]), "flows": c["flows"],
                                             "server_p99_us": c.get("p99_us", 0), "server_p50_us": c.get("p50_us", 0),
                                             "server_budget_us": c.get("server_budget_us", 0)})
            except OSError as e:
                say(f"  (topology not read: {e})")
            self.stop.wait(1.0)

    def latest(self, chain: str) -> dict:
        return next((s for s in reversed(self.samples) if s["chain"] == chain), {})


def timeline(samples: list, traffic: dict) -> list:
    """The sampler's instance counts with each second's delivered rate at the sink."""
    rate = {(round(p["t_s"]), p["chain"]): p["delivered_mbps"] for p in traffic.get("timeline", [])}
    return [{"t_s": s["t_s"], "chain": s["chain"], "sgroups_attached": s["sgroups_attached"], "cores": s["cores"],
             "rate_mbps": round(rate.get((round(s["t_s"]), s["chain"]), 0.0), 3)} for s in samples]


def server_figures(samples: list, chain: str) -> dict:
    """A chain's server sojourn over the run: the worst window's p99 and p50 that the gateway
    showed (each the largest of the chain's attached instances over the agent's window), and
    its server budget; None where no window was measured (a switch-only chain)."""
    mine = [x for x in samples if x["chain"] == chain]
    p99 = max((x["server_p99_us"] for x in mine), default=0)
    p50 = max((x["server_p50_us"] for x in mine), default=0)
    budget = next((x["server_budget_us"] for x in reversed(mine) if x["server_budget_us"]), None)
    return {"server_p99_us": round(p99, 1) if p99 else None, "server_p50_us": round(p50, 1) if p50 else None,
            "server_budget_us": round(budget, 1) if budget else None}


PROBE = "tor-probe"  # the scenario's ToR probe (keel-torctl rules.py PRIO_PROBE)


def result(traffic: dict, slos: dict, samples: list) -> dict:
    # The ToR hop: the probe flow crosses the switch once, source to sink, under the same
    # traffic; a chain with a server crosses it twice (source to worker, worker to sink).
    probe = next((c for c in traffic["chains"] if c["name"] == PROBE), None)
    tor = {"tor_p50_us": probe["p50_us"] if probe else None, "tor_p99_us": probe["p99_us"] if probe else None}
    chains = [{"name": c["name"], "slo_us": slos.get(c["name"]), "offered_mbps": c["offered_mbps"],
               "delivered_mbps": c["delivered_mbps"], "loss": c["loss"], "p50_us": c["p50_us"],
               "p99_us": c["p99_us"], "transform_errors": c["transform_errors"],
               **server_figures(samples, c["name"]), **tor}
              for c in traffic["chains"] if c["name"] in CHAINS]
    out = {"chains": chains, "timeline": timeline(samples, traffic),
           "method": "p50_us/p99_us: keel-trafgen's sink, end to end; server_p99_us/server_p50_us: the worst "
                     "window (--sojourn-window) of the chain's measured server sojourn during the run (position 0's "
                     "TSC stamps, worker RX to TX; the largest of its attached instances); server_budget_us: the SLO "
                     "less keel-gateway --network-budget; tor_p50_us/tor_p99_us: the ToR probe (UDP to "
                     "198.19.255.0/30 port 7, which the ToR sends from the source straight to the sink) in the same "
                     "run: one crossing of the switch, where a chain with a server makes two; server_time: per chain, "
                     "the instances' statistics files over the traffic (deploy/local/server_time.py): the sojourn "
                     "histogram of the whole run, and per position the waits for its turns that carried packets "
                     "(handoff_wait) and its work per batch"}
    if probe:
        out["tor_probe"] = {k: probe[k] for k in ("offered_mbps", "delivered_mbps", "loss", "p50_us", "p99_us")}
    return out


def sim_comparison(bin_dir: Path, res: dict) -> dict:
    """What keel-sim predicts for the demo's traffic on this machine's one managed core
    (bench/scenarios/e2e-sim.yaml: p99) and for one core's max rate (keel-sim profile), beside
    what the demo measured (p99, end to end) and what bench/chain_rate.py measured (one core's
    max rate, keel-nf under coopsched, 1024-byte packets)."""
    sim_out = RUN / "e2e-sim.json"
    run([bin_dir / "keel-sim", "run", "--policy", "keel", "-q", "--out", sim_out, SIM_SCENARIO], "keel-sim run")
    sim = {r["chain"]: r for r in json.loads(sim_out.read_text())["rows"]}
    measured = {c["name"]: c for c in res["chains"]}
    core = {}
    if CHAIN_RATE.exists():
        core = {r["chain"]: r for r in json.loads(CHAIN_RATE.read_text())["rows"] if r["pkt_bytes"] == 1024}
    rows = []
    for chain, nfs in SERVER_NFS.items():
        prof_out = RUN / f"e2e-profile-{chain}.json"
        run([bin_dir / "keel-sim", "profile", "--chain", chain, "--nfs", nfs, "--pkt-bytes", "1024",
             "--ghz", "2.6", "--out", prof_out], "keel-sim profile")
        max_mpps = json.loads(prof_out.read_text())["max_pps"] / 1e6
        m, c = measured.get(chain, {}), core.get(chain, {})
        row = {"chain": chain, "sim_p99_us": sim[chain]["p99_us"], "measured_p99_us": m.get("p99_us"),
               "sim_max_mpps_1024B": round(max_mpps, 3), "core_max_mpps_1024B": c.get("keel_mpps")}
        row["p99_measured_over_sim"] = round(row["measured_p99_us"] / row["sim_p99_us"], 1) \
            if row["measured_p99_us"] and row["sim_p99_us"] else None
        row["max_measured_over_sim"] = round(c["keel_mpps"] / max_mpps, 3) if c.get("keel_mpps") else None
        rows.append(row)
    out = {"scenario": str(SIM_SCENARIO.relative_to(ROOT)), "rows": rows,
           "method": "sim_p99_us: keel-sim run (one worker, one managed core at 2.6 GHz, the demo's chains "
                     "together); measured_p99_us: make demo, keel-trafgen's sink (end to end: the embedded "
                     "ToR, keel-ingress for first packets, veths, the instance); sim_max_mpps_1024B: keel-sim "
                     "profile (one core); core_max_mpps_1024B: bench/results/chain_rate.json keel_mpps"}
    SIM_RESULT.write_text(json.dumps(out, indent=1) + "\n")
    return out


def report(res: dict, traffic: dict) -> bool:
    """Prints the report; true when every chain met its SLO with zero loss and no wrong packet."""
    extra = {c["name"]: c for c in traffic["chains"]}
    say("\nkeel demo — what each chain got (sink in netns keelsink, latency generator → sink)")
    say(f"  {'chain':<7} {'offered':>10} {'delivered':>10} {'loss':>6} {'p50':>8} {'p99':>8} {'SLO':>7} "
        f"{'wrong':>6}  verdict")
    good = True
    for c in res["chains"]:
        ok = c["loss"] == 0 and c["transform_errors"] == 0 and c["p99_us"] <= (c["slo_us"] or float("inf"))
        good &= ok
        say(f"  {c['name']:<7} {c['offered_mbps']:>6.1f}Mb/s {c['delivered_mbps']:>6.1f}Mb/s {c['loss']:>6} "
            f"{c['p50_us']:>6.0f}µs {c['p99_us']:>6.0f}µs {c['slo_us'] or 0:>5.0f}µs {c['transform_errors']:>6}  "
            f"{'meets its SLO' if ok else 'MISSES'}")
        say(f"  {'':<7} {server_line(c)}")
        if c["name"] in res.get("server_time", {}):
            say(f"  {'':<7} {server_time_line(res['server_time'][c['name']])}")
        e = extra[c["name"]]
        notes = [f"{e['flows']} flows", f"first packet of a flow (rule setup) p99 {e['setup_p99_us'] / 1000:.1f} ms"]
        if e.get("setup_worst"):  # which flows, sent when: the start's cold instances, or later
            notes[-1] += " (slowest: " + ", ".join(f"{w['ms']:.1f} ms at {w['sent_s']:.1f} s"
                                                   for w in e["setup_worst"][:3]) + ")"
        if e.get("blocked_sent"):
            notes.append(f"{e['blocked_sent']} blocked-URL packets sent, {e['blocked_delivered']} got through")
        say(f"  {'':<7} {', '.join(notes)}")
    say("\n  instances (sgroups attached) and cores over time, one column per 5 s:")
    for name in CHAINS:
        pts = [p for p in res["timeline"] if p["chain"] == name]
        cols = [pts[i] for i in range(0, len(pts), 5)]
        say(f"  {name:<7} sgroups " + " ".join(f"{p['sgroups_attached']}" for p in cols))
        say(f"  {'':<7} cores   " + " ".join(f"{p['cores']}" for p in cols))
    say(f"\n  written to {RESULT.relative_to(ROOT)}")
    return good


def server_line(c: dict) -> str:
    """The chain's end-to-end p99 split: the server's measured share against its budget, the ToR's."""
    tor = f"ToR hop p99 {c['tor_p99_us']:.0f}µs" if c.get("tor_p99_us") is not None else "ToR hop not measured"
    if c.get("server_p99_us") is None:
        return f"server p99 not measured (no instance window), {tor}"
    verdict = ""
    if c.get("server_budget_us"):
        verdict = " (meets its server budget)" if c["server_p99_us"] <= c["server_budget_us"] else " (MISSES its server budget)"
    return (f"server p99 {c['server_p99_us']:.1f}µs (p50 {c['server_p50_us'] or 0:.1f}µs) against server budget "
            f"{c['server_budget_us'] or 0:.0f}µs{verdict}, beside e2e p99 {c['p99_us']:.0f}µs; {tor}")


def server_time_line(t: dict) -> str:
    """Where the chain's server time went over the run (server_time.py)."""
    parts = []
    for p in t["positions"]:
        wait = f"waits {p['handoff_wait_mean_us']:.1f}µs (p99 {p['handoff_wait_p99_us']:.0f}) for its turn, " \
            if p["turns_with_packets"] else ""
        parts.append(f"position {p['position']} ({','.join(p['nfs'])}) {wait}works {p['work_per_batch_us']:.1f}µs")
    return (f"server time over the run: sojourn p50 {t['sojourn_p50_us']:.1f}µs, p99 {t['sojourn_p99_us']:.1f}µs, "
            f"mean {t['sojourn_mean_us']:.1f}µs; a batch of {t['packets_per_batch']:.1f} packets: "
            + "; ".join(parts) + f" (means, {t['mean_accounted_us']:.1f}µs in all); before its turn a packet waited "
            f"in the VF's queue up to {t['rx_wait_bound_p99_us']:.0f}µs (p99; a packet that found its instance detached "
            f"waited for the attach)")


def report_sim(cmp: dict) -> None:
    say("\n  keel-sim for the same traffic on this machine's managed core (bench/results/e2e_sim.json):")
    for r in cmp["rows"]:
        say(f"  {r['chain']:<7} p99 predicted {r['sim_p99_us']:.1f}µs (the core alone), measured "
            f"{r['measured_p99_us']:.0f}µs end to end; one core's max rate at 1024 B predicted "
            f"{r['sim_max_mpps_1024B']:.3f} Mpps, measured {r['core_max_mpps_1024B'] or 0:.3f} Mpps "
            f"(bench/chain_rate.py)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin"), help="keel's binaries (default build/bin)")
    ap.add_argument("--scenario", default=str(SCENARIO), help="keel-trafgen scenario (default %(default)s)")
    ap.add_argument("--out", default=str(RESULT), help="result file (default %(default)s)")
    ap.add_argument("--settle", type=float, default=45.0,
                    help="seconds to keep watching after the traffic, until the ramp's extra instances "
                         "are detached (default 45)")
    ap.add_argument("--down", action="store_true", help="stop the stack at the end (make bench)")
    args = ap.parse_args()
    bin_dir = Path(args.bin).resolve()
    if os.geteuid() != 0:
        die("the demo starts the local stack (Open vSwitch, dockerd, SCHED_FIFO): run it as root")
    if (os.cpu_count() or 1) < 2:
        die("the demo needs two cores: core 1 is coopsched's managed core")
    t_start = time.time()
    # keel-trafgen, keel-sim and the stack's parts (up.sh pins itself too) stay off coopsched's
    # managed core: a process there waits behind the attached chains' SCHED_FIFO threads.
    os.sched_setaffinity(0, unmanaged_cpus())

    say("1. make up: the local stack")
    run([ROOT / "deploy" / "local" / "up.sh", "--bin", bin_dir], "make up", quiet=False)
    faas = Faas()
    say("2. images")
    ensure_images(faas, bin_dir)
    say("3. faas-cli login and deploy -f stack.yml")
    faas.login()
    faas("deploy", "-f", "stack.yml", what="faas-cli deploy -f stack.yml")
    deadline = time.time() + 120
    while not set(CHAINS) <= ready_pools(faas.topology()):
        if time.time() > deadline:
            die(f"the chains' instances were not ready within 120 s: {faas('list', '-v')}")
        time.sleep(0.5)
    topo = faas.topology()
    for c in topo["chains"]:
        if c["name"] in CHAINS:
            where = "runs on the ToR switch" if c["switch_only"] else \
                f"has a pre-deployed instance ready ({' -> '.join(c['server_nfs'])} on the worker)"
            say(f"  {c['name']} {where}")

    say(f"4. traffic: keel-trafgen --scenario {Path(args.scenario).relative_to(ROOT)}")
    traffic_json = RUN / "e2e-traffic.json"
    sampler = Sampler(faas)
    sampler.start()
    stats_before = server_time.snapshot(PKTBUF)
    gen = subprocess.run([bin_dir / "keel-trafgen", "--scenario", args.scenario, "--out", traffic_json],
                         timeout=900)
    split = server_time.breakdown(stats_before, server_time.snapshot(PKTBUF))
    if gen.returncode != 0:
        die(f"keel-trafgen failed (exit {gen.returncode}); the stack is still up (make down stops it)")
    say(f"  traffic done; watching the controller detach what the ramp attached (up to {args.settle:.0f} s)")
    settle_end = time.time() + args.settle
    while time.time() < settle_end:
        if all(sampler.latest(c).get("sgroups_attached", 0) <= 1 and sampler.latest(c).get("flows", 1) == 0
               for c in CHAINS):
            time.sleep(2)  # two more samples of the settled state
            break
        time.sleep(1)
    sampler.stop.set()
    sampler.join()

    traffic = json.loads(traffic_json.read_text())
    res = result(traffic, slo_us(ROOT / "stack.yml"), sampler.samples)
    res["server_time"] = split
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    good = report(res, traffic)
    report_sim(sim_comparison(bin_dir, res))
    if args.down:
        run([ROOT / "deploy" / "local" / "down.sh"], "make down")
        say(f"\nThe demo took {time.time() - t_start:.0f} s; the stack is down again.")
        return 0
    say(f"\nThe stack is still up (demo took {time.time() - t_start:.0f} s). Look around:")
    say(f"  faas-cli list; faas-cli describe chain2     (HOME={RUN / 'faas-home'} holds the login)")
    say(f"  dashboard   {GATEWAY}/ui/  (user admin, password in run/secrets/basic-auth-password)")
    say(f"  topology    curl -u admin:$(cat run/secrets/basic-auth-password) {GATEWAY}/system/keel/topology")
    say(f"  Prometheus  {PROMETHEUS}  (keel_gateway_*, keel_agent_*, keel_ingress_*, keel_torctl_*)")
    say("  make down stops the stack.")
    if not good:
        say("  (a chain above missed its SLO or lost packets: see its line; the run itself completed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
