#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Galleon Fig. 3 side by side: chains of 1..5 `bpf` NFs on one managed core,
fed 80-byte and 1024-byte packets (--sizes), in these modes (Galleon §7.1):

  single  keel-chain: every NF in one process, no isolation
  keel    one keel-nf process per NF under keel-coopsched, the port receiving
          straight into the chain buffer (no copy; issue 33), B bursts per turn chosen by keel's controller rule (Galleon
          eq. (1)-(3), run through `keel-sim batch`) with T_ctx and the
          copy's cost calibrated from windows at B=1 and B=4
  keel_rx_copy  keel with keel-nf --rx-copy: the port receives into position
          0's own buffers and each packet is copied into the chain buffer
          after NF 1 (Galleon's isolation copy, keel before issue 33), at
          keel's B
  keel_b32  keel at a fixed B = 32 bursts per turn, for comparison with the
          adaptive B (item 3 of issue 15)
  copy    one keel-nf process per NF under keel-coopsched, each NF after the
          first copies every packet into a buffer from its own pool and back
          (EdgeOS/NFVnice isolation by copying), and the first copies it into
          the chain buffer (--rx-copy), one burst per turn: neither
          system batches adaptively. Also measured at keel's B
          (copy_same_batch_mpps).
  nfvnice one keel-nf process per NF under the normal scheduler (SCHED_OTHER,
          CFS, at nice -20 so that other work on the machine takes little
          from it), all on the managed core, each asleep on its own semaphore
          (a futex, keel-nf --wait-futex) until its predecessor posts it a
          batch, with a copy per hop (--copy-each-hop --rx-copy): NFVnice's libnf
          mechanism (NFs woken through semaphores, no cooperative scheduler),
          one burst per turn.
  control (length 1 only) a second keel-chain identical to `single` on its own
          generator port: control/single is 1 on a quiet machine, and its
          spread is the noise floor of every other ratio.

Cycle accounting (issue 15, item 0): every process stamps the TSC around
receive, the NF, the copies, the chain buffer's descriptors, transmit and
its whole turn (chain_sched.h, keel_cycles_kind); the bench reads the
counters of each group from its chain buffer's scheduling page (keel-chain's
from its statistics file) at the two ends of every window and reports, per
mode, cycles a packet by kind, the handoff (predecessor passing the turn to
successor starting: yield, context switch and scheduler), and the share of
the window's wall-clock cycles the stamps account for.

The test NF is `bpf` with 200 filters "udp and dst host H and dst port P"
(25 hosts x 8 ports). The generator's packets go to 198.18.0.2 port 9, so
each meets the 8 filters of its host and matches none: ~600 cycles a packet
here, like Galleon's BPF test NF (509 cycles, §7.3.2).

The machine is shared and noisy, so all modes of a length run at once, each
on its own memif port of one generator: the chain processes start once and
take turns on the managed core (coopsched Attach/Detach for keel and copy,
SIGCONT/SIGSTOP for single, control and nfvnice), in short windows, mode
order rotating each round. Rates are medians over rounds; ratios are medians
of the ratios taken within each round, with a 95 % bootstrap interval. Every mode runs SCHED_FIFO at the same priority, with the
kernel's RT throttling lifted (coopsched --no-rt-throttle), and the chain
buffers are on a tmpfs mounted huge=always (2 MB pages), as keel-nf --help
recommends.

