# SPDX-License-Identifier: Apache-2.0
"""keel-nf chains under keel-coopsched: one process per NF on one managed
core with SCHED_FIFO, run to completion across the processes."""
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import grpc
import pytest

import netns
import pcapraw
from keelenv import BIN, ROOT

sys.path.insert(0, str(ROOT / "build" / "py"))
from keel.v1 import coopsched_pb2 as pb  # noqa: E402
from keel.v1 import coopsched_pb2_grpc as pb_grpc  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from idle_core import other_thread_share  # noqa: E402 - bench/idle_core.py measures the same share

MANAGED_CORE = 1

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or os.cpu_count() < 2,
                                reason="needs root (SCHED_FIFO) and a second core for coopsched to manage")


@contextlib.contextmanager
def running_coopsched(tmp_path, *args):
    """keel-coopsched managing core 1 with |args|; yields a gRPC stub."""
    sock = tmp_path / "coopsched.sock"
    proc = subprocess.Popen([str(BIN / "keel-coopsched"), "--cores", str(MANAGED_CORE),
                             "--listen", f"unix:{sock}", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 10
    while not sock.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not sock.exists():
        proc.kill()
        pytest.fail("keel-coopsched did not start: " + proc.stderr.read().decode())
    channel = grpc.insecure_channel(f"unix:{sock}")
    stub = pb_grpc.CoopschedStub(channel)
    stub.target = f"unix:{sock}"
    try:
        yield stub
    finally:
        channel.close()
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def coopsched(tmp_path):
    """keel-coopsched managing core 1; yields a gRPC stub."""
    with running_coopsched(tmp_path) as stub:
        yield stub


def group(stub, gid):
    for g in stub.Status(pb.StatusRequest()).groups:
        if g.group_id == gid:
            return g
    return None


def wait_for(cond, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def start_chain(tmp_path, stub, gid, n_nfs, in_pcap, idle_ms, extra=(), prefix=(), vdev=""):
    out_pcap, pktbuf = tmp_path / f"out-{gid}.pcap", tmp_path / f"pktbuf-{gid}"
    procs, stats = [], []
    for k in range(n_nfs):
        st = tmp_path / f"stats-{gid}{k}.json"
        args = [str(BIN / "keel-nf"), "--nf", f'stamp={{"index":{k}}}', "--chain-id", gid,
                "--position", str(k), "--of", str(n_nfs), "--pktbuf", str(pktbuf),
                "--coopsched", stub.target, "--stats", str(st), *extra]
        if k == 0:
            args += ["--exit-when-idle", str(idle_ms), "--", "--no-pci", "--no-huge", "-m", "512",
                     "--log-level=error", "--no-telemetry", f"--file-prefix=keelcs{os.getpid()}{gid}",
                     "--vdev", vdev or f"net_pcap0,rx_pcap={in_pcap},tx_pcap={out_pcap}"]
        procs.append(subprocess.Popen([*prefix, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        stats.append(st)
        if k == 0:
            assert wait_for(pktbuf.exists, 10), procs[0].stderr.read()
    assert wait_for(lambda: group(stub, gid) is not None, 10), "the chain never became an sgroup"
    return procs, stats, out_pcap


def finish(procs, stub, gid):
    try:
        for p in procs:
            assert p.wait(timeout=120) == 0, p.stderr.read()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if group(stub, gid) is not None:
            stub.Unregister(pb.UnregisterRequest(group_id=gid))


def test_million_packets_through_three_processes_in_chain_order(tmp_path, coopsched):
    n = 1_000_000
    in_pcap = tmp_path / "in.pcap"
    pcapraw.write(in_pcap, (pcapraw.udp_frame(1000 + i % 1000, b"\xff" * 18) for i in range(n)))
    procs, stats, out = start_chain(tmp_path, coopsched, "order", 3, in_pcap, idle_ms=500)
    g = group(coopsched, "order")
    assert g.state == pb.GROUP_STATE_DETACHED
    assert all(t.state == "T" for t in g.threads), "detached NFs are stopped, not spinning"
    coopsched.SetBatch(pb.SetBatchRequest(group_id="order", batch=4))
    coopsched.Attach(pb.AttachRequest(group_id="order", core=MANAGED_CORE))
    finish(procs, coopsched, "order")
    got = 0
    for frame in pcapraw.read(out):
        assert frame[42:45] == b"\x00\x01\x02", f"packet {got} left the chain out of order"
        got += 1
    assert got == n
    for k, st in enumerate(stats):
        s = json.loads(st.read_text())
        assert s["order_violations"] == 0, f"position {k} saw a slot its predecessor had not finished"
        assert s["nfs"][0]["packets_in"] == n


def test_detach_attach_a_thousand_times_loses_no_packet(tmp_path, coopsched):
    n = 200_000
    in_pcap = tmp_path / "in.pcap"
    pcapraw.write(in_pcap, (pcapraw.udp_frame(i % 5000, b"\xff" * 18) for i in range(n)))
    procs, stats, out = start_chain(tmp_path, coopsched, "flip", 2, in_pcap, idle_ms=600_000)
    detached_at_boundary = 0
    for _ in range(1000):
        coopsched.Attach(pb.AttachRequest(group_id="flip", core=MANAGED_CORE))
        time.sleep(0.0005)
        r = coopsched.Detach(pb.DetachRequest(group_id="flip"))
        detached_at_boundary += r.at_boundary
        ticks = [t.state for t in r.group.threads]
        assert ticks == ["T", "T"]
    coopsched.Attach(pb.AttachRequest(group_id="flip", core=MANAGED_CORE))
    assert wait_for(lambda: group(coopsched, "flip").packets == n, 60)
    procs[0].terminate()  # position 0 sends what is in flight, then the chain closes
    finish(procs, coopsched, "flip")
    assert detached_at_boundary == 1000
    frames = list(pcapraw.read(out))
    assert len(frames) == n
    assert all(f[42:44] == b"\x00\x01" for f in frames)


def test_copy_each_hop_gives_the_same_packets_as_zero_copy(tmp_path, coopsched):
    """The benchmark's copy baseline: each NF after the first works on a copy
    in a buffer of its own pool; what leaves the chain is the same."""
    n = 20_000
    in_pcap = tmp_path / "in.pcap"
    pcapraw.write(in_pcap, (pcapraw.udp_frame(1000 + i % 700, bytes([i % 251]) * (18 + i % 1400))
                            for i in range(n)))
    outs = {}
    for gid, extra in (("zero", ()), ("copied", ("--copy-each-hop",))):
        procs, stats, outs[gid] = start_chain(tmp_path, coopsched, gid, 3, in_pcap, idle_ms=500, extra=extra)
        coopsched.SetBatch(pb.SetBatchRequest(group_id=gid, batch=2))
        coopsched.Attach(pb.AttachRequest(group_id=gid, core=MANAGED_CORE))
        finish(procs, coopsched, gid)
        for k, st in enumerate(stats):
            s = json.loads(st.read_text())
            assert s["order_violations"] == 0
            assert s["nfs"][0]["packets_in"] == n, f"{gid}: position {k}"
    copied, zero = list(pcapraw.read(outs["copied"])), list(pcapraw.read(outs["zero"]))
    assert len(copied) == n
    assert all(f[42:45] == b"\x00\x01\x02" for f in copied)
    assert copied == zero


def test_a_chain_that_closes_on_purpose_finishes_and_leaves_the_core(tmp_path, coopsched):
    """keel-nf closing when idle: every position exits with 0, so coopsched
    reports the sgroup finished (not failed, not cut off, not still attached
    with its threads gone), whatever position 0's clean-up costs on the core."""
    in_pcap = tmp_path / "in.pcap"
    pcapraw.write(in_pcap, (pcapraw.udp_frame(1000 + i % 100, b"\xff" * 18) for i in range(5000)))
    procs, _, _ = start_chain(tmp_path, coopsched, "closes", 3, in_pcap, idle_ms=300)
    coopsched.Attach(pb.AttachRequest(group_id="closes", core=MANAGED_CORE))
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read()
    assert wait_for(lambda: group(coopsched, "closes").state == pb.GROUP_STATE_FINISHED, 5), \
        pb.GroupState.Name(group(coopsched, "closes").state)
    events = [e for e in coopsched.Status(pb.StatusRequest()).events if e.group_id == "closes"]
    assert "finished" in [e.kind for e in events]
    assert not [e for e in events if e.kind in ("cut-off", "thread-exited")], events
    coopsched.Unregister(pb.UnregisterRequest(group_id="closes"))


def test_a_fresh_chain_attached_beside_a_running_one_takes_its_packets_at_once(tmp_path, coopsched):
    """The last position to announce itself is stopped while its call to coopsched is in
    flight. Its NF, like one in a container, is confined to the managed core, where an
    attached chain's SCHED_FIFO threads leave SCHED_OTHER threads (gRPC's, which read the
    answer) the kernel's CFS share once a second: a packet thread that waited for that
    answer took its first packets up to a second after the attach (make demo's chains 2
    and 3 waited 0.98-1.03 s). keel-nf waits 200 ms at most, then goes on."""
    busy_pcap, fresh_pcap = tmp_path / "busy.pcap", tmp_path / "fresh.pcap"
    pcapraw.write(busy_pcap, (pcapraw.udp_frame(1000 + i % 100, b"\xff" * 18) for i in range(1000)))
    pcapraw.write(fresh_pcap, (pcapraw.udp_frame(2000 + i % 100, b"\xff" * 18) for i in range(1000)))
    core = ["taskset", "-c", str(MANAGED_CORE)]  # what an NF container's cpuset does
    busy, _, _ = start_chain(tmp_path, coopsched, "busy", 2, busy_pcap, idle_ms=600_000)
    coopsched.Attach(pb.AttachRequest(group_id="busy", core=MANAGED_CORE))
    assert wait_for(lambda: group(coopsched, "busy").packets == 1000, 10)
    fresh, _, _ = start_chain(tmp_path, coopsched, "fresh", 1, fresh_pcap, idle_ms=600_000, prefix=core)
    time.sleep(0.5)  # the announcement's wait is over: the chain waits, stopped, for its attach
    assert group(coopsched, "fresh").packets == 0
    coopsched.Attach(pb.AttachRequest(group_id="fresh", core=MANAGED_CORE))
    t0 = time.monotonic()
    assert wait_for(lambda: group(coopsched, "fresh").packets > 0, 5), "the fresh chain never ran"
    took = time.monotonic() - t0
    for gid, procs in (("fresh", fresh), ("busy", busy)):
        procs[0].terminate()
        finish(procs, coopsched, gid)
    assert took < 0.15, f"the fresh chain took its first packet {took * 1000:.0f} ms after its attach"


def test_a_chain_attached_right_after_it_registered_takes_its_packets_at_once(tmp_path, coopsched):
    """As above, but the chain is attached as soon as it is an sgroup (a pooled instance
    that a scale-out takes the moment it is ready, as in make demo's first seconds), while
    a polling chain keeps the managed core busy. The packet thread's wait for coopsched's
    answer has not run out then; the answer waits for gRPC's SCHED_OTHER threads, which the
    FIFO threads leave no room: keel-nf held the first packets until its 200 ms bound ran
    out (make demo: a first packet of ~207 ms on chain 2 or 3 in two runs of four). Now it
    goes on once coopsched has made it SCHED_FIFO, which coopsched does only after it has
    accepted the chain."""
    busy_pcap, fresh_pcap = tmp_path / "busy.pcap", tmp_path / "fresh.pcap"
    pcapraw.write(busy_pcap, (pcapraw.udp_frame(1000 + i % 100, b"\xff" * 18) for i in range(1000)))
    pcapraw.write(fresh_pcap, (pcapraw.udp_frame(2000 + i % 100, b"\xff" * 18) for i in range(1000)))
    core = ["taskset", "-c", str(MANAGED_CORE)]  # what an NF container's cpuset does
    # --idle-nap-after-ms 0: the busy chain polls its port at FIFO, also once its packets are in
    busy, _, _ = start_chain(tmp_path, coopsched, "busy", 2, busy_pcap, idle_ms=600_000,
                             extra=("--idle-nap-after-ms", "0"))
    coopsched.Attach(pb.AttachRequest(group_id="busy", core=MANAGED_CORE))
    assert wait_for(lambda: group(coopsched, "busy").packets == 1000, 10)
    # a SCHED_OTHER thread on the managed core that takes what the FIFO threads leave (as
    # the instances a scale-out starts there do: make demo starts two at that moment)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        fresh, _, _ = start_chain(tmp_path, coopsched, "fresh", 1, fresh_pcap, idle_ms=600_000, prefix=core)
        os.sched_setaffinity(spinner.pid, {MANAGED_CORE})
        time.sleep(0.06)
        coopsched.Attach(pb.AttachRequest(group_id="fresh", core=MANAGED_CORE))
        t0 = time.monotonic()
        ran = wait_for(lambda: group(coopsched, "fresh").packets > 0, 5)
        took = time.monotonic() - t0
    finally:
        spinner.kill()
        spinner.wait()
    assert ran, "the fresh chain never ran"
    # The polling chain goes first: while it holds the core at FIFO, the fresh NF's SCHED_OTHER
    # threads (its exit among them) get no more than the kernel's fair-server share of it.
    for procs in (busy, fresh):
        procs[0].terminate()
    for gid, procs in (("busy", busy), ("fresh", fresh)):
        finish(procs, coopsched, gid)
    print(f"first packet {took * 1000:.1f} ms after the attach")
    assert took < 0.08, f"the fresh chain took its first packet {took * 1000:.0f} ms after its attach"


def send_from(iface: str, frames: list[bytes]) -> None:
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        for f in frames:
            s.send(f)


def test_an_idle_attached_chain_leaves_its_core_to_other_threads_and_wakes_for_packets(tmp_path, coopsched):
    """An attached chain whose port has been quiet for --idle-nap-after-ms (100 ms) sleeps
    between polls, all its positions: a SCHED_OTHER thread on the managed core gets most of
    it, where a polling chain left it the kernel's fair-server share (50 ms a second), and
    the chain takes the next packets within milliseconds."""
    def run_idle(gid, extra, ns, host, peer):
        procs, _, _ = start_chain(tmp_path, coopsched, gid, 2, None, idle_ms=600_000, extra=extra,
                                  prefix=["ip", "netns", "exec", ns], vdev=f"net_af_packet0,iface={peer}")
        try:
            coopsched.Attach(pb.AttachRequest(group_id=gid, core=MANAGED_CORE))
            send_from(host, [pcapraw.udp_frame(1000 + i, b"\xff" * 18) for i in range(10)])
            assert wait_for(lambda: group(coopsched, gid).packets >= 10, 10), "the chain took no packets"
            time.sleep(0.3)  # quiet for longer than the idle-nap time
            cpu0 = group(coopsched, gid).cpu_ns
            share = other_thread_share(1.0)
            chain_cpu = (group(coopsched, gid).cpu_ns - cpu0) / 1e9
            seen = group(coopsched, gid).packets
            t0 = time.monotonic()
            send_from(host, [pcapraw.udp_frame(2000, b"\xff" * 18)])
            assert wait_for(lambda: group(coopsched, gid).packets > seen, 5), "the idle chain never woke for a packet"
            return share, chain_cpu, time.monotonic() - t0
        finally:
            procs[0].terminate()
            finish(procs, coopsched, gid)

    with netns.veth_into_netns("keelnap") as (ns, host, peer):
        polling = run_idle("polls", ("--idle-nap-after-ms", "0"), ns, host, peer)
        if polling[0] >= 0.3:
            # Once in a CI run here the polling chain got 0.64 s of its core over the spinner's
            # ~1.5 s (1.55 s otherwise) and the spinner the rest: the baseline did not hold for
            # that second, whatever took the core. Measure the baseline again before judging.
            polling = run_idle("polls2", ("--idle-nap-after-ms", "0"), ns, host, peer)
        napping = run_idle("naps", (), ns, host, peer)
    summary = f"spinner's share / chain's CPU s / wake s: polling {polling}, napping {napping}"
    print(summary)
    assert polling[0] < 0.3, summary  # the baseline this fixes: the chain keeps the core
    assert napping[0] > 0.6 and napping[1] < 0.3, summary
    assert napping[2] < 0.5, summary


NF_IMAGE = os.environ.get("KEEL_NF_IMAGE", "keel/nf-base:latest")


def docker(*args, check=True):
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture
def nf_image():
    """The keel/nf-base image on the machine's dockerd ($DOCKER_HOST); skips if there is none."""
    if not shutil.which("docker") or docker("version", check=False).returncode != 0:
        pytest.skip("no dockerd answers the docker client")
    if docker("image", "inspect", NF_IMAGE, check=False).returncode != 0:
        pytest.skip(f"image {NF_IMAGE} is missing: run make images")
    # An image built from older sources would announce itself without its
    # PID namespace; coopsched refuses that (tid 1 is init).
    if "--wait-iface" not in docker("run", "--rm", "--network", "none", NF_IMAGE, "--help").stdout:
        pytest.skip(f"{NF_IMAGE} holds an older keel-nf: run make images")
    return NF_IMAGE


def test_nf_in_a_container_registers_by_its_host_tid_and_runs_fifo(tmp_path, nf_image):
    """keel-nf in its own PID namespace announces the tid it sees (1) with its
    namespace; coopsched maps it to the host's. Under --no-rt-throttle the
    container needs no RT cgroup budget (cgroup v1 cpu.rt_runtime_us = 0)."""
    n = 20
    in_pcap, out_pcap = tmp_path / "in.pcap", tmp_path / "out.pcap"
    pcapraw.write(in_pcap, (pcapraw.udp_frame(1000 + i, b"\xff" * 18) for i in range(n)))
    name = f"keel-test-nf-{os.getpid()}"
    with running_coopsched(tmp_path, "--no-rt-throttle") as cs:
        docker("run", "-d", "--name", name, "--network", "none", "--cpuset-cpus", f"0,{MANAGED_CORE}",
               "-v", f"{tmp_path}:{tmp_path}", nf_image, "--nf", 'stamp={"index":0}', "--chain-id", "boxed",
               "--position", "0", "--of", "1", "--pktbuf", str(tmp_path / "pktbuf"), "--coopsched", cs.target,
               "--stats", str(tmp_path / "stats.json"), "--stats-interval", "100", "--", "--no-pci", "--no-huge",
               "-m", "256", "--log-level=error", "--no-telemetry",
               "--vdev", f"net_pcap0,rx_pcap={in_pcap},tx_pcap={out_pcap}")
        try:
            host_pid = int(docker("inspect", "-f", "{{.State.Pid}}", name).stdout)
            assert wait_for(lambda: group(cs, "boxed") is not None, 10), docker("logs", name).stderr
            (thread,) = group(cs, "boxed").threads
            assert thread.tid == host_pid != 1, "coopsched must hold the host's tid (is the image older than keel-nf?)"
            cs.Attach(pb.AttachRequest(group_id="boxed", core=MANAGED_CORE))
            stats = tmp_path / "stats.json"
            assert wait_for(lambda: json.loads(stats.read_text())["port"]["tx_packets"] == n, 10)
            policy = open(f"/proc/{host_pid}/stat").read().rsplit(")", 1)[1].split()[38]
            assert policy == "1", "the NF thread is not SCHED_FIFO"
            (stats_tid,) = [t for t in os.listdir(f"/proc/{host_pid}/task")
                            if open(f"/proc/{host_pid}/task/{t}/comm").read().strip() == "keel-stats"]
            status = f"/proc/{host_pid}/task/{stats_tid}/status"
            assert wait_for(lambda: "Cpus_allowed_list:\t0\n" in open(status).read(), 5), \
                "the statistics thread stayed on the managed core"
            t0 = time.time()
            docker("stop", "-t", "5", name)
            assert time.time() - t0 < 3, "keel-nf took too long to stop on SIGTERM"
            assert docker("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip() == "0"
        finally:
            docker("rm", "-f", name, check=False)


def test_an_sgroups_cpu_time_is_the_kernels_account_while_attached(tmp_path, coopsched):
    """GroupStatus.cpu_ns, which keel-agent divides by the VF's packets for the controller,
    is the threads' CPU time from schedstat: it grows while the sgroup runs on its core and
    stops while it is detached, whatever the chain's shared page says."""
    in_pcap = tmp_path / "in.pcap"
    pcapraw.write(in_pcap, (pcapraw.udp_frame(1000 + i, b"\xff" * 18) for i in range(100)))
    procs, _, _ = start_chain(tmp_path, coopsched, "cpu", 2, in_pcap, idle_ms=600_000,
                              extra=("--idle-nap-after-ms", "0"))
    try:
        before = group(coopsched, "cpu").cpu_ns
        coopsched.Attach(pb.AttachRequest(group_id="cpu", core=MANAGED_CORE))
        time.sleep(1.0)
        coopsched.Detach(pb.DetachRequest(group_id="cpu"))
        g = group(coopsched, "cpu")
        assert g.cpu_ns == sum(t.cpu_ns for t in g.threads)
        # polling NFs on a core of their own: most of the second, and no more than it
        assert 0.5e9 < g.cpu_ns - before < 1.5e9, (before, g.cpu_ns)
        time.sleep(0.3)
        assert group(coopsched, "cpu").cpu_ns - g.cpu_ns < 0.05e9, "a detached sgroup's threads are stopped"
        coopsched.Attach(pb.AttachRequest(group_id="cpu", core=MANAGED_CORE))
        procs[0].terminate()
    finally:
        finish(procs, coopsched, "cpu")
