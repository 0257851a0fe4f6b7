# SPDX-License-Identifier: Apache-2.0
"""What an attached chain that has no traffic costs its managed core, polling and napping.

A two-NF chain (keel-nf under keel-coopsched on core 1, its port a veth in a network
namespace of this bench's own) takes a few packets, then goes quiet. For each mode,
side by side in one run:

  polling  keel-nf --idle-nap-after-ms 0: position 0 polls its port at every turn
  napping  the default: after 100 ms without a packet position 0 sleeps 10-100 us between
           polls, holding the turn, and the other positions sleep until it has a batch

it measures, while the chain is quiet:
  - chain_cpu_share_quiet_first_s (150 ms to 950 ms into the quiet) and
    chain_cpu_share_quiet_longer (--seconds from 1.45 s on, past the 1 s after which the
    naps grow to 1 ms): the chain's threads' CPU time (coopsched's schedstat account) / wall;
  - other_thread_share_quiet_longer: what a SCHED_OTHER busy loop confined to the managed
    core got meanwhile (an NF's statistics or Redis thread, or a new instance starting up);
and, for --probes packets each sent after --gap-ms of quiet (and --long-probes after 1.5 s),
the time from the send to the chain's copy coming back on the veth (kernel timestamps):
first_packet_us_p50 / _p99 (polling: the path alone; napping: plus the nap it lands in).

    python bench/idle_core.py --out bench/results/idle_core.json
"""
import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chain_length as cl  # noqa: E402 - keel-coopsched and the bench's tmpfs, shared
from chain_length import BIN, CORE, pb  # noqa: E402

NS = f"keelidle{os.getpid() % 100000}"
SEND_IF, CHAIN_IF = "keelidlea", "keelidleb"
SO_TIMESTAMPNS = 35
LONG_GAP_MS = 1500  # quiet before a probe after a long idle (keel-nf's long idle: 1 s)


def udp_frame(i: int) -> bytes:
    payload = b"KEEL" + struct.pack("!I", i) + b"\xff" * 18
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + len(payload), 0, 0, 64, 17, 0,
                     bytes([198, 18, 0, 1]), bytes([198, 19, 0, 1]))
    udp = struct.pack("!HHHH", 1000 + i % 1000, 5001, 8 + len(payload), 0)
    return bytes.fromhex("020000000002020000000001") + b"\x08\x00" + ip + udp + payload


def group(stub, gid):
    return next((g for g in stub.Status(pb.StatusRequest()).groups if g.group_id == gid), None)


