#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""keel's chaos run (make chaos): parts of the local stack die under traffic and the stack must
carry on, losing no chain, no NF state and leaking nothing.

  1. make up (deploy/local/up.sh) and faas-cli deploy -f stack.yml (every chain ready)
  2. keel-trafgen drives steady traffic through all three chains: chain3's flows (NAT) live for
     the whole run, so each NAT mapping must outlive every fault; chain1's and chain2's flows
     are short, so new flows keep needing rules while parts are down
  3. every --interval seconds one component, drawn from a seeded shuffle of all eight (each
     dies once per eight faults), is killed with SIGKILL and started again the way make up
     (or, for an NF container, the agent) would:
        nf         a random NF container of a chain instance (docker kill); the agent restarts it
        agent, coopsched, ingress, torctl, gateway, redis, ovs (ovs-vswitchd)
                   the process in run/NAME.pid; then deploy/local/up.sh starts what is missing
     and the time until it recovered is measured: the part answers again, every chain's
     instances are ready and every chain delivers again without loss for two seconds
  4. at the end: every chain still deployed and ready, NAT mappings unchanged (trafgen's
     nat_changes), nothing leaked: after the flows' idle timeout the stack looks as it did
     before the traffic (instances, cores, flows, ToR rules, containers, VF links,
     coopsched's sgroups, Redis keys), and after faas-cli remove as it did before the deploy.

Writes bench/results/chaos.json:
  {"seed":N,"duration_s":..,"faults":[{"component":..,"count":N,"lost_packets_max":N,
   "recover_ms_p99":..}],"leaks":{"KIND":N,...},"state_lost":N}
and a fuller record (every fault with its loss per chain, the traffic result) beside it in
bench/results/chaos_detail.json.
Must run as root. Replay a run with the same --seed.
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from keelenv import BIN, ROOT  # noqa: E402
from keelstack import (RUN, coopsched_groups, faas, nf_containers, redis, sh,  # noqa: E402
                       stack_links)

COMPONENTS = ("nf", "agent", "coopsched", "ingress", "torctl", "gateway", "redis", "ovs")
# make up's name for each process (run/NAME.pid)
PROCESS = {"agent": "keel-agent", "coopsched": "keel-coopsched", "ingress": "keel-ingress",
           "torctl": "keel-torctl", "gateway": "keel-gateway", "redis": "redis", "ovs": "ovs-vswitchd"}
# How to tell that a part answers again (its own health check, as make up waits for it).
def _http(url):
    return lambda: sh("curl", "-fsS", "-m", "1", "-o", "/dev/null", url, check=False).returncode == 0


ANSWERS = {
    "agent": _http("http://127.0.0.1:9101/healthz"),
    "coopsched": lambda: sh("ss", "-Hlx", "src", "/run/keel/coopsched.sock", check=False).stdout.strip() != "",
    "ingress": _http("http://127.0.0.1:9103/metrics"),
    "torctl": _http("http://127.0.0.1:9102/metrics"),
    "gateway": _http("http://127.0.0.1:8080/healthz"),
    "redis": lambda: redis("ping", check=False) == ["PONG"],
    "ovs": lambda: sh("ovs-appctl", "-t", "ovs-vswitchd", "version", check=False,
                      env=dict(os.environ, OVS_RUNDIR=str(RUN / "ovs"))).returncode == 0,
}
# Faults of the control plane: no packet of an established flow may be lost to them.
CONTROL_PLANE = ("gateway", "agent", "torctl", "redis", "ingress")
CHAINS = ("chain1", "chain2", "chain3")
RESULT = ROOT / "bench" / "results" / "chaos.json"
TOR_MGMT = RUN / "ovs" / "keel-tor.mgmt"
FLOW_IDLE_S = 10  # the ToR rules' idle timeout (torctl)
# keel-torctl's rules per instance beyond its chain's: the reinject rule, the rule that
# sends the ingress' in-band control frames (the handover's markers, flow moves) straight to
# it, and the rule that sends the flow moves' frames it returns back to the ingress.
RULES_PER_INSTANCE = 3


def say(msg: str) -> None:
    print(f"chaos: {msg}", flush=True)


def scenario(warm: float, seconds: float) -> dict:
    """keel-trafgen's scenario: stack.yml's chains at a steady, modest rate for warm + seconds:
    chain1's and chain2's flows are short (new ones all the time), chain3's eight flows all
    open during the first `warm` seconds and live to the end."""
    def chain(name, net, lifetime, new_per_s, extra):
        return {"name": name, "dst_net": net, "proto": "udp", "dport": 5001, "sizes": [[256, 1], [1024, 2]],
                "flow_lifetime_s": lifetime,
                "phases": [{"name": "steady", "seconds": warm + seconds, "mbps": 2.0, "new_flows_per_s": new_per_s}],
                **extra}
    c2 = chain("chain2", "198.18.2.0/24", 15, 0.5, {
        "expect": {"encrypt": {"key": "000102030405060708090a0b0c0d0e0f", "iv": "0f0e0d0c0b0a09080706050403020100"}},
        "http": {"host": "example.com", "path": "/index.html", "blocked_path": "/ads/banner.gif",
                 "blocked_fraction": 0.0}})
    c2.update(proto="tcp", dport=80)
    return {"chains": [
        chain("chain1", "198.18.1.0/24", 15, 0.5, {"expect": {"vlan": 7, "dst_mac": "02:00:00:00:01:01"}}),
        c2,
        # established flows only once the faults begin: its NAT mappings must survive every
        # fault, and no control-plane fault may cost them a packet
        chain("chain3", "198.18.3.0/24", math.ceil(warm + seconds), 0, {
            "expect": {"snat": {"ip": "198.18.100.1", "ports": [1024, 65535]}},
            "phases": [{"name": "open", "seconds": warm, "mbps": 2.0, "new_flows_per_s": 8 / warm},
                       {"name": "established", "seconds": seconds, "mbps": 2.0, "new_flows_per_s": 0}]}),
    ]}


class Traffic(threading.Thread):
    """keel-trafgen in the background; records each of its per-second lines (loss so far per
    chain, delivered Mbps) with the wall-clock time it arrived."""

    LINE = re.compile(r"(\w+) ([\d.]+)/([\d.]+) Mbps (\d+) flows p99 \d+us loss (\d+) wrong (\d+)")

    def __init__(self, warm: float, seconds: float, out: Path):
        super().__init__(daemon=True)
        self.out = out
        self.ticks = []  # (wall time, {chain: (delivered_mbps, loss so far, wrong packets so far)})
        path = RUN / "chaos-scenario.json"
        path.write_text(json.dumps(scenario(warm, seconds)))
        self.proc = subprocess.Popen([str(BIN / "keel-trafgen"), "--scenario", str(path), "--out", str(out),
                                      "--drain-ms", "2000"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)

    def run(self):
        for line in self.proc.stderr:
            if line.startswith("t="):
                self.ticks.append((time.time(), {m[1]: (float(m[3]), int(m[5]), int(m[6]))
                                                 for m in self.LINE.finditer(line)}))

    def at(self, t: float, what: int) -> dict:
        """Per chain, packets lost (what=1, trafgen's live count) or delivered wrong (what=2) so
        far, at the last tick before t."""
        before = [tk for w, tk in self.ticks if w <= t]
        return {c: v[what] for c, v in before[-1].items()} if before else {}

    def flowing_since(self, t: float):
        """The start of the first two-second stretch after t in which no chain lost a packet and
        each delivered; None if there is none yet."""
        ticks = [(w, tk) for w, tk in self.ticks if w > t]
        for i in range(1, len(ticks)):
            (w0, a), (w1, b) = ticks[i - 1], ticks[i]
            prev = ticks[i - 2][1] if i >= 2 else next((tk for w, tk in reversed(self.ticks) if w <= t), a)
            if all(c in a and c in b and c in prev and a[c][1] == prev[c][1] and b[c][1] == a[c][1]
                   and a[c][0] > 0 and b[c][0] > 0 for c in CHAINS):
                return w0 - 1.0  # the tick reports the second before it
        return None


def tor_rules() -> int:
    out = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", f"unix:{TOR_MGMT}", check=False).stdout
    return sum(1 for line in out.splitlines() if "actions=" in line)


def topology() -> dict:
    r = sh("curl", "-fsS", "-m", "5", "-u", f"admin:{(RUN / 'secrets' / 'basic-auth-password').read_text().strip()}",
           "http://127.0.0.1:8080/system/keel/topology", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def group_instance(group: str) -> str:
    """coopsched's group (and the NF state's) name of an instance, CHAIN.N, as CHAIN/N."""
    chain, _, n = group.rpartition(".")
    return f"{chain}/{n}"


def snapshot() -> dict:
    """What the stack holds, counted, and what it holds that no instance of the gateway's
    accounts for (orphans)."""
    topo = topology()
    chains = [c for c in topo.get("chains", []) if c["name"] in CHAINS]
    insts = [sg for v in instances_of(topo).values() for sg in v]
    ids = {sg["instance"] for sg in insts}
    containers = nf_containers()
    groups = coopsched_groups()
    state_keys = redis("--scan", "--pattern", "keel:state:*", check=False)
    return {
        "instances": len(insts),
        "pooled": sum(1 for sg in insts if sg["state"] != "attached"),
        "cores": sum(1 for w in topo.get("workers", []) for core in w["cores"] if core["sgroups"]),
        "flows": sum(c.get("flows", 0) for c in chains),
        "rules": tor_rules(),
        "containers": len(containers),
        "vf_links": sum(1 for n in stack_links() if n.startswith("keelvf")),
        "sgroups": len(groups),
        "redis_keys": len(redis("--scan", "--pattern", "keel:*", check=False)),
        "orphans": {
            "container": sum(1 for c in containers if re.search(r"com\.keel\.instance=([^,]+)", c["Labels"])
                             and re.search(r"com\.keel\.instance=([^,]+)", c["Labels"])[1] not in ids),
            "sgroup": sum(1 for g in groups if group_instance(g) not in ids),
            "redis_key": sum(1 for k in state_keys if len(k.split(":")) > 3 and group_instance(k.split(":")[3]) not in ids),
        },
    }


def leaks(idle: dict, after: dict, pool_max: int = 2) -> dict:
    """What the stack holds after the traffic (flows expired) that it should not: flows and
    cores still held, idle instances beyond the pool's bound (keel-gateway --pool-max), and
    containers, VF links, sgroups, ToR rules and NF state that no instance accounts for (each
    instance has one VF link, one sgroup, RULES_PER_INSTANCE ToR rules beyond the chains';
    its containers and NF state carry its name)."""
    grown = after["instances"] - idle["instances"]
    out = {"flow": after["flows"], "core": after["cores"],
           "instance": max(0, after["pooled"] - pool_max * len(CHAINS)),
           "veth": max(0, after["vf_links"] - after["instances"]),
           "rule": max(0, after["rules"] - idle["rules"] - RULES_PER_INSTANCE * grown)}
    out.update({k: max(0, v - idle["orphans"][k]) for k, v in after["orphans"].items()})
    return out


def leaks_after_remove(before_deploy: dict, removed: dict) -> dict:
    """After faas-cli remove of everything: the stack as before the deploy."""
    keys = {"instances": "instance", "cores": "core", "flows": "flow", "rules": "rule", "containers": "container",
            "vf_links": "veth", "sgroups": "sgroup", "redis_keys": "redis_key"}
    return {kind: max(0, removed[k] - before_deploy[k]) for k, kind in keys.items()}


def wait(what: str, fn, timeout: float, every=0.2):
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = fn()
            if v:
                return v
        except Exception:  # noqa: BLE001 - a part is down: try again
            pass
        time.sleep(every)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


def instances_of(topo: dict) -> dict:
    """Each chain's instances on the workers (pooled and attached): chain -> [instance]."""
    out = {}
    for w in topo.get("workers", []):
        for sg in w.get("pool", []) + [sg for core in w["cores"] for sg in core["sgroups"]]:
            out.setdefault(sg["chain"], []).append(sg)
    return out


def not_ready(topo: dict) -> list:
    """stack.yml's chains that are not whole: not deployed, or a server chain without an
    instance or with one that is not ready."""
    chains = {c["name"]: c for c in topo.get("chains", [])}
    insts = instances_of(topo)
    return [name for name in CHAINS if name not in chains or not chains[name]["switch_only"] and (
        not insts.get(name) or any(sg["phase"] != "ready" for sg in insts[name]))]


def chains_ready() -> bool:
    topo = topology()
    return bool(topo) and not not_ready(topo)


def _catch(fn, errors: list) -> None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - handed to the caller
        errors.append(e)


def up() -> None:
    r = sh(str(ROOT / "deploy" / "local" / "up.sh"), "--bin", str(BIN), check=False, timeout=300, cwd=ROOT)
    if r.returncode:
        raise RuntimeError("deploy/local/up.sh failed:\n" + (r.stdout + r.stderr)[-2000:])


def kill(component: str, rng: random.Random) -> str:
    """Kills the component with SIGKILL; returns what was killed."""
    if component == "nf":
        running = sorted((c for c in nf_containers() if c["State"] == "running"), key=lambda c: c["Names"])
        victim = rng.choice(running)
        r = sh("docker", "kill", "-s", "KILL", victim["ID"], check=False)
        if r.returncode:
            raise RuntimeError(f"docker kill {victim['Names']}: {r.stderr.strip()}")
        return f"container {victim['Names']} {victim['ID']}"
    name = PROCESS[component]
    pid = int((RUN / f"{name}.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    # make up writes run/NAME.log anew when it starts the part again: keep the dead one's
    keep = RUN / "chaos-logs"
    keep.mkdir(exist_ok=True)
    if (RUN / f"{name}.log").exists():
        shutil.copy(RUN / f"{name}.log", keep / f"{name}-{pid}.log")
    wait(f"{name} (pid {pid}) to die", lambda: gone(pid), 10, every=0.02)
    return f"{name} pid {pid}"


def gone(pid: int) -> bool:
    """The process has exited with all its threads: its sockets and ports are free. A leader that
    is a zombie may still have threads tearing down (keel-ingress's DPDK ports), which hold the
    process's descriptors, its metrics port among them, until the last one exits."""
    try:
        zombie = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
        return zombie and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def recover(component: str, what: str, t_kill: float, traffic: Traffic, limit: float) -> dict:
    """Restarts what the kill stopped and waits until the stack is whole; returns the ms from the
    kill until the part was back (restart_ms), every chain ready (ready_ms) and every chain
    delivering without loss (flowing_ms, the end of the outage: recover_ms)."""
    if component == "nf":
        cid = what.split()[2]

        def state():
            return next((c["State"] for c in nf_containers() if c["ID"] == cid), "gone")
        # docker marks it exited; then the agent starts it again or replaces its instance
        wait(f"{what} to stop", lambda: state() != "running", 10, every=0.05)
        wait(f"the agent to restart or replace {what}", lambda: state() in ("running", "gone"), limit)
        answers = time.time()
    else:
        # make up's script in the background (it checks every part, which takes seconds);
        # meanwhile, when the part itself answers again
        failed = []
        upper = threading.Thread(target=lambda: _catch(up, failed), daemon=True)
        upper.start()
        try:
            answers = wait(f"{component} to answer again", ANSWERS[component], limit, every=0.05) and time.time()
        except TimeoutError as e:
            upper.join(timeout=10)
            raise RuntimeError(f"{e}; deploy/local/up.sh: {failed[0] if failed else 'still running'}") from e
        upper.join(timeout=limit)
        if failed or upper.is_alive():
            raise RuntimeError(f"deploy/local/up.sh: {failed[0] if failed else 'did not finish'}")
    restarted = time.time()
    wait("every chain's instances to be ready", chains_ready, limit - (time.time() - t_kill))
    ready = time.time()
    flowing = wait("every chain to deliver again without loss",
                   lambda: traffic.flowing_since(t_kill), limit - (time.time() - t_kill), every=0.5)
    ms = {k: round((v - t_kill) * 1000) for k, v in
          (("answers_ms", answers), ("restart_ms", restarted), ("ready_ms", ready),
           ("flowing_ms", max(flowing, t_kill)))}
    ms["recover_ms"] = max(ms["ready_ms"], ms["flowing_ms"])
    return ms


def detail_file(out: Path) -> Path:
    """Where the fuller record of a run goes: beside its result, NAME_detail.json."""
    return out.with_name(out.stem + "_detail.json")


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)] if xs else None


def run(seconds: float, interval: float, seed: int, out: Path, settle: float = 45, count: int = 0) -> dict:
    """The chaos run on a stack that is up and logged in (faas-cli); returns the result. Faults
    are injected for `seconds`, or, with count, until count faults were (however long their
    recoveries take)."""
    rng = random.Random(seed)
    t0 = time.time()
    say(f"seed {seed}, {seconds:.0f} s of faults, one every {interval:.0f} s")
    before_deploy = snapshot()
    r = faas("deploy", "-f", "stack.yml", timeout=300)
    if r.returncode:
        raise RuntimeError("faas-cli deploy -f stack.yml failed:\n" + r.stdout + r.stderr)
    wait("stack.yml's chains to be ready", chains_ready, 180, every=1)
    idle = snapshot()
    say(f"deployed; before the traffic: {idle}")

    warm, cool = 10.0, 20.0
    # The traffic is long enough for slow recoveries; it is stopped (SIGINT: keel-trafgen drains
    # and writes its result) `cool` seconds after the last fault.
    slack = 240.0
    traffic = Traffic(warm, seconds + cool + slack, RUN / "chaos-traffic.json")
    traffic.start()
    try:
        time.sleep(warm)
        faults, order = [], []
        started = time.time()
        end, last = started + seconds, started + seconds + slack - 2 * interval
        while (len(faults) < count if count else time.time() < end) and time.time() < last:
            if not order:
                order = list(COMPONENTS)
                rng.shuffle(order)
            component = order.pop()
            t_kill = time.time()
            try:
                what = kill(component, rng)
            except RuntimeError as e:
                say(f"t={t_kill - t0:.0f}s could not kill {component}: {e}")
                time.sleep(1)
                continue
            say(f"t={t_kill - t0:.0f}s killed {component} ({what})")
            try:
                ms = recover(component, what, t_kill, traffic, limit=90)
                say(f"  recovered in {ms['recover_ms']} ms ({ms})")
            except (TimeoutError, RuntimeError) as e:
                ms = {"recover_ms": None}
                say(f"  NOT recovered: {e}")
                log = RUN / f"{PROCESS.get(component, '')}.log"
                if component in PROCESS and log.exists():  # the failed start's, before up.sh writes it anew
                    shutil.copy(log, RUN / "chaos-logs" / f"{log.stem}-not-recovered-{round(t_kill - t0)}.log")
                    say("  its log: " + " | ".join(log.read_text().splitlines()[-5:]))
                up()  # whatever it takes to go on
            faults.append({"component": component, "what": what, "t_s": round(t_kill - t0, 1), **ms})
            time.sleep(max(0.0, t_kill + interval - time.time()))
        injected = time.time() - started
        time.sleep(cool)
        traffic.proc.send_signal(signal.SIGINT)
        traffic.proc.wait(timeout=60)
    except BaseException:
        traffic.proc.kill()  # a fault run that broke: no traffic left behind
        raise
    traffic.join(timeout=10)
    # Each fault's loss: what trafgen counted lost from the tick before the kill to the tick
    # before the next kill (the last's: until the cool-down began, before the traffic stopped).
    bounds = [f["t_s"] + t0 for f in faults]
    bounds.append(max(bounds[-1] + interval, time.time() - cool) if bounds else time.time())
    for i, f in enumerate(faults):
        for what, key in ((1, "lost_by_chain"), (2, "wrong_by_chain")):
            a, b = traffic.at(bounds[i] - 1, what), traffic.at(bounds[i + 1] - 1, what)
            f[key] = {c: max(0, b.get(c, 0) - a.get(c, 0)) for c in CHAINS}
        f["lost_packets"] = sum(f["lost_by_chain"].values())
    result = json.loads(traffic.out.read_text())

    # Leaks: once the flows' idle timeout has passed, the stack looks as before the traffic;
    # once everything is removed, as before the deploy.
    say(f"traffic done; waiting for the flows to expire and the controller to settle (up to {settle:.0f} s)")
    t_end = time.time() + settle
    after = snapshot()
    while time.time() < t_end and any(leaks(idle, after).values()):
        time.sleep(2)
        after = snapshot()
    leaked = leaks(idle, after)
    missing = not_ready(topology())
    for name in faas("list", "-q").stdout.split():
        faas("remove", name)
    removed = before_deploy
    try:
        removed = wait("faas-cli remove to leave nothing", lambda: (lambda s: s if not any(
            leaks_after_remove(before_deploy, s).values()) else None)(snapshot()), 60, every=1)
    except TimeoutError:
        removed = snapshot()
    for k, v in leaks_after_remove(before_deploy, removed).items():
        leaked[k] = max(leaked.get(k, 0), v)

    state_lost = sum(c.get("nat_changes", 0) for c in result["chains"])
    out_faults = []
    for comp in COMPONENTS:
        fs = [f for f in faults if f["component"] == comp]
        if fs:
            rec = [f["recover_ms"] for f in fs]
            out_faults.append({"component": comp, "count": len(fs),
                               "lost_packets_max": max(f["lost_packets"] for f in fs),
                               "recover_ms_p99": None if None in rec else p99(rec)})
    res = {"seed": seed, "duration_s": round(injected), "faults": out_faults, "leaks": leaked,
           "state_lost": state_lost}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    detail = {**res, "faults_each": faults, "chains_not_ready": missing,
              "wrong_packets": sum(c["transform_errors"] for c in result["chains"]), "snapshots": {
        "before_deploy": before_deploy, "before_traffic": idle, "after_traffic": after, "after_remove": removed},
        "traffic": {k: result[k] for k in ("chains", "malformed_sent", "foreign_rx") if k in result},
        "method": "lost_packets: keel-trafgen's live loss count (all chains) from the tick before the kill to the "
                  "tick before the next kill; recover_ms: from SIGKILL until the part answers again, every "
                  "chain's instances are ready and every chain delivered for two seconds without loss"}
    detail_path = detail_file(out)
    detail_path.write_text(json.dumps(detail, indent=1) + "\n")
    say(f"written to {out} (details in {detail_path})")
    for f in out_faults:
        say(f"  {f['component']:<10} x{f['count']}  lost at most {f['lost_packets_max']:>6} packets, "
            f"recovered in {f['recover_ms_p99']} ms (p99)")
    say(f"  leaks {leaked}; NAT mappings changed {state_lost}; chains not ready {missing}; "
        f"wrong packets {detail['wrong_packets']}; "
        f"total lost {sum(c['loss'] for c in result['chains'])} of {sum(c['offered_pkts'] for c in result['chains'])}")
    return {**detail}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("CHAOS_SECONDS", 300)),
                    help="how long faults are injected (default $CHAOS_SECONDS, else 300)")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED") or time.time()) % 100000,
                    help="seeds which component dies when and which NF container (default $CHAOS_SEED, "
                         "else the time)")
    ap.add_argument("--interval", type=float, default=float(os.environ.get("CHAOS_INTERVAL", 20)),
                    help="seconds from one fault to the next (default $CHAOS_INTERVAL, else 20)")
    ap.add_argument("--out", default=str(RESULT), help="result file (default %(default)s)")
    ap.add_argument("--down", action="store_true", help="make down at the end")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("chaos: run it as root (it starts the local stack and kills its parts)")
    sys.path.insert(0, str(ROOT / "deploy" / "local"))
    import demo  # noqa: E402 - deploy/local/demo.py: images and faas-cli login as make demo does
    up()
    f = demo.Faas()
    demo.ensure_images(f, BIN)
    f.login()
    try:
        res = run(args.seconds, args.interval, args.seed, Path(args.out))
    finally:
        if args.down:
            sh("make", "-s", "down", check=False, timeout=300, cwd=ROOT)
    bad = [f for f in res["faults"] if f["recover_ms_p99"] is None] or any(res["leaks"].values()) or \
        res["state_lost"] or res["chains_not_ready"] or res["wrong_packets"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
