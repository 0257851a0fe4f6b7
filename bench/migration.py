# SPDX-License-Identifier: Apache-2.0
"""Live flow moves through keel's whole stack: the "moves" part of bench/results/migration.json.

Brings the local stack up with flow moves on (deploy/local/up.sh --flow-moves; taken down
again at the end only if this script started it: a stack that runs already must run with
them), deploys the chain `migrating` (NAT in a container; an instance takes --per-instance
flows, com.openfaas.scale.target) with faas-cli, and sends 2 × --per-instance UDP flows from
the source netns to the sink netns, each a packet every --gap-ms for --seconds, while the sink
counts every packet per flow, in order. The first --per-instance flows fill migrating/0, the
others attach migrating/1. With the traffic running, it moves flows through the gateway
(POST /system/keel/moves; the ingress holds each moving flow's packets, its NAT state travels
in band from one instance to the other, and the held packets follow it in order):

  - --rounds moves of --batch flows (default 100), each from the instance that carries more
    flows to the other (the source keeps at least one flow, so neither instance is reclaimed);
  - then --singles moves of one flow each, the same way.

Figures (the issue's schema; each from this run):

  pause_us_p50, pause_us_p99  each moved flow's pause as the ingress measured it: its first
                              packet held (the move's start if none came) to its rule to the
                              new instance confirmed; over every flow moved
  batch100_ms_p99             a move of --batch flows, POST to answer (the gateway waits for
                              the ingress's report): p99 over the --rounds moves
  cpu_us_per_move             CPU the control path spent on the moves (keel-ingress,
                              keel-gateway, keel-torctl, redis, ovs-vswitchd: run/*.pid) beyond
                              what it spent on the same traffic without moves (measured first,
                              as a rate), per flow moved. The NF instances' own work on the
                              move frames runs on the managed core and is not in it.
  lost, reordered             packets the sink missed, and packets that came after a later one
                              of their flow, over the whole run (flowgen.py recv)

The moves' reports and the sink's per-flow counts are left in run/migration-moves.json and
run/migration-sink.json. It also checks that each flow kept one NAT mapping at the sink (the NAT state moved with it:
a flow seen from two source address:ports is named on stderr, and the run fails). The "sim"
part of the file (keel-sim migration) is kept as it is.

    python bench/migration.py --out bench/results/migration.json
"""
import argparse
import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from flow_setup import FAAS_CLI, FLOWGEN, GATEWAY, ROOT, RUN, cpu_seconds, sh

CHAIN = "migrating"
NET = "198.18.6.0/24"
# The control path of a move (run/NAME.pid): the ingress holds and carries the frames, the
# gateway sends the move and applies the report, torctl and the switch change the rules,
# redis keeps the assignments.
CONTROL_PROCS = ("keel-ingress", "keel-gateway", "keel-torctl", "redis", "ovs-vswitchd")


def faas(*args, check=True):
    env = {**os.environ, "HOME": str(RUN / "faas-home")}
    return subprocess.run([FAAS_CLI, *args, "-g", GATEWAY], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300, check=check)


def log(*args) -> None:
    print("migration:", *args, file=sys.stderr, flush=True)


def quantile(q: float, xs: list[float]) -> float:
    """The q-quantile of xs, linear between closest ranks (numpy's default)."""
    if not xs:
        raise ValueError("no samples")
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def write_moves(path: Path, moves: dict) -> None:
    """Sets the "moves" part of the migration.json at path; its "sim" part (keel-sim migration)
    stays. A file that is not such a JSON object is an error, and is not overwritten."""
    sim = []
    if path.exists():
        try:
            cur = json.loads(path.read_text())
        except ValueError as e:
            sys.exit(f"migration: {path}: not a migration.json ({e}); not overwritten")
        if not isinstance(cur, dict) or not isinstance(cur.get("sim", []), list):
            sys.exit(f"migration: {path}: not a migration.json (want {{\"moves\": ..., \"sim\": [...]}}); not overwritten")
        sim = cur.get("sim", [])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"moves": moves, "sim": sim}, indent=2) + "\n")