Writes bench/results/chain_length.json. Needs root (SCHED_FIFO) and 2 cores.
"""
import argparse
import contextlib
import json
import mmap
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "build" / "py"))
from keel.v1 import coopsched_pb2 as pb  # noqa: E402
from keel.v1 import coopsched_pb2_grpc as pb_grpc  # noqa: E402

CORE = 1            # the managed core: chains only
GEN_CPU = 0         # the generator and everything else
PACKET_BYTES = 80
BURST = 32          # packets per receive burst (b_v in eq. 1)
FILTERS = [f"udp and dst host 198.18.0.{2 + h} and dst port {1000 + p}" for h in range(25) for p in range(8)]
BPF = {"filters": FILTERS, "action": "drop"}
MAX_BURSTS_PER_TURN = 64  # bursts the chain buffer holds (kMaxBurstsPerTurn, engine.h)
YIELD_TIMEOUT_US = 10_000  # coopsched's default watchdog
WARM_S = 0.15       # after a mode takes the core, before its window opens
MODES = ("single", "keel", "keel_rx_copy", "keel_b32", "copy", "copy_same_batch", "nfvnice")
SIZES = "80,1024"  # packet sizes run by default (--sizes)
FIXED_BURSTS_PER_TURN = 32  # keel_b32's
# keel_cycles_kind (nf-runtime/include/keel/chain_sched.h), in order.
CYCLE_KINDS = ("rx", "rx_idle", "nf", "copy_in", "view", "copy_out", "tx", "sojourn", "busy", "handoff", "turns")
# Offsets in struct keel_chain_sched, at KEEL_SCHED_OFFSET in the buffer file.
SCHED_OFFSET, SCHED_ROUNDS, SCHED_PACKETS, SCHED_CYCLES = 2048, 48, 56, 272


def controller_batch(hz, nf_cycles, io_cycles, copy_cycles, handoff_cycles, p, max_bursts, at=()):
    """The bursts per turn keel's controller picks for these costs (cycles a
    packet) and eq. (1)'s rate in Mpps at each of |at|: Galleon eq. (2)-(3),
    the fewest B with R(B) >= p * R~, where eq. (1) with keel's copies as a
    per-packet term of their own is
      R(B) = f / (S + T_copy + N * T_ctx / (B * b))
    S is the single-thread cost of a packet (receive and transmit included)
    and R~ = f / (S + T_copy), the isolated chain without handoffs: no B buys
    the copies back. The rule is the controller's own (policy.Cost.Batch,
    gateway/internal/policy/cost.go), run through `keel-sim batch`, so the
    bench measures the B the controller would set."""
    args = [str(BIN / "keel-sim"), "batch", "--nf-cycles", ",".join(f"{c:.3f}" for c in nf_cycles),
            "--io-cycles", f"{max(0.0, io_cycles):.3f}", "--copy-cycles", f"{copy_cycles:.3f}",
            "--handoff-cycles", f"{handoff_cycles:.3f}", "--p", str(p), "--fill", str(BURST),
            "--max-bursts", str(max_bursts), "--tsc-hz", str(hz)]
    if at:
        args += ["--at", ",".join(map(str, at))]
    out = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    return out["bursts_per_turn"], {int(k): v / 1e6 for k, v in out["rates_pps"].items()}


def calibrate(tsc_hz, n_nfs, single_mpps, r1_mpps, rb_mpps, b):
    """T_ctx and T_copy as the chain sees them, from eq. (1) at B=1 and B=b
    against the single-thread rate. T_ctx is the yield plus the caches the
    next NF refills after it; T_copy the copy into the chain buffer and out
    at egress."""
    c_single, c1, cb = (tsc_hz / (r * 1e6) for r in (single_mpps, r1_mpps, rb_mpps))
    t_ctx = (c1 - cb) * BURST / (n_nfs * (1 - 1 / b))
    t_copy = cb - c_single - n_nfs * t_ctx / (b * BURST)
    return t_ctx, max(0.0, t_copy)


class Generator:
    """dpdk-testpmd in txonly mode on GEN_CPU, a memif server per port."""

    def __init__(self, tmp, ports):
        self.socks = [f"{tmp}/gen{i}.sock" for i in range(ports)]
        vdevs = [f"--vdev=net_memif{i},role=server,socket={s},socket-abstract=no" for i, s in enumerate(self.socks)]
        # A little ahead of other work on its core (nice -5), so that it keeps
        # up; more would starve the service threads whose samples we read.
        self.proc = subprocess.Popen(
            ["nice", "-n", "-5", "taskset", "-c", str(GEN_CPU), "dpdk-testpmd", f"--lcores=0@{GEN_CPU},1@{GEN_CPU}",
             "--no-pci", "--no-huge", "-m", "1024", f"--file-prefix=keelgen{os.getpid()}", "--log-level=error",
             "--no-telemetry"] + vdevs +
            ["--", "--forward-mode=txonly", f"--txpkts={PACKET_BYTES}", "--auto-start", "--no-lsc-interrupt",
             "--nb-cores=1", "--total-num-mbufs=32768"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 15
        while not all(os.path.exists(s) for s in self.socks):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("dpdk-testpmd did not start")
            time.sleep(0.05)
        time.sleep(2.0)  # testpmd starts forwarding after it listens; a client too early never gets packets

    def vdev(self, port):
        return f"net_memif0,role=client,socket={self.socks[port]},socket-abstract=no"

    def stop(self):
        self.proc.stdin.close()  # testpmd exits on end of input
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ChainPage:
    """The scheduling words of a chain instance (chain_sched.h), mapped read-only."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.map = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)

    def u64(self, off):
        return struct.unpack_from("<Q", self.map, SCHED_OFFSET + off)[0]

    def packets(self):
        return self.u64(SCHED_PACKETS)

    def rounds(self):
        return self.u64(SCHED_ROUNDS)

    def cycles(self, n):
        """Each kind's cycles summed over the n positions, with the packets
        position 0 received, as a dict."""
        out = {k: 0 for k in CYCLE_KINDS}
        for pos in range(n):
            row = struct.unpack_from(f"<{len(CYCLE_KINDS)}Q", self.map,
                                     SCHED_OFFSET + SCHED_CYCLES + pos * len(CYCLE_KINDS) * 8)
            for k, v in zip(CYCLE_KINDS, row):
                out[k] += v
        out["packets"] = self.packets()
        return out


