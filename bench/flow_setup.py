# SPDX-License-Identifier: Apache-2.0
"""Flow setup through keel's embedded ToR, ingress and torctl with the real gateway.

Brings the local stack up (deploy/local/up.sh; taken down again at the end only if this
script started it), deploys chain 3 of stack.yml (ACL on the switch -> NAT in a container)
with faas-cli, and for each rate opens new flows from the source netns for --seconds, a
few packets per flow, UDP and TCP alternating, while the sink netns counts every packet per
flow. A share of the new flows is bad (--malformed-every, --no-chain-every: 1 in 40 each by
default): a malformed flow's frames must be dropped and counted by the ingress
(malformed_sent, malformed_dropped), a no-chain flow's must take the normal path
(no_chain_sent, no_chain_received), and neither may cost the others a packet (lost counts
every packet but the malformed ones). Per row: packets sent/received, lost, reordered, the ingress's install latency
(a flow's first packet -> its own rule acknowledged by the switch, after which its packets
bypass the ingress; p50/p99 from its histogram's increase over the row), its hold latency
(first packet -> held packets sent back toward the chain), the most packets it held at once,
its CPU use, and the CPU each of the stack's processes spent per new flow. The control
path's CPU per new flow (control_cpu_us_per_flow: keel-ingress + keel-gateway + keel-torctl +
redis over the row, divided by the row's new flows) stands beside the switch's own
(switch_cpu_us_per_flow: ovs-vswitchd). A flow's rule expires 10 s after its last packet, mostly
after its row: in the rate sweep each row then waits until the switch has expired its flows
(torctl's idle-timeout count) and a second more, and expiry_cpu_us_per_flow is the control
path's CPU meanwhile per new flow (torctl's FlowRemoved, the gateway's release, Redis; the
processes' idle cost over those ~12 s included; --no-expiry skips it). The order-preserving handover is counted per row: the
ingress' markers (markers_sent), packets that reached it after their flow's marker
(packets_after_marker) and, summed over chain3's instances, what their position 0 held and
released and why (handover: nf-runtime/include/keel/handover.h's counters). Where lost packets
went at the instances: what chain3's VFs refused and its NFs dropped, by reason, as keel-agent
counts them (instance_drops).

The rows run as make up configures the stack. At each of --compare-rates the same row also
runs side by side with one setting changed back, in alternating rounds, keel-ingress
restarted between them; each comparison has each round's two rows and the medians and their
ratio (make up's setting / the other) of the control path's and the switch's CPU per flow,
install latency, loss, reordering and flows per AssignFlows call:
  via_torctl_vs_direct      keel-ingress writes most flows' own rules to the ToR itself
                            (--tor-openflow, from torctl's rule templates) against every
                            rule installed by keel-torctl (KEEL_TOR_OPENFLOW=off)
  assign_window_1ms_vs_5ms  new flows within 5 ms of an AssignFlows call share the next one
                            (--assign-window-us 5000) against 1 ms
  ovs_max_idle_10s_vs_1s    the ToR's datapath flows idle out after 1 s (OVS max-idle)
                            against OVS's default 10 s

With --profile-torctl FILE, py-spy samples keel-torctl during the row at --profile-rate and
FILE gets its collapsed stacks (py-spy's raw format) and FILE.top.txt the functions that
held the most samples, self and inclusive; the sampling costs core 0 CPU, so a profiled run
measures the profile, not the figures.

    python bench/flow_setup.py --out bench/results/flow_setup.json [--rates 100,500,...]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import flowgen
import promtext

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "run"
FLOWGEN = Path(__file__).resolve().parent / "flowgen.py"
FAAS_CLI = os.environ.get("FAAS_CLI") or str(ROOT.parent / "shared" / "tools" / "faas-cli")
METRICS = "http://127.0.0.1:9103/metrics"
TORCTL_METRICS = "http://127.0.0.1:9102/metrics"
AGENT_METRICS = "http://127.0.0.1:9101/metrics"
EXPIRED = 'keel_torctl_flow_removed_total{reason="idle_timeout"}'
GATEWAY = "http://127.0.0.1:8080"
CLK_TCK = os.sysconf("SC_CLK_TCK")
STATS_INTERVAL_S = 1.5  # keel-nf's --stats-interval (1 s) and a margin


def sh(*args, timeout=600, **kw):
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=timeout, **kw)


def faas(*args):
    env = {**os.environ, "HOME": str(RUN / "faas-home")}
    return sh(FAAS_CLI, *args, "-g", GATEWAY, env=env, cwd=ROOT)


def scrape() -> dict[str, float]:
    return promtext.scrape(METRICS)


def quantile(q: float, before: dict, after: dict, name: str) -> float:
    """histogram_quantile over the increase of histogram `name` between two scrapes, in ms."""
    buckets = []
    for key, v in after.items():
        if key.startswith(name + "_bucket{") and 'le="' in key:
            le = key.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets.append((bound, v - before.get(key, 0.0)))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return 0.0
    rank = q * buckets[-1][1]
    lo, prev = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lo * 1000
            return (lo + (bound - lo) * (rank - prev) / max(count - prev, 1e-9)) * 1000
        lo, prev = bound, count
    return lo * 1000


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def gauge_max(stop: threading.Event, out: list) -> None:
    while not stop.is_set():
        try:
            out.append(scrape().get("keel_ingress_buffered_packets", 0.0))
        except OSError:
            pass
        stop.wait(0.05)


def deploy_chain3(fresh: bool) -> None:
    """Deploy chain3 and wait until its instance is ready; fresh: remove it first, so a row
    starts with an empty NAT table (each row opens new 5-tuples, and NAT keeps a mapping for
    --flow-idle-ms, 300 s by default: 76,000 flows over the default rows would fill its
    65,536-entry table and later rows would measure NAT refusing flows, not flow setup)."""
    if fresh:
        faas("remove", "chain3")
        deadline = time.time() + 60
        while "chain3" in faas("list").stdout:
            if time.time() > deadline:
                sys.exit("flow_setup: chain3 was not removed within 60 s")
            time.sleep(0.5)
    faas("deploy", "-f", "stack.yml", "--filter", "chain3")
    deadline = time.time() + 120
    while "phase=ready" not in faas("describe", "chain3").stdout:
        if time.time() > deadline:
            sys.exit("flow_setup: chain3's instance did not become ready")
        time.sleep(0.5)


def stack_cpu() -> dict[str, float]:
    """CPU seconds so far of each process make up started (run/*.pid)."""
    out = {}
    for f in RUN.glob("*.pid"):
        try:
            out[f.stem] = cpu_seconds(int(f.read_text()))
        except (OSError, ValueError):
            pass
    return out


# The processes of the control path (run/NAME.pid) whose CPU a new flow costs; the switch
# (ovs-vswitchd) is counted apart.
CONTROL_PROCS = ("keel-ingress", "keel-gateway", "keel-torctl", "redis")
SWITCH_PROC = "ovs-vswitchd"


def us_per_flow(stack0: dict[str, float], stack1: dict[str, float], names, flows: int) -> float:
    """CPU microseconds per new flow that processes `names` spent between two stack_cpu reads."""
    missing = [n for n in names if n not in stack0 or n not in stack1]
    if missing:
        sys.exit(f"flow_setup: no CPU figures for {', '.join(missing)} (run/*.pid)")
    return round(1e6 * sum(stack1[n] - stack0[n] for n in names) / flows, 1)


def start_profile(out: str) -> subprocess.Popen:
    """py-spy sampling keel-torctl (all threads, idle ones left out) into `out`."""
    pid = (RUN / "keel-torctl.pid").read_text().strip()
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        sys.exit(f"flow_setup: --profile-torctl needs py-spy ({spy}); pip install py-spy")
    return subprocess.Popen([str(spy), "record", "--pid", pid, "--format", "raw", "--rate", "200",
                             "--threads", "--output", out, "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_profile(spy: subprocess.Popen, out: str) -> None:
    """Ends the sampling and writes out.top.txt: the 25 functions with the most samples."""
    spy.send_signal(2)
    _, err = spy.communicate(timeout=60)
    if not Path(out).exists():
        sys.exit(f"flow_setup: py-spy wrote no profile: {err.strip()}")
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in Path(out).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")[1:]  # the first is the thread
        total += int(n)
        if frames:
            own[frames[-1]] = own.get(frames[-1], 0) + int(n)
        for f in set(frames):
            incl[f] = incl.get(f, 0) + int(n)
    lines = [f"{total} samples of keel-torctl's busy threads", "", "self:"]
    lines += [f"{100 * n / max(total, 1):5.1f}%  {f}" for f, n in sorted(own.items(), key=lambda x: -x[1])[:25]]
    lines += ["", "inclusive:"]
    lines += [f"{100 * n / max(total, 1):5.1f}%  {f}" for f, n in sorted(incl.items(), key=lambda x: -x[1])[:25]]
    Path(out + ".top.txt").write_text("\n".join(lines) + "\n")


def row(rate: int, seconds: float, packets: int, first_flow: int, profile: str = "", malformed_every: int = 0,
        no_chain_every: int = 0) -> dict:
    pid = int((RUN / "keel-ingress.pid").read_text())
    recv = subprocess.Popen(["ip", "netns", "exec", "keelsink", sys.executable, str(FLOWGEN), "recv",
                             "--duration", str(seconds + 1), "--quiet", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert recv.stderr.readline().strip() == "ready", "the sink did not start"
    before, cpu0, t0, stack0 = scrape(), cpu_seconds(pid), time.monotonic(), stack_cpu()
    expired0 = promtext.scrape(TORCTL_METRICS).get(EXPIRED, 0)
    handover0, inst_drops0 = handover_counts(), instance_drops()
    held: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=gauge_max, args=(stop, held))
    sampler.start()
    spy = start_profile(profile) if profile else None
    sent = json.loads(sh("ip", "netns", "exec", "keelsrc", sys.executable, str(FLOWGEN), "send",
                         "--rate", str(rate), "--duration", str(seconds), "--packets", str(packets),
                         "--gap-ms", "2", "--proto", "mix", "--dst-net", "198.18.3.0/24",
                         "--first-flow", str(first_flow), "--malformed-every", str(malformed_every),
                         "--no-chain-every", str(no_chain_every)).stdout)
    cpu1, t1 = cpu_seconds(pid), time.monotonic()
    out, err = recv.communicate(timeout=seconds + 120)
    stack1 = stack_cpu()
    if spy:
        stop_profile(spy, profile)
    # the flows the control path set up: malformed ones end at the ingress' parser and
    # no-chain ones on its normal path, so dividing by them too would flatter the figure
    flows = rate * seconds - sent["malformed_flows"] - sent["no_chain_flows"]
    stop.set()
    sampler.join()
    got = json.loads(out)
    after = scrape()
    time.sleep(STATS_INTERVAL_S)  # the instances' stats files catch up with the last packets
    handover1, inst_drops1 = handover_counts(), instance_drops()
    name = "keel_ingress_install_latency_seconds"
    hold = "keel_ingress_hold_latency_seconds"
    max_before, max_after = before.get("keel_ingress_buffered_max", 0), after.get("keel_ingress_buffered_max", 0)
    drops = {k.split('reason="', 1)[1].split('"', 1)[0]: int(v - before.get(k, 0)) for k, v in sorted(after.items())
             if k.startswith("keel_ingress_drops_total{") and v - before.get(k, 0) > 0}
    no_chain_got = sum(n for fid, n in got["per_flow"].items()
                       if flowgen.flow_kind(int(fid), malformed_every, no_chain_every) == flowgen.NO_CHAIN)
    return {"new_flows_per_s": rate, "packets_sent": sent["packets"], "packets_received": got["packets"],
            # every packet that should have arrived (all but the malformed ones) and did not
            "lost": sent["packets"] - sent["malformed_packets"] - got["packets"], "reordered": got["reordered"],
            # the share of first packets that are malformed or for no chain: the malformed ones
            # must be dropped and counted, the others take the normal path, neither stalls the rest
            "malformed_sent": sent["malformed_packets"],
            "malformed_dropped": sum(drops.get(r, 0) for r in ("bad_ihl", "truncated")),
            "no_chain_sent": sent["no_chain_packets"], "no_chain_received": no_chain_got,
            "install_p50_ms": round(quantile(0.50, before, after, name), 3),
            "install_p99_ms": round(quantile(0.99, before, after, name), 3),
            "hold_p50_ms": round(quantile(0.50, before, after, hold), 3),
            "hold_p99_ms": round(quantile(0.99, before, after, hold), 3),
            "buffered_max": int(max_after if max_after > max_before else max(held, default=0)),
            "ingress_cpu_pct": round(100 * (cpu1 - cpu0) / (t1 - t0), 1),
            "new_flows_seen": int(after.get("keel_ingress_new_flows_total", 0) - before.get("keel_ingress_new_flows_total", 0)),
            "sender_late_max_ms": sent["late_max_ms"],
            # the order-preserving handover: markers the ingress sent, packets that reached it
            # after their flow's marker, and what the instances' position 0 held and released
            "markers_sent": int(after.get("keel_ingress_markers_sent_total", 0) - before.get("keel_ingress_markers_sent_total", 0)),
            "packets_after_marker": int(after.get("keel_ingress_packets_after_marker_total", 0)
                                        - before.get("keel_ingress_packets_after_marker_total", 0)),
            "handover": handover_delta(handover0, handover1),
            "ingress_drops": drops,
            # where lost packets went at chain3's instances (an instance that started during
            # the row counts from zero; one removed during it is left out)
            "instance_drops": {k: int(v - inst_drops0.get(k, 0)) for k, v in sorted(inst_drops1.items())
                               if v - inst_drops0.get(k, 0) > 0},
            "flows_per_assign_call": round((after.get("keel_ingress_new_flows_total", 0) - before.get("keel_ingress_new_flows_total", 0))
                                           / max(after.get("keel_ingress_assign_calls_total", 0) - before.get("keel_ingress_assign_calls_total", 0), 1), 1),
            "control_cpu_us_per_flow": us_per_flow(stack0, stack1, CONTROL_PROCS, flows),
            "switch_cpu_us_per_flow": us_per_flow(stack0, stack1, (SWITCH_PROC,), flows),
            # until the sink went quiet, so setups still in progress after the last send count
            "cpu_ms_per_new_flow": {k: round(1000 * (stack1[k] - stack0[k]) / flows, 3)
                                    for k in sorted(stack1) if k in stack0 and stack1[k] - stack0[k] >= 0.005},
            # for expiry(): what it measures from and against (dropped from the result)
            "_stack1": stack1, "_flows": flows, "_expired0": expired0,
            "_installed": int(after.get("keel_ingress_stage2_installed_total", 0)
                              - before.get("keel_ingress_stage2_installed_total", 0))}


def expiry(r: dict, timeout_s: float = 25) -> dict:
    """After a row: waits until the switch has expired the row's flows' rules (torctl's count of
    idle timeouts grew by as many as the row installed, or timeout_s) and a second more for the
    gateway to release them, and returns the control path's CPU meanwhile per new flow (each
    flow's expiry comes 10 s after its last packet, so a row's own window holds few of them)."""
    want, stack1, expired0 = r["_installed"], r["_stack1"], r["_expired0"]
    deadline = time.monotonic() + timeout_s
    expired = 0.0
    while time.monotonic() < deadline:
        expired = promtext.scrape(TORCTL_METRICS).get(EXPIRED, 0) - expired0
        if expired >= want:
            break
        time.sleep(0.5)
    time.sleep(1)
    stack2 = stack_cpu()
    return {"expired_flows": int(expired),
            "expiry_cpu_us_per_flow": us_per_flow(stack1, stack2, CONTROL_PROCS, r["_flows"]),
            "expiry_cpu_ms_per_new_flow": {k: round(1000 * (stack2[k] - stack1[k]) / r["_flows"], 3)
                                           for k in CONTROL_PROCS}}


def public(r: dict) -> dict:
    """A row without row()'s notes for expiry()."""
    return {k: v for k, v in r.items() if not k.startswith("_")}


def instance_drops() -> dict[str, float]:
    """What chain3's instances did not pass on, summed over them, as the agent counts it: their
    VFs' refusals (receive side full, "vf") and their NFs' own drop counts by reason."""
    out: dict[str, float] = {}
    for k, v in promtext.scrape(AGENT_METRICS).items():
        if 'chain="chain3"' not in k:
            continue
        if k.startswith("keel_agent_instance_vf_dropped_packets_total{"):
            out["vf"] = out.get("vf", 0) + v
        elif k.startswith("keel_agent_instance_nf_reported_dropped_packets_total{"):
            reason = k.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = out.get(reason, 0) + v
    return out


def handover_counts() -> dict[str, dict[str, int]]:
    """Each chain3 instance's handover counters (position 0's stats file, nf-runtime handover.h)."""
    out = {}
    for path in sorted(Path("/run/keel/pktbuf").glob("chain3.*/stats-0.json")):  # deploy/local/lib.sh
        try:
            out[path.parent.name] = json.loads(path.read_text()).get("handover") or {}
        except (OSError, ValueError):
            continue
    return out


def handover_delta(before: dict, after: dict) -> dict[str, int]:
    """The handover counters' increase over a row, summed over the chain's instances (an instance
    that started during the row counts from zero)."""
    total: dict[str, int] = {}
    for inst, counts in after.items():
        for k, v in counts.items():
            total[k] = total.get(k, 0) + int(v - before.get(inst, {}).get(k, 0))
    return {k: v for k, v in sorted(total.items()) if v}


# Side-by-side comparisons: name -> (what runs as make up configures it, the other setting),
# each (label, make up's environment for it).
COMPARISONS = {
    "via_torctl_vs_direct": (("via_torctl", {"KEEL_TOR_OPENFLOW": "off"}), ("direct", {})),
    "assign_window_1ms_vs_5ms": (("window_1ms", {"KEEL_INGRESS_FLAGS": "--assign-window-us 1000"}), ("window_5ms", {})),
    "ovs_max_idle_10s_vs_1s": (("max_idle_10s", {"KEEL_OVS_MAX_IDLE_MS": "10000"}), ("max_idle_1s", {})),
}
COMPARED = ("control_cpu_us_per_flow", "switch_cpu_us_per_flow", "install_p50_ms", "install_p99_ms", "lost", "reordered",
            "flows_per_assign_call")


def stack_as(env: dict) -> None:
    """Restarts keel-ingress and runs make up's script with env (its KEEL_* settings; {}: as make up does)."""
    pid = int((RUN / "keel-ingress.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    compared = {k for pair in COMPARISONS.values() for _, e in pair for k in e}
    clean = {k: v for k, v in os.environ.items() if k not in compared}
    sh(str(ROOT / "deploy" / "local" / "up.sh"), timeout=900, env={**clean, **env})


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def compare(name: str, rate: int, rounds: int, first: int, a) -> tuple[dict, int]:
    """Rounds of the rate's row in COMPARISONS[name]'s two settings, alternating which goes
    first. Each compared figure gets both medians and their ratio (make up's / the other)."""
    (other, other_env), (ours, ours_env) = COMPARISONS[name]
    out: dict = {"rounds": []}
    for i in range(rounds):
        pair = {}
        for label, env in ((other, other_env), (ours, ours_env))[::1 if i % 2 == 0 else -1]:
            stack_as(env)
            deploy_chain3(fresh=True)
            r = public(row(rate, a.seconds, a.packets, first, "", a.malformed_every, a.no_chain_every))
            first += int(rate * a.seconds) + 1000
            print(json.dumps({"compare": name, "setting": label, **r}), file=sys.stderr, flush=True)
            pair[label] = r
            time.sleep(2)
        out["rounds"].append(pair)
    for k in COMPARED:
        t = median([p[other][k] for p in out["rounds"]])
        d = median([p[ours][k] for p in out["rounds"]])
        out[k] = {other: round(t, 3), ours: round(d, 3), "ratio": round(d / t, 3) if t else None}
    for proc in ("keel-torctl", "keel-gateway", "keel-ingress"):
        ms = {m: median([p[m]["cpu_ms_per_new_flow"].get(proc, 0) for p in out["rounds"]]) for m in (other, ours)}
        out[proc.removeprefix("keel-") + "_cpu_us_per_flow"] = {m: round(1000 * v, 1) for m, v in ms.items()}
    return out, first


def idle_cpu(seconds: float = 10) -> float:
    pid = int((RUN / "keel-ingress.pid").read_text())
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return round(100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0), 2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "flow_setup.json"))
    p.add_argument("--rates", default="100,500,1000,2000,4000", help="new flows per second, one row each")
    p.add_argument("--seconds", type=float, default=10, help="per row")
    p.add_argument("--packets", type=int, default=4, help="per flow")
    p.add_argument("--malformed-every", type=int, default=40, metavar="N",
                   help="every Nth new flow sends only malformed frames (0: none)")
    p.add_argument("--no-chain-every", type=int, default=40, metavar="M",
                   help="every Mth new flow is for no chain (0: none)")
    p.add_argument("--profile-torctl", metavar="FILE", default="",
                   help="py-spy keel-torctl during the --profile-rate row into FILE (and FILE.top.txt)")
    p.add_argument("--profile-rate", type=int, default=1000, help="the row --profile-torctl samples")
    p.add_argument("--no-expiry", dest="expiry", action="store_false",
                   help="do not wait after each row of the rate sweep for its flows to expire (expiry_cpu_us_per_flow)")
    p.add_argument("--compare", default=",".join(COMPARISONS),
                   help="side-by-side comparisons to run at --compare-rates (\"\": none)")
    p.add_argument("--compare-rates", default="1000", help="rates of each comparison (\"\": none)")
    p.add_argument("--compare-rounds", type=int, default=2, help="rounds of each comparison")
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("flow_setup: needs root (make up, network namespaces)")
    was_up = (RUN / "keel-ingress.pid").exists() and (RUN / "keel-gateway.pid").exists()
    sh(str(ROOT / "deploy" / "local" / "up.sh"), timeout=900)
    try:
        password = (RUN / "secrets" / "basic-auth-password").read_text().strip()
        env = {**os.environ, "HOME": str(RUN / "faas-home")}
        subprocess.run([FAAS_CLI, "login", "-g", GATEWAY, "-u", "admin", "--password-stdin"], input=password,
                       capture_output=True, text=True, env=env, timeout=30, check=True)
        stack_as({})
        deploy_chain3(fresh=False)
        rows, first = [], 100000
        idle = idle_cpu()
        for i, rate in enumerate(int(r) for r in a.rates.split(",")):
            if i:
                deploy_chain3(fresh=True)
            r = row(rate, a.seconds, a.packets, first, a.profile_torctl if rate == a.profile_rate else "",
                    a.malformed_every, a.no_chain_every)
            if a.expiry:
                r.update(expiry(r))
            r = public(r)
            first += int(rate * a.seconds) + 1000
            print(json.dumps(r), file=sys.stderr, flush=True)
            rows.append(r)
            time.sleep(2)
        comparisons: dict = {name: {} for name in a.compare.split(",") if name}
        for name in comparisons:
            if name not in COMPARISONS:
                sys.exit(f"flow_setup: --compare: no comparison {name!r} (have {', '.join(COMPARISONS)})")
        for name in comparisons:
            for rate in (int(r) for r in a.compare_rates.split(",") if r):
                comparisons[name][str(rate)], first = compare(name, rate, a.compare_rounds, first, a)
        stack_as({})
        result = {"rows": rows, **comparisons, "ingress_idle_cpu_pct": idle, "packets_per_flow": a.packets,
                  "malformed_every": a.malformed_every, "no_chain_every": a.no_chain_every,
                  "seconds_per_row": a.seconds, "chain": "chain3: ACL@switch -> NAT@server",
                  "each_row": "chain3 deployed afresh (empty NAT table)"}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
        faas("remove", "chain3")
    finally:
        if not was_up:
            subprocess.run([str(ROOT / "deploy" / "local" / "down.sh")], capture_output=True, timeout=300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