def control_cpu() -> float:
    """CPU seconds so far of the control path's processes."""
    total = 0.0
    for name in CONTROL_PROCS:
        try:
            total += cpu_seconds(int((RUN / f"{name}.pid").read_text()))
        except (OSError, ValueError) as e:
            sys.exit(f"migration: no CPU figure for {name} (run/{name}.pid): {e}")
    return total


def instances() -> dict[str, dict]:
    """The chain's instances as faas-cli describe shows them: id -> {state, flows, phase}."""
    out = {}
    for line in faas("describe", CHAIN).stdout.splitlines():
        if "com.keel.instances" in line:
            for m in re.finditer(r"(\S+/\d+) (\w+) worker=\S+ vlan=(\d+) core=(\S+) flows=(\d+) phase=(\w+)", line):
                out[m[1]] = {"state": m[2], "flows": int(m[5]), "phase": m[6]}
    return out


def wait_for(what: str, fn, timeout: float = 90, every: float = 0.5):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    sys.exit(f"migration: {what}: not within {timeout:.0f} s (last: {last!r})")


def move(password: str, src: str, dst: str, batch: int, limit: int) -> dict:
    """POST /system/keel/moves: the gateway's report (controller.MoveReport)."""
    body = json.dumps({"from": src, "to": dst, "batch": batch, "limit": limit}).encode()
    req = urllib.request.Request(GATEWAY + "/system/keel/moves", data=body, method="POST")
    req.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"migration: POST /system/keel/moves {src} -> {dst}: {e.code} {e.read().decode(errors='replace').strip()}")


def stack_text(per_instance: int) -> str:
    return (f"version: 1.0\nprovider:\n  name: openfaas\n  gateway: {GATEWAY}\nfunctions:\n  {CHAIN}:\n"
            f"    image: keel/chain:latest\n    labels:\n      com.keel.kind: chain\n"
            f"      com.openfaas.scale.type: capacity\n      com.openfaas.scale.target: \"{per_instance}\"\n"
            f"    annotations:\n"
            f"      com.keel.chain: \"NAT(external_ip='198.18.100.6', port_range=[1024, 65535])\"\n"
            f"      com.keel.filter: \"dst net {NET}\"\n      com.keel.slo: \"p99=1ms,t_min=10Mbps\"\n")


def gateway_moves_on() -> bool:
    """Whether the running keel-gateway has --flow-moves."""
    pid = (RUN / "keel-gateway.pid").read_text().strip()
    try:
        return b"--flow-moves" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False  # not running: up.sh starts it