class PcapSource:
    """An endless source on the managed core itself: each chain's port is a
    pcap vdev that replays |PCAP_PACKETS| 80-byte frames forever
    (infinite_rx, transmit drops). No generator shares the measurement:
    every cycle of the window is the chain's, and modes cannot starve each
    other of packets. The frames are those dpdk-testpmd's txonly sends
    (UDP 198.18.0.1:9 -> 198.18.0.2:9)."""

    def __init__(self, tmp):
        self.path = f"{tmp}/source{PACKET_BYTES}.pcap"
        write_pcap(self.path, [udp_frame(i) for i in range(PCAP_PACKETS)])

    def vdev(self, port):
        return f"net_pcap{port},rx_pcap={self.path},infinite_rx=1"

    def stop(self):
        pass


PCAP_PACKETS = 64


def udp_frame(i):
    """A PACKET_BYTES-byte Ethernet/IPv4/UDP frame to 198.18.0.2:9 (IP id i)."""
    payload = bytes(PACKET_BYTES - 14 - 20 - 8)
    udp = struct.pack("!HHHH", 9, 9, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i, 0, 64, 17, 0,
                     bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2]))
    csum = sum(struct.unpack("!10H", ip))
    while csum >> 16:
        csum = (csum & 0xFFFF) + (csum >> 16)
    ip = ip[:10] + struct.pack("!H", ~csum & 0xFFFF) + ip[12:]
    eth = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]) + struct.pack("!H", 0x0800)
    return eth + ip + udp


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for fr in frames:
            f.write(struct.pack("<IIII", 0, 0, len(fr), len(fr)) + fr)


def eal(tag, vdev):
    return ["--", f"-l{CORE}", "--no-pci", "--no-huge", "-m", "512", f"--file-prefix=keelb{os.getpid()}{tag}",
            "--log-level=error", "--no-telemetry", f"--vdev={vdev}"]