def wait_for(cond, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def other_thread_share(seconds: float) -> float:
    """The CPU share a SCHED_OTHER busy loop confined to the managed core gets over |seconds|
    (an NF's statistics or Redis thread, or a new instance starting up, gets no more)."""
    code = ("import os, time\nend = time.monotonic() + %f\nwhile time.monotonic() < end: pass\n"
            "t = os.times(); print(t.user + t.system)" % seconds)
    out = subprocess.run(["taskset", "-c", str(CORE), sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=seconds + 60).stdout
    return float(out) / seconds


def probe(n: int, gap_ms: float) -> list[float]:
    """Sends n frames from inside the namespace, each after gap_ms of quiet, and returns each
    one's time to come back (µs, from the kernel's send and receive timestamps)."""
    code = f"""
import json, select, socket, struct, time
frames = {[udp_frame(100000 + i) for i in range(n)]!r}
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(({SEND_IF!r}, 0))
s.setsockopt(socket.SOL_SOCKET, {SO_TIMESTAMPNS}, 1)
out = []
for f in frames:
    time.sleep({gap_ms / 1000})
    while select.select([s], [], [], 0)[0]:
        s.recvmsg(2048, 256)
    tag = f[-22:-18]
    sent = time.clock_gettime_ns(time.CLOCK_REALTIME)
    s.send(f)
    end = time.monotonic() + 1
    while time.monotonic() < end:
        if not select.select([s], [], [], 0.1)[0]:
            continue
        data, anc, _, addr = s.recvmsg(2048, 256)
        if addr[2] == socket.PACKET_OUTGOING or data[-22:-18] != tag:
            continue
        sec, ns = struct.unpack("qq", anc[0][2][:16])
        out.append((sec * 10**9 + ns - sent) / 1000)
        break
print(json.dumps(out))
"""
    r = subprocess.run(["ip", "netns", "exec", NS, "taskset", "-c", "0", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=n * (gap_ms / 1000 + 1) + 60)
    if r.returncode:
        sys.exit("idle_core: probe failed: " + r.stderr)
    return json.loads(r.stdout)


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def send_now() -> None:
    """One frame into the chain (ends its quiet: the idle clocks start again)."""
    code = (f"import socket\ns = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(({SEND_IF!r}, 0))\n"
            f"s.send({udp_frame(99999)!r})\n")
    subprocess.run(["ip", "netns", "exec", NS, sys.executable, "-c", code], check=True, timeout=30)


def run_mode(tmp: str, stub, gid: str, extra: list[str], seconds: float, probes: int, gap_ms: float,
             long_probes: int) -> dict:
    pktbuf = f"{tmp}/huge/{gid}"
    procs = []
    try:
        for k in range(2):
            args = ["ip", "netns", "exec", NS, str(BIN / "keel-nf"), "--nf", f'stamp={{"index":{k}}}',
                    "--chain-id", gid, "--position", str(k), "--of", "2", "--pktbuf", pktbuf,
                    "--coopsched", stub.target, *extra]
            if k == 0:
                args += ["--", "--no-pci", "--no-huge", "-m", "256", "--log-level=error", "--no-telemetry",
                         f"--file-prefix=keelidle{gid}", "--vdev", f"net_af_packet0,iface={CHAIN_IF}"]
            procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            if k == 0 and not wait_for(lambda: os.path.exists(pktbuf), 10):
                sys.exit("idle_core: position 0 did not start: " + procs[0].stderr.read())
        if not wait_for(lambda: group(stub, gid) is not None, 10):
            sys.exit("idle_core: the chain never registered with keel-coopsched")
        stub.Attach(pb.AttachRequest(group_id=gid, core=CORE))
        lat = probe(probes, gap_ms)
        long_lat = probe(long_probes, LONG_GAP_MS)
        send_now()
        time.sleep(0.15)  # quiet for more than the nap time, less than the long idle
        g0, t0 = group(stub, gid).cpu_ns, time.monotonic()
        time.sleep(0.8)
        short = (group(stub, gid).cpu_ns - g0) / 1e9 / (time.monotonic() - t0)
        time.sleep(0.5)  # quiet for over a second now
        g0, t0 = group(stub, gid).cpu_ns, time.monotonic()
        time.sleep(seconds)
        long = (group(stub, gid).cpu_ns - g0) / 1e9 / (time.monotonic() - t0)
        other = other_thread_share(seconds)
        return {"chain_cpu_share_quiet_first_s": round(short, 4), "chain_cpu_share_quiet_longer": round(long, 4),
                "other_thread_share_quiet_longer": round(other, 4),
                "first_packet_us_p50": round(quantile(lat, 0.5), 1),
                "first_packet_us_p99": round(quantile(lat, 0.99), 1),
                "first_packet_us_mean": round(statistics.fmean(lat), 1) if lat else 0.0,
                "probes_back": len(lat),
                "first_packet_after_long_idle_us_p50": round(quantile(long_lat, 0.5), 1),
                "first_packet_after_long_idle_us_max": round(max(long_lat, default=0.0), 1),
                "long_probes_back": len(long_lat)}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if group(stub, gid) is not None:
            stub.Unregister(pb.UnregisterRequest(group_id=gid))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "idle_core.json"))
    p.add_argument("--seconds", type=float, default=3.0, help="quiet window per mode")
    p.add_argument("--probes", type=int, default=100, help="first packets per mode")
    p.add_argument("--gap-ms", type=float, default=150.0, help="quiet before each probe (above the 100 ms nap time)")
    p.add_argument("--long-probes", type=int, default=10, help=f"first packets after {LONG_GAP_MS} ms of quiet")
    a = p.parse_args()
    if os.geteuid() != 0 or (os.cpu_count() or 1) < 2:
        sys.exit("idle_core: needs root (SCHED_FIFO, a network namespace) and a second core for coopsched")
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        subprocess.run(["ip", "-n", NS, "link", "add", SEND_IF, "type", "veth", "peer", "name", CHAIN_IF], check=True)
        for dev in (SEND_IF, CHAIN_IF):
            subprocess.run(["ip", "-n", NS, "link", "set", dev, "up"], check=True)
        with cl.bench_dir() as tmp, cl.coopsched(tmp) as stub:
            rows = {"polling": run_mode(tmp, stub, "polls", ["--idle-nap-after-ms", "0"], a.seconds, a.probes,
                                        a.gap_ms, a.long_probes),
                    "napping": run_mode(tmp, stub, "naps", [], a.seconds, a.probes, a.gap_ms, a.long_probes)}
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)
    result = {**rows, "chain": "2 x keel-nf stamp under keel-coopsched, net_af_packet on a veth",
              "quiet_seconds": a.seconds, "probes": a.probes, "gap_ms": a.gap_ms,
              "long_gap_ms": LONG_GAP_MS, "nap_after_ms": 100, "nap_us": [10, 100], "long_idle_ms": 1000,
              "long_nap_us_max": 1000}
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