def run(a, password: str) -> tuple[dict, bool]:
    """The measured run: the "moves" figures, and whether a flow's NAT mapping changed."""
    yml = RUN / "migration-stack.yml"
    yml.write_text(stack_text(a.per_instance))
    faas("deploy", "-f", str(yml))
    wait_for(f"{CHAIN}'s pooled instance ready", lambda: any(i["phase"] == "ready" for i in instances().values()))
    flows = 2 * a.per_instance
    recv = subprocess.Popen(["ip", "netns", "exec", "keelsink", sys.executable, str(FLOWGEN), "recv",
                             "--duration", str(a.seconds + 2), "--quiet", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if recv.stderr.readline().strip() != "ready":
        sys.exit("migration: the sink did not start")
    senders: list[subprocess.Popen] = []
    t_start = time.monotonic()

    def send(first: int, n: int) -> None:
        """n UDP flows to the chain's prefix, opened within half a second, a packet every --gap-ms
        until --seconds after the first flow of the run."""
        left = a.seconds - (time.monotonic() - t_start)
        senders.append(subprocess.Popen(
            ["ip", "netns", "exec", "keelsrc", sys.executable, str(FLOWGEN), "send", "--rate", str(2 * n),
             "--duration", "0.5", "--packets", str(int(left * 1000 / a.gap_ms)), "--gap-ms", str(a.gap_ms),
             "--proto", "udp", "--dst-net", NET, "--first-flow", str(first)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))

    try:
        # The first instance's flows; the controller pre-deploys the second instance meanwhile.
        send(500000, a.per_instance)
        wait_for(f"{CHAIN}/0 attached with {a.per_instance} flows and {CHAIN}/1 ready",
                 lambda: (lambda i: i.get(f"{CHAIN}/0", {}).get("flows") == a.per_instance
                          and i.get(f"{CHAIN}/1", {}).get("phase") == "ready")(instances()), timeout=60)
        # One flow finds it full and attaches the second; the others follow once it runs (a burst
        # of new flows at an instance being attached is flow setup's business, not the moves').
        send(500000 + a.per_instance, 1)
        wait_for(f"{CHAIN}/1 attached with a flow",
                 lambda: (lambda i: i.get(f"{CHAIN}/1", {}).get("state") == "attached"
                          and i[f"{CHAIN}/1"]["flows"] == 1)(instances()), timeout=30)
        time.sleep(1)
        send(500000 + a.per_instance + 1, a.per_instance - 1)
        insts = wait_for(f"{flows} flows assigned to two attached instances",
                         lambda: (lambda i: i if sum(x["flows"] for x in i.values()) == flows and
                                  sum(x["state"] == "attached" for x in i.values()) == 2 else None)(instances()),
                         timeout=60)
        log("assigned:", {k: v["flows"] for k, v in insts.items() if v["state"] == "attached"})
        time.sleep(2)  # every rule installed, the traffic steady
        # The control path's CPU rate on this traffic without moves.
        c0, t0 = control_cpu(), time.monotonic()
        time.sleep(a.baseline_s)
        base_rate = (control_cpu() - c0) / (time.monotonic() - t0)
        pauses: list[float] = []
        batched: list[float] = []  # the same, by kind of move
        single: list[float] = []
        batch_ms: list[float] = []
        excess_cpu, moved, failed = 0.0, 0, {}
        reports: list[dict] = []

        def one(batch: int, limit: int) -> dict:
            nonlocal excess_cpu, moved
            att = {k: v for k, v in instances().items() if v["state"] == "attached"}
            src, dst = sorted(att, key=lambda k: -att[k]["flows"])[:2]
            n = min(limit, att[src]["flows"] - 1)
            c0, t0 = control_cpu(), time.monotonic()
            rep = move(password, src, dst, batch, n)
            dt = time.monotonic() - t0
            reports.append({"at_s": round(t0 - t_start, 3), **rep})
            excess_cpu += (control_cpu() - c0) - base_rate * dt
            moved += rep["moved"]
            for b in rep["batches"]:
                for r in b.get("results") or []:
                    if r["moved"]:
                        pauses.append(r["pause_us"])
                        (single if batch == 1 else batched).append(r["pause_us"])
                    else:
                        failed[r.get("why", "")] = failed.get(r.get("why", ""), 0) + 1
                if b.get("error"):
                    failed["error"] = failed.get("error", 0) + b["flows"]
            log(f"{src} -> {dst}: {rep['moved']} of {rep['flows']} moved in",
                ", ".join(f"{b['ms']:.1f} ms" for b in rep["batches"]))
            return rep

        for _ in range(a.rounds):
            rep = one(a.batch, a.batch)
            batch_ms += [b["ms"] for b in rep["batches"] if b["flows"] == a.batch]
            time.sleep(a.settle_s)
        for _ in range(a.singles):
            one(1, 1)
            time.sleep(a.settle_s)
        if time.monotonic() - t_start > a.seconds - 2:
            log(f"warning: the moves ran until {time.monotonic() - t_start:.0f} s of the {a.seconds:.0f} s of traffic: raise --seconds")
        sent = [json.loads(p.communicate(timeout=a.seconds + 120)[0]) for p in senders]
        got = json.loads(recv.communicate(timeout=a.seconds + 120)[0])
        # What happened, for a closer look: every move's report (at_s: seconds since the first
        # flow) and the sink's counts with the order each reordered flow's packets came in.
        (RUN / "migration-moves.json").write_text(json.dumps(reports, indent=1) + "\n")
        (RUN / "migration-sink.json").write_text(json.dumps(got) + "\n")
    finally:
        for p in (*senders, recv):
            if p.poll() is None:
                p.kill()
                p.wait()
    if failed:
        log("flows not moved, by reason:", failed)
    if not pauses or not batch_ms:
        sys.exit("migration: no flow moved: no figures (see the gateway's and the ingress' logs in run/)")
    remapped = got.get("remapped", {})
    if remapped:
        log(f"{len(remapped)} flow(s) reached the sink from more than one NAT mapping:", dict(list(remapped.items())[:10]))
    packets_sent = sum(x["packets"] for x in sent)
    for what, xs in (("batched", batched), ("single", single)):
        if xs:
            log(f"pause of a flow in a {what} move: p50 {quantile(0.5, xs):.0f} µs, p99 {quantile(0.99, xs):.0f} µs ({len(xs)} flows)")
    log(f"sent {packets_sent} packets, received {got['packets']}, reordered {got['reordered']}, "
        f"duplicates {got['duplicates']}; control path {base_rate * 1e3:.1f} ms CPU/s without moves")
    result = {"pause_us_p50": round(quantile(0.50, pauses), 1), "pause_us_p99": round(quantile(0.99, pauses), 1),
              "batch100_ms_p99": round(quantile(0.99, batch_ms), 3),
              "cpu_us_per_move": round(1e6 * max(excess_cpu, 0.0) / max(moved, 1), 1),
              "lost": packets_sent - got["packets"], "reordered": got["reordered"]}
    return result, bool(remapped)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "migration.json"))
    p.add_argument("--per-instance", type=int, default=101, help="flows an instance takes (the first instance's flows)")
    p.add_argument("--batch", type=int, default=100, help="flows per batched move (batch100_ms_p99)")
    p.add_argument("--rounds", type=int, default=6, help="batched moves")
    p.add_argument("--singles", type=int, default=20, help="moves of one flow")
    p.add_argument("--seconds", type=float, default=60, help="of traffic (every flow's)")
    p.add_argument("--gap-ms", type=float, default=50, help="between a flow's packets")
    p.add_argument("--baseline-s", type=float, default=3, help="of traffic without moves, for the CPU baseline")
    p.add_argument("--settle-s", type=float, default=0.5, help="between moves")
    a = p.parse_args()
    if a.per_instance <= a.batch or a.batch < 1 or a.rounds < 1 or a.singles < 0 or a.gap_ms <= 0:
        p.error("--per-instance must exceed --batch (the source keeps a flow); --batch, --rounds ≥ 1, --gap-ms > 0")
    if os.geteuid() != 0:
        sys.exit("migration: needs root (make up, network namespaces)")
    was_up = (RUN / "keel-gateway.pid").exists() and (RUN / "keel-ingress.pid").exists()
    if was_up and not gateway_moves_on():
        sys.exit("migration: the running stack's gateway has no --flow-moves: make down first (this script starts it)")
    sh(str(ROOT / "deploy" / "local" / "up.sh"), "--flow-moves", timeout=900)
    try:
        password = (RUN / "secrets" / "basic-auth-password").read_text().strip()
        env = {**os.environ, "HOME": str(RUN / "faas-home")}
        subprocess.run([FAAS_CLI, "login", "-g", GATEWAY, "-u", "admin", "--password-stdin"], input=password,
                       capture_output=True, text=True, env=env, timeout=30, check=True)
        faas("remove", CHAIN, check=False)
        try:
            moves, remapped = run(a, password)
        finally:
            faas("remove", CHAIN, check=False)
        print(json.dumps(moves), file=sys.stderr, flush=True)
        if remapped:
            sys.exit("migration: a moved flow's NAT mapping changed; not written")
        write_moves(Path(a.out), moves)
    finally:
        if not was_up:
            subprocess.run([str(ROOT / "deploy" / "local" / "down.sh")], capture_output=True, timeout=300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