def stop_procs(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def bpf_nfs(n):
    """The test chain: n `bpf` NFs, as (name, configuration) pairs."""
    return [("bpf", BPF)] * n


def nf_arg(nf):
    name, config = nf
    return f"{name}={json.dumps(config)}"


class Single:
    """keel-chain with the NFs |nfs| (default: n `bpf` NFs); takes the core
    when continued. |tag| names its files (default: n)."""

    def __init__(self, tmp, gen, port, n, nfs=None, tag=None):
        nfs = nfs or bpf_nfs(n)
        tag = n if tag is None else tag
        self.stats = Path(tmp) / f"single{tag}.json"
        # At coopsched's run priority, as the NFs of the other modes: other
        # work on the core (CFS) then takes the same share from every mode.
        # EAL pins the packet thread to CORE (-l) and its other threads to GEN_CPU.
        args = ["chrt", "-f", "10", "taskset", "-c", f"{GEN_CPU},{CORE}", str(BIN / "keel-chain")]
        for nf in nfs:
            args += ["--nf", nf_arg(nf)]
        args += ["--stats", str(self.stats), "--stats-interval", "50"] + eal(f"s{tag}", gen.vdev(port))
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs = [self.proc]
        self.nfs = self.prev_nfs = None  # each NF's (cycles, packets) at the last two samples
        self.fills, self.accounts, self.last_cycles = [], [], None
        try:
            deadline = time.time() + 20
            while self.sample()[0] == 0:  # memif up, packets flowing
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("keel-chain processed nothing")
                time.sleep(0.2)
        except BaseException:
            stop_procs(self.procs)  # a FIFO spinner left behind would hold the core
            raise

    def sample(self):
        """(packets received, seconds) as of the chain's last stats write;
        keeps each NF's (cycles, packets) of that write for nf_cycles()."""
        for _ in range(20):
            try:
                s = json.loads(self.stats.read_text())
                self.prev_nfs, self.nfs = self.nfs, [
                    (nf["cycles_per_packet"] * nf["packets_in"], nf["packets_in"]) for nf in s["nfs"]]
                self.last_cycles = dict(s["cycles"], packets=s["nfs"][0]["packets_in"],
                                        wall=s["seconds"] * s["tsc_hz"])
                return s["nfs"][0]["packets_in"], s["seconds"], s["nfs"][0]["bursts"] * BURST
            except (OSError, ValueError, KeyError):
                time.sleep(0.01)
        return 0, 0.0, 0

    def nf_cycles(self):
        """Each NF's cycles a packet between the last two samples, which
        window() takes while the chain has the core (a SIGSTOP in the middle
        of a batch would count the stopped time to that batch)."""
        if not self.prev_nfs or any(p1 <= p0 for (_, p0), (_, p1) in zip(self.prev_nfs, self.nfs)):
            return None  # the statistics file was not rewritten between the samples
        return [(c1 - c0) / (p1 - p0) for (c0, p0), (c1, p1) in zip(self.prev_nfs, self.nfs)]

    def account(self):
        """Cumulative cycles by kind as of the last sample() (its stats write),
        with packets and wall-clock cycles."""
        return self.last_cycles

    def take_core(self):
        self.proc.send_signal(signal.SIGCONT)

    def leave_core(self):
        self.proc.send_signal(signal.SIGSTOP)


class Group:
    """n keel-nf processes under coopsched, one per NF of |nfs| (default: n
    `bpf` NFs); takes the core when attached."""

    def __init__(self, tmp, stub, gen, port, n, gid, copy_each_hop, nfs=None, rx_copy=False):
        self.stub, self.gid, self.rx_copy = stub, gid, rx_copy
        self.procs, self.fills, self.accounts, self.batch = [], [], [], 1
        self.n = len(nfs or bpf_nfs(n))
        try:
            self._start(tmp, gen, port, nfs or bpf_nfs(n), copy_each_hop)
        except BaseException:
            stop_procs(self.procs)
            raise

    def _launch(self, tmp, gen, port, nfs, extra, prefix):
        """Starts one keel-nf per NF with |extra| arguments under |prefix|
        (taskset, nice); maps the chain's scheduling page."""
        gid, n = self.gid, len(nfs)
        pktbuf = f"{tmp}/huge/pktbuf-{gid}"
        for k, nf in enumerate(nfs):
            args = [str(BIN / "keel-nf"), "--nf", nf_arg(nf), "--chain-id", gid,
                    "--position", str(k), "--of", str(n), "--pktbuf", pktbuf] + extra
            if k == 0:
                args += eal(gid, gen.vdev(port))
            self.procs.append(subprocess.Popen(prefix + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            if k == 0:
                deadline = time.time() + 15
                while not os.path.exists(pktbuf) and time.time() < deadline:
                    time.sleep(0.02)
        self.page = ChainPage(pktbuf)

    def account(self):
        """Cumulative cycles by kind over the chain's positions, with packets,
        wall-clock cycles (TSC: the same clock as the stamps) and what
        coopsched's enforcer of the managed core spent (its ticks preempt the
        NFs, so these cycles are inside the kinds above, not beside them)."""
        a = dict(self.page.cycles(self.n), wall=rdtsc_now())
        st = self.stub.Status(pb.StatusRequest()) if getattr(self, "stub", None) else None
        if st is not None and len(st.enforcer_cycles):
            a["sched"], a["sched_wakeups"] = st.enforcer_cycles[0], st.enforcer_wakeups[0]
        return a

    def _start(self, tmp, gen, port, nfs, copy_each_hop):
        # The copying baseline copies at every hop, the first included.
        extra = (["--coopsched", self.stub.target] + (["--copy-each-hop"] if copy_each_hop else []) +
                 (["--rx-copy"] if self.rx_copy or copy_each_hop else []))
        self._launch(tmp, gen, port, nfs, extra, ["taskset", "-c", str(GEN_CPU)])
        deadline = time.time() + 15
        while self.status() is None:
            if time.time() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"{self.gid} never registered")
            time.sleep(0.02)

    def status(self):
        return next((g for g in self.stub.Status(pb.StatusRequest()).groups if g.group_id == self.gid), None)

    def set_batch(self, batch):
        self.stub.SetBatch(pb.SetBatchRequest(group_id=self.gid, batch=batch))
        self.batch = batch

    def sample(self):
        return self.page.packets(), time.monotonic(), self.page.rounds() * self.batch * BURST

    def take_core(self):
        self.stub.Attach(pb.AttachRequest(group_id=self.gid, core=CORE))

    def leave_core(self):
        self.stub.Detach(pb.DetachRequest(group_id=self.gid))

    def close(self):
        try:
            self.stub.Unregister(pb.UnregisterRequest(group_id=self.gid))
        except grpc.RpcError:
            pass
        stop_procs(self.procs)
        self.page.map.close()


class Nfvnice(Group):
    """n keel-nf processes on the managed core under SCHED_OTHER (nice -20),
    each asleep on its semaphore until its turn (--wait-futex), a copy per
    hop (--copy-each-hop): NFVnice's mechanism. Takes the core when
    continued (the other modes are stopped then)."""

    def __init__(self, tmp, gen, port, n, gid, nfs=None):
        self.gid, self.procs, self.fills, self.accounts, self.batch = gid, [], [], [], 1
        nfs = nfs or bpf_nfs(n)
        self.n = len(nfs)
        try:
            self._launch(tmp, gen, port, nfs, ["--wait-futex", "--copy-each-hop", "--rx-copy"],
                         ["nice", "-n", "-20", "taskset", "-c", str(CORE)])
            deadline = time.time() + 20
            while self.page.packets() == 0:
                if time.time() > deadline or any(p.poll() is not None for p in self.procs):
                    raise RuntimeError(f"{gid} processed nothing")
                time.sleep(0.1)
            self.leave_core()
        except BaseException:
            stop_procs(self.procs)
            raise

    def take_core(self):
        for p in self.procs:
            p.send_signal(signal.SIGCONT)

    def leave_core(self):
        for p in self.procs:
            p.send_signal(signal.SIGSTOP)

    def close(self):
        stop_procs(self.procs)
        self.page.map.close()


_TSC = None


def rdtsc_now():
    """The TSC now, from the kernel's clock (CLOCK_MONOTONIC_RAW scaled by
    the TSC frequency coopsched reported): the bench only needs differences."""
    return time.clock_gettime(time.CLOCK_MONOTONIC_RAW) * _TSC


def window(mode, seconds, retry=True):
    """Gives |mode| the core for WARM_S + seconds; its rate in Mpps. Also
    keeps in mode.fills how full its receive bursts were: below 1 the
    generator did not keep the chain busy and the rate is not the chain's;
    and in mode.accounts where the window's cycles went. A window in which
    the samples did not move (a statistics file not yet rewritten) is taken
    again, once."""
    account = getattr(mode, "account", None)
    mode.take_core()
    try:
        time.sleep(WARM_S)
        p0, t0, room0 = mode.sample()
        a0 = account() if account else None
        time.sleep(seconds)
        p1, t1, room1 = mode.sample()
        a1 = account() if account else None
    finally:
        mode.leave_core()
    if (p1 <= p0 or t1 <= t0) and retry:
        return window(mode, seconds, retry=False)
    mode.fills.append((p1 - p0) / (room1 - room0) if room1 > room0 else 0.0)
    if a0 and a1:
        mode.accounts.append({k: a1[k] - a0[k] for k in a1})
    return (p1 - p0) / (t1 - t0) / 1e6 if t1 > t0 else 0.0


def median(xs):
    return round(statistics.median(xs), 3)


def choose_batch(single, keel, n, seconds, p, hz, handoff):
    """keel's bursts per turn for a chain of n NFs by the controller's rule
    (controller_batch), from windows of |single| and of |keel| at a few
    batch sizes. Returns (batch,
    calibration rates by point, each NF's cycles a packet in single, the
    chain's single-thread cycles a packet, the effective T_ctx, T_copy)."""
    window(single, seconds)  # warm
    # Calibration: single, and keel at a few batch sizes, 3 rounds in
    # rotating order. B=1 and B=4 give T_ctx and T_copy (a turn of 128
    # packets still fits the L1 cache, as eq. (1) assumes); the larger
    # sizes are the fallback when no B reaches p.
    points = ("single",) + ((1, 4, 16, 64) if n > 1 else ())
    cal = {m: [] for m in points}
    cycles = None
    for r in range(3):
        for m in points[r % len(points):] + points[:r % len(points)]:
            if m == "single":
                cal[m].append(window(single, seconds))
                cycles = single.nf_cycles() or cycles
            else:
                keel.set_batch(m)
                cal[m].append(window(keel, seconds))
    for _ in range(5):  # a busy machine may have left no two distinct samples
        if cycles:
            break
        window(single, seconds)
        cycles = single.nf_cycles()
    if not cycles:
        raise RuntimeError("keel-chain's statistics file never moved between two samples")
    cal = {m: statistics.median(v) for m, v in cal.items()}
    chain_single = hz / (cal["single"] * 1e6)  # cycles a packet, receive and transmit included
    effective, copy_cycles = handoff, 0.0
    if n > 1:
        effective, copy_cycles = calibrate(hz, n, cal["single"], cal[1], cal[4], 4)
        effective = max(handoff, effective)
    batch, _ = controller_batch(hz, cycles, chain_single - sum(cycles), copy_cycles, effective, p,
                                max_bursts(hz, cycles))
    return batch, cal, cycles, chain_single, effective, copy_cycles


def max_bursts(hz, nf_cycles):
    """The most bursts per turn: what the chain buffer holds, and few enough
    that a turn stays well inside coopsched's yield timeout (its watchdog)."""
    watchdog = int(YIELD_TIMEOUT_US * 1e-6 / 4 * hz / (BURST * max(nf_cycles)))
    return max(1, min(MAX_BURSTS_PER_TURN, watchdog))


def boot_ci(xs, resamples=2000, seed=15):
    """95 % bootstrap interval of the median of xs."""
    if not xs:
        return [None, None]
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(resamples))
    return [round(meds[int(0.025 * resamples)], 3), round(meds[int(0.975 * resamples) - 1], 3)]


def breakdown(accounts):
    """Median over windows of each kind's cycles a packet, the handoff per
    turn, and the share of wall-clock cycles the stamps account for."""
    rows = [a for a in accounts if a.get("packets", 0) > 0]
    if not rows:
        return None
    out = {}
    for k in CYCLE_KINDS:
        if k != "turns":
            out[k] = round(statistics.median(a[k] / a["packets"] for a in rows), 1)
    # Busy minus its parts: the turn's own bookkeeping.
    out["turn_overhead"] = round(out["busy"] - sum(out[k] for k in CYCLE_KINDS[:7]), 1)
    out["wall"] = round(statistics.median(a["wall"] / a["packets"] for a in rows), 1)
    turns = [a for a in rows if a["turns"] > 0]
    if turns and any(a["handoff"] for a in turns):
        out["handoff_per_turn"] = round(statistics.median(a["handoff"] / a["turns"] for a in turns))
    out["accounted_share"] = round(statistics.median((a["busy"] + a["handoff"]) / a["wall"] for a in rows), 3)
    if all("sched" in a for a in rows):
        # coopsched's enforcer: its ticks' work a packet, and its wake-ups a
        # million packets (each also costs two context switches).
        out["scheduler"] = round(statistics.median(a["sched"] / a["packets"] for a in rows), 2)
        out["scheduler_wakeups_per_mpkt"] = round(
            statistics.median(a["sched_wakeups"] * 1e6 / a["packets"] for a in rows), 1)
    return out


def explain(row):
    """Why keel is where it is against single, from the row's breakdown: the
    cycles a packet keel spends beyond single, by kind; the ratio keel would
    reach without each (a measurement, not a model: the kinds add up to the
    wall clock, accounted_share ~1); and what 0.95 would need."""
    b = row.get("breakdown") or {}
    k, s = b.get("keel"), b.get("single")
    if not k or not s:
        return None
    kinds = ("rx", "nf", "copy_in", "view", "copy_out", "tx", "sojourn", "turn_overhead", "handoff")
    extra = {x: round(k.get(x, 0) - s.get(x, 0), 1) for x in kinds}
    wall_k, wall_s = k["wall"], s["wall"]
    rc = b.get("keel_rx_copy")
    saved = ({x: round(rc.get(x, 0) - k.get(x, 0), 1) for x in kinds + ("busy", "wall")} if rc else None)
    return {"keel_minus_single_cycles_per_pkt": extra,
            "keel_rx_copy_minus_keel_cycles_per_pkt": saved,
            "total_extra": round(wall_k - wall_s, 1),
            "ratio_from_breakdown": round(wall_s / wall_k, 3),
            "ratio_without": {x: round(wall_s / (wall_k - extra[x]), 3) for x in kinds if extra[x] > 0},
            "cycles_to_cut_for_0.95": round(max(0.0, wall_k - wall_s / 0.95), 1)}


def run_length(tmp, stub, gen, n, args, hz, handoff, sweep):
    single = Single(tmp, gen, 0, n)
    keel = keelc = copy = nfv = control = None
    try:
        single.leave_core()
        if n == 1:
            control = Single(tmp, gen, 4, n, tag="control1")
            control.leave_core()
        keel = Group(tmp, stub, gen, 1, n, f"keel{n}-{PACKET_BYTES}", False)
        keelc = Group(tmp, stub, gen, 5, n, f"keelc{n}-{PACKET_BYTES}", False, rx_copy=True)
        copy = Group(tmp, stub, gen, 2, n, f"copy{n}-{PACKET_BYTES}", True)
        nfv = Nfvnice(tmp, gen, 3, n, f"nfvnice{n}-{PACKET_BYTES}")
        batch, cal, cycles, chain_single, effective, copy_cycles = choose_batch(
            single, keel, n, args.seconds, args.p, hz, handoff)
        keel.set_batch(batch)
        keelc.set_batch(batch)
        copy.set_batch(1)
        modes = MODES + (("control",) if control else ())
        rates = {m: [] for m in modes}
        runs = {"single": single, "keel": keel, "keel_rx_copy": keelc, "keel_b32": keel, "copy": copy,
                "copy_same_batch": copy,
                "nfvnice": nfv, "control": control}
        keel.accounts, copy.accounts, single.accounts = [], [], []  # the calibration's windows out
        accounts = {m: [] for m in modes}
        for r in range(args.rounds):
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            for m in order:
                copy.set_batch(batch if m == "copy_same_batch" else 1)
                keel.set_batch(FIXED_BURSTS_PER_TURN if m == "keel_b32" else batch)
                rates[m].append(window(runs[m], args.seconds))
                accounts[m].append(runs[m].accounts[-1] if runs[m].accounts else {})
        keel.set_batch(batch)

        def ratios(a, b):
            return [x / y for x, y in zip(rates[a], rates[b]) if y > 0]
        pairs = {"keel_over_single": ("keel", "single"), "keel_over_nfvnice": ("keel", "nfvnice"),
                 "keel_rx_copy_over_single": ("keel_rx_copy", "single"),
                 "keel_over_keel_rx_copy": ("keel", "keel_rx_copy"),
                 "single_over_nfvnice": ("single", "nfvnice"),
                 "keel_over_copy": ("keel", "copy"), "keel_over_copy_same_batch": ("keel", "copy_same_batch"),
                 "keel_b32_over_single": ("keel_b32", "single")}
        if control:
            pairs["control_over_single"] = ("control", "single")
        ratio = {k: ratios(*v) for k, v in pairs.items()}
        # keel/NFVnice-style against its bound, single/NFVnice-style, round by
        # round (issue 33's target: >= 0.97 of the bound).
        ratio["keel_over_nfvnice_bound"] = [k / s for k, s in zip(ratio["keel_over_nfvnice"],
                                                                  ratio["single_over_nfvnice"]) if s > 0]
        per_mode = {m: breakdown(accounts[m]) for m in modes}
        row = {"length": n, "packet_bytes": PACKET_BYTES,
               "single_mpps": median(rates["single"]), "keel_mpps": median(rates["keel"]),
               "keel_rx_copy_mpps": median(rates["keel_rx_copy"]),
               "keel_b32_mpps": median(rates["keel_b32"]),
               "copy_mpps": median(rates["copy"]), "nfvnice_mpps": median(rates["nfvnice"]),
               "keel_batch": batch, "copy_batch": 1, "nfvnice_batch": 1,
               "copy_same_batch_mpps": median(rates["copy_same_batch"])}
        for k, v in ratio.items():
            row[k] = median(v)
            row[k + "_ci95"] = boot_ci(v)
        row.update({
            "keel_over_single_range": [round(min(ratio["keel_over_single"]), 3),
                                       round(max(ratio["keel_over_single"]), 3)],
            "nf_cycles_per_pkt": round(sum(cycles) / n, 1),
            "single_cycles_per_pkt": round(chain_single),
            "effective_handoff_cycles": round(effective),
            "copy_cycles_per_pkt": round(copy_cycles, 1),
            "calibration_mpps": {str(k): round(v, 3) for k, v in cal.items()},
            "handoff_cycles_per_pkt": round(n * effective / (batch * BURST), 1) if n > 1 else 0,
            "cycles_per_pkt": {m: round(hz / (median(rates[m]) * 1e6)) if median(rates[m]) else None
                               for m in modes},
            "breakdown": per_mode,
            "min_burst_fill": {"single": round(min(single.fills), 3), "keel": round(min(keel.fills), 3),
                               "keel_rx_copy": round(min(keelc.fills), 3),
                               "copy": round(min(copy.fills), 3), "nfvnice": round(min(nfv.fills), 3)},
            "rounds": {m: [round(x, 3) for x in v] for m, v in rates.items()}})
        row["explain"] = explain(row)
        kb = per_mode.get("keel") or {}
        # Measured scheduling cost: what handing the turn on costs a packet
        # at the batch used (the handoffs' cycles over the packets).
        row["measured_handoff_per_turn"] = kb.get("handoff_per_turn", 0) if n > 1 else 0
        # Scheduling cost a packet: the handoffs at the batch used, and the
        # enforcer's own work (with two context switches per wake-up).
        row["measured_sched_cycles_per_pkt"] = round(
            (kb.get("handoff", 0) if n > 1 else 0) + kb.get("scheduler", 0) +
            kb.get("scheduler_wakeups_per_mpkt", 0) * 2 * handoff / 1e6, 1)
        if min(row["min_burst_fill"].values()) < 0.95:
            print(f"warning: length {n}: the generator left receive bursts part-empty "
                  f"({row['min_burst_fill']}); the machine is busy", file=sys.stderr)
        if control:
            lo, hi = row["control_over_single_ci95"]
            row["noisy"] = not (lo >= 0.97 and hi <= 1.03)
        print(json.dumps({k: v for k, v in row.items() if k not in ("rounds", "breakdown")}), flush=True)
        for m in ("single", "keel", "keel_rx_copy", "nfvnice"):
            print(f"  {m}: {per_mode.get(m)}", flush=True)
        if n == 3 and sweep is not None:
            sizes = (1, 2, 4, 8, 16, 32)
            io = chain_single - sum(cycles)
            _, predicted = controller_batch(hz, cycles, io, copy_cycles, effective, args.p, MAX_BURSTS_PER_TURN, sizes)
            _, bare = controller_batch(hz, cycles, io, copy_cycles, handoff, args.p, MAX_BURSTS_PER_TURN, sizes)
            for b in sizes:
                keel.set_batch(b)
                m = statistics.median(window(keel, args.seconds) for _ in range(2))
                sweep.append({"length": n, "batch": b, "measured_mpps": round(m, 3),
                              "predicted_mpps": round(predicted[b], 3),
                              "predicted_bare_handoff_mpps": round(bare[b], 3)})
                print(json.dumps(sweep[-1]), flush=True)
        return row
    finally:
        for g in (keel, keelc, copy, nfv):
            if g:
                g.close()
        stop_procs(single.procs)
        if control:
            stop_procs(control.procs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "chain_length.json"))
    ap.add_argument("--lengths", default="1,2,3,4,5", help="chain lengths to run (default 1,2,3,4,5)")
    ap.add_argument("--sizes", default=SIZES, help=f"packet sizes in bytes, each a row per length (default {SIZES})")
    ap.add_argument("--seconds", type=float, default=0.5, help="measuring window per mode and round")
    ap.add_argument("--rounds", type=int, default=11, help="rounds of windows per length (median taken)")
    ap.add_argument("--p", type=float, default=0.99,
                    help="p of eq. 3: the share of the chain's rate without handoffs (single plus the copies) "
                         "that the handoffs may leave (default 0.99)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the batch sweep at length 3")
    ap.add_argument("--source", choices=("pcap", "memif"), default="pcap",
                    help="pcap (default): each chain replays frames from a pcap vdev on the managed core, "
                         "so the window holds the chain's cycles only; memif: dpdk-testpmd on the other "
                         "core feeds every mode over memif (its rate and the machine's load bound the figures)")
    args = ap.parse_args()
    if os.geteuid() != 0 or os.cpu_count() < 2:
        sys.exit("chain_length: needs root (SCHED_FIFO) and two cores")
    lengths = [int(x) for x in args.lengths.split(",")]
    try:
        args.sizes = [int(x) for x in args.sizes.split(",")]
    except ValueError:
        sys.exit(f"chain_length: --sizes: {args.sizes!r} is not a list of packet sizes")
    if any(not 64 <= b <= 1500 for b in args.sizes):
        sys.exit("chain_length: --sizes: each packet size must be 64..1500 bytes")
    with bench_dir() as tmp:
        run(args, tmp, lengths)


@contextlib.contextmanager
def bench_dir():
    """A temporary directory with huge/, a tmpfs for the chain buffers."""
    with tempfile.TemporaryDirectory(prefix="keel-bench-") as tmp:
        # Chain buffers in 2 MB pages, as keel-nf's --help asks: with 4 KB
        # pages a turn of B x 32 packets costs every NF TLB misses (at 5 NFs
        # and B=32 here: 800 instead of 630 cycles a packet per NF).
        os.mkdir(f"{tmp}/huge")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "huge=always,size=1g,mode=0700", "keel-bench-pktbuf",
                        f"{tmp}/huge"], check=True)
        try:
            yield tmp
        finally:
            subprocess.run(["umount", f"{tmp}/huge"], check=False)


@contextlib.contextmanager
def coopsched(tmp):
    """keel-coopsched managing CORE; its stub (stub.target: its address)."""
    sock = f"{tmp}/coopsched.sock"
    # Every mode runs SCHED_FIFO; the kernel's RT throttling would take ~5 %
    # of the core in 50 ms gaps, so it is lifted while coopsched runs.
    cs = subprocess.Popen([str(BIN / "keel-coopsched"), "--cores", str(CORE), "--listen", f"unix:{sock}",
                           "--yield-timeout-us", str(YIELD_TIMEOUT_US), "--no-rt-throttle",
                           "--lock-dir", tmp],
                          stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/coopsched.log", "w"))
    try:
        while not os.path.exists(sock):
            if cs.poll() is not None:
                sys.exit("keel-coopsched: " + Path(f"{tmp}/coopsched.log").read_text().strip())
            time.sleep(0.05)
        channel = grpc.insecure_channel(f"unix:{sock}")
        stub = pb_grpc.CoopschedStub(channel)
        stub.target = f"unix:{sock}"
        yield stub
        channel.close()
    finally:
        cs.terminate()
        cs.wait(timeout=10)
        events = [ln for ln in Path(f"{tmp}/coopsched.log").read_text().splitlines() if " event " in ln]
        if events:  # a cut-off or a forced stop makes the figures suspect: say so
            print("keel-coopsched events:\n  " + "\n  ".join(events[-10:]), file=sys.stderr)


def run(args, tmp, lengths):
    """Runs every length under one coopsched and generator; the result."""
    global _TSC, PACKET_BYTES
    rows, sweep = [], []
    with coopsched(tmp) as stub:
        status = stub.Status(pb.StatusRequest())
        hz, handoff = status.tsc_hz, status.handoff_cycles
        _TSC = hz
        for size in args.sizes:
            PACKET_BYTES = size
            gen = Generator(tmp, 6) if args.source == "memif" else PcapSource(tmp)
            try:
                for n in lengths:
                    sw = None if args.no_sweep or size != args.sizes[0] else sweep
                    rows.append(run_length(tmp, stub, gen, n, args, hz, handoff, sw))
            finally:
                gen.stop()
    multi = [r for r in rows if r["length"] > 1]
    out = {"packet_bytes": args.sizes, "tsc_hz": hz, "handoff_cycles": handoff, "p": args.p,
           "source": args.source,
           "test_nf": "bpf with 200 filters 'udp and dst host H and dst port P' (25 hosts x 8 ports); "
                      "each packet meets the 8 filters of its host and matches none",
           "method": f"all modes of a length running at once on one generator, {args.rounds} rounds of "
                     f"{args.seconds} s windows in rotating order; medians",
           "rows": rows, "batch_sweep": sweep,
           "targets": {"keel_ge_0.97_single_all_lengths_and_sizes": all(r["keel_over_single"] >= 0.97 for r in rows),
                       "keel_ge_0.97_of_nfvnice_bound_all": all(r["keel_over_nfvnice_bound"] >= 0.97 for r in rows),
                       "copy_in_gone": all((r["breakdown"].get("keel") or {}).get("copy_in", 1) == 0
                                           for r in multi),
                       "keel_ge_0.95_single_all_lengths": all(r["keel_over_single"] >= 0.95 for r in rows),
                       "keel_ge_1.5_nfvnice_at_5": any(r["length"] == 5 and r["keel_over_nfvnice"] >= 1.5
                                                       for r in rows),
                       "handoff_le_1600_cycles": all(r["measured_handoff_per_turn"] <= 1600 for r in rows),
                       "sched_le_30_cycles_per_pkt": all(r["measured_sched_cycles_per_pkt"] <= 30 for r in rows),
                       "keel_ge_1.5_copy_at_5": any(r["length"] == 5 and r["keel_over_copy"] >= 1.5 for r in rows)},
           "noisy": any(r.get("noisy") for r in rows)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
