# SPDX-License-Identifier: Apache-2.0
"""keel-ingress on its own: a real process on a veth pair into a network namespace of the
test's own (DPDK net_af_packet on the host side), with small in-test gRPC servers standing
in for the gateway (Control) and keel-torctl (TorControl); like the real ones they refuse calls
without the control-plane token. The test plays the ToR: it sends table-miss packets from the
namespace side and reads what the ingress sends back."""
import asyncio
import ctypes
import json
import os
import queue
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import netns
from keelenv import BIN, ROOT

sys.path.insert(0, str(ROOT / "build" / "py"))
import grpc  # noqa: E402
from keel.v1 import control_pb2 as cpb  # noqa: E402
from keel.v1 import control_pb2_grpc as cgrpc  # noqa: E402
from keel.v1 import controltoken  # noqa: E402
from keel.v1 import torctl_pb2 as tpb  # noqa: E402
from keel.v1 import torctl_pb2_grpc as tgrpc  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                reason="needs root and iproute2 to make a network namespace and veths")

CHAINS = {"a-udp": "udp dst portrange 5000-6999", "b-tcp": "tcp"}
REFUSE, SLOW, TOR_FAILS, LATE_ONCE = 6001, 6002, 6003, 6004  # dst ports the fakes answer badly
SWITCH_ONLY = 6005  # a dst port the gateway fake assigns to a chain that runs on the switch only
# dst ports of switch-only chains with a reinject VLAN: REINJECT's the fake torctl confirms
# (as its stage-1 answer says), UNCONFIRMED's it does not (a chain it has not heard of yet)
REINJECT, UNCONFIRMED = 6006, 6007
REINJECT_VLAN = {REINJECT: 205, UNCONFIRMED: 206}
# A switch-only chain the fake gateway's Watch announces with its reinject VLAN, and whose
# reinject rule the fake torctl's ChainReinjects says is on the switch.
ANNOUNCED, ANNOUNCED_PORT, ANNOUNCED_VLAN = "c-sw", 7008, 207
INSTANCE_VLAN = 100  # the VLAN of the fake gateway's instances
ASSIGN_TIMEOUT_MS = 300
STAGE1_DELAY_S = 0.01
STAGE2_DELAY_S = 0.005
TOKEN = "0123456789abcdef0123456789abcdef"  # the fakes' control-plane token


def frame(sport: int, dport: int, seq: int, proto: int = 17) -> bytes:
    """Ethernet + IPv4 + UDP (or a bare TCP header) from 198.18.0.1:sport to 198.19.0.1:dport,
    with seq in the payload."""
    l4 = struct.pack("!HHHH", sport, dport, 12, 0) if proto == 17 else \
        struct.pack("!HHIIBBHHH", sport, dport, 0, 0, 0x50, 0x02, 1024, 0, 0)
    payload = struct.pack("!I", seq)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4) + len(payload), 0, 0, 64, proto, 0,
                     bytes([198, 18, 0, 1]), bytes([198, 19, 0, 1]))
    return bytes.fromhex("020000000002020000000001") + b"\x08\x00" + ip + l4 + payload


def not_ipv4(fr: bytes) -> bytes:
    """fr with an IPv6 EtherType (the ingress drops it: not_ipv4)."""
    return fr[:12] + b"\x86\xdd" + fr[14:]


def vlan_of(fr: bytes) -> int:
    """The frame's VLAN id, 0 if untagged."""
    return struct.unpack_from("!H", fr, 14)[0] & 0xFFF if fr[12:14] == b"\x81\x00" else 0


MARK_VID = 4093  # the in-band mark (nf-runtime/include/keel/inband.h)
INBAND_ETHERTYPE = 0x88B5


def untagged(fr: bytes) -> bytes:
    """The frame without its 802.1Q tags (the instance VLAN, the in-band mark)."""
    while fr[12:14] == b"\x81\x00":
        fr = fr[:12] + fr[16:]
    return fr


def marked(fr: bytes) -> bool:
    """True if the frame carries the in-band mark right under its outer (instance) tag."""
    return fr[12:14] == b"\x81\x00" and fr[16:18] == b"\x81\x00" and struct.unpack_from("!H", fr, 18)[0] & 0xFFF == MARK_VID


def marker_flow(fr: bytes):
    """(src, dst, sport, dport, proto, seq) of a handover marker frame, or None if fr is none."""
    body = untagged(fr)
    if struct.unpack_from("!H", body, 12)[0] != INBAND_ETHERTYPE:
        return None
    version, kind, length = struct.unpack_from("!BBH", body, 14)
    if kind != 1:
        return None  # a move's state frame (state_frame)
    assert (version, length) == (1, 28), (version, kind, length)
    src, dst, sport, dport, proto, seq = struct.unpack_from("!IIHHB3xQ", body, 18)
    return src, dst, sport, dport, proto, seq


def flow_of(fr: bytes):
    """(sport, dport, seq) of a frame made by frame() (tagged or not)."""
    fr = untagged(fr)
    sport, dport = struct.unpack_from("!HH", fr, 34)
    l4 = 8 if fr[23] == 17 else 20
    return sport, dport, struct.unpack_from("!I", fr, 34 + l4)[0]


# The fakes are asyncio servers: a thousand concurrent setups, each waiting on the fake
# switch, would queue behind a thread pool and time out in the fakes rather than the ingress.
# Each runs on its own event loop thread, so its records need no lock.

class FakeGateway(cgrpc.ControlServicer):
    """Control: Watch with CHAINS (then the FlowMoves put in `moves`, as FLOWS_MOVE events),
    AssignFlow(s) answering by destination port, records calls (assigned: every flow asked
    for; batches: the flows of each AssignFlows call; moved: ReportMoves requests)."""

    def __init__(self):
        self.assigned, self.released, self.reports, self.batches, self.moved = [], [], [], [], []
        self.moves = queue.Queue()

    async def Watch(self, request, context):
        for name, flt in sorted(CHAINS.items()):
            yield cpb.WatchEvent(kind=cpb.WatchEvent.CHAIN_ADDED, chain=cpb.Chain(name=name, filter=flt))
        yield cpb.WatchEvent(kind=cpb.WatchEvent.CHAIN_ADDED, chain=cpb.Chain(
            name=ANNOUNCED, filter=f"udp dst port {ANNOUNCED_PORT}", reinject_vlan=ANNOUNCED_VLAN))
        yield cpb.WatchEvent(kind=cpb.WatchEvent.SYNCED)
        while True:  # hold the stream open until cancelled, sending the moves asked for
            try:
                yield cpb.WatchEvent(kind=cpb.WatchEvent.FLOWS_MOVE, move=self.moves.get_nowait())
            except queue.Empty:
                await asyncio.sleep(0.01)

    async def ReportMoves(self, request, context):
        self.moved.append(request)
        return cpb.ReportMovesResponse(applied=sum(r.moved for r in request.results))

    def _slow(self, request) -> bool:
        """Records the ask; true if the answer comes after the ingress's deadline."""
        self.assigned.append(request)
        late_once = request.flow.dst_port == LATE_ONCE and \
            sum(1 for r in self.assigned if r.flow.src_port == request.flow.src_port) == 1
        return request.flow.dst_port == SLOW or late_once

    def _answer(self, request):
        if request.flow.dst_port == REFUSE:
            return cpb.AssignFlowResponse(assigned=False, chain=request.chain, reason="no free instance")
        if request.flow.dst_port in (SWITCH_ONLY, TOR_FAILS):
            return cpb.AssignFlowResponse(assigned=True, chain=request.chain, switch_only=True)
        if request.flow.dst_port == ANNOUNCED_PORT:
            return cpb.AssignFlowResponse(assigned=True, chain=ANNOUNCED, switch_only=True, reinject_vlan=ANNOUNCED_VLAN)
        if request.flow.dst_port in REINJECT_VLAN:
            return cpb.AssignFlowResponse(assigned=True, chain=f"{request.chain}-{request.flow.dst_port}",
                                          switch_only=True, reinject_vlan=REINJECT_VLAN[request.flow.dst_port])
        inst = cpb.ChainInstance(id=f"{request.chain}/0", chain=request.chain, worker="w1", vlan=INSTANCE_VLAN)
        return cpb.AssignFlowResponse(assigned=True, chain=request.chain, instance=inst)

    async def AssignFlow(self, request, context):
        if self._slow(request):
            await asyncio.sleep(2 * ASSIGN_TIMEOUT_MS / 1000)
        return self._answer(request)

    async def AssignFlows(self, request, context):
        # One slow flow makes the whole call slow, as a busy gateway would be.
        self.batches.append(len(request.flows))
        if [r for r in request.flows if self._slow(r)]:
            await asyncio.sleep(2 * ASSIGN_TIMEOUT_MS / 1000)
        return cpb.AssignFlowsResponse(results=[cpb.AssignFlowResult(response=self._answer(r))
                                                for r in request.flows])

    async def ReleaseFlow(self, request, context):
        self.released.append(request)
        return cpb.ReleaseFlowResponse(released=True)

    async def ReportIngressStats(self, request, context):
        self.reports.append(request)
        return cpb.ReportIngressStatsResponse()


class FakeTorctl(tgrpc.TorControlServicer):
    """TorControl: InstallFlow answers after STAGE1_DELAY_S (stage 1, which only flows of
    switch-only chains ask for) and records when it acknowledged stage 1 and when stage 2 was
    asked, per flow (sport, dport)."""

    def __init__(self):
        self.stage1_ack, self.stage2_asked = {}, {}
        self.batches = []  # flows per InstallFlows call
        self.installs = []  # (time acknowledged, InstallFlowRequest) of every stage-2 rule
        self.removed = []  # (time acknowledged, (sport, dport)) of every RemoveFlow
        self.refuse_vlan = None  # InstallFlows fails rules to this VLAN
        self.reinject_asks = 0  # ChainReinjects calls (the first answers none: not on the switch yet)
        self.template_dpid = 0  # non-zero: stage-2 results carry a rule template for that switch
        self.recorded = []  # (sport, dport) of each flow RecordFlows reported

    async def InstallFlows(self, request, context):
        self.batches.append(len(request.flows))
        for r in request.flows:
            assert not r.reinject_only
            flow = r.assignment.flow
            self.stage2_asked[(flow.src_port, flow.dst_port)] = time.time()
        await asyncio.sleep(STAGE2_DELAY_S)  # the switch's barrier
        self.installs += [(time.time(), r) for r in request.flows]
        return tpb.InstallFlowsResponse(results=[
            tpb.InstallFlowResult(error="switch says no", code="UNAVAILABLE") if r.assignment.vlan == self.refuse_vlan
            else tpb.InstallFlowResult(cookie=2, template=self.template(r)) for r in request.flows])

    def template(self, r):
        if not self.template_dpid:
            return None
        # apply-actions: output to port 3 (what torctl's wire.instructions_bytes gives such a rule)
        out = struct.pack("!HHIH6x", 0, 16, 3, 0)
        return tpb.RuleTemplate(datapath_id=self.template_dpid, table_id=0, priority=100, cookie=2,
                                idle_timeout_s=10, flags=1, instructions=struct.pack("!HH4x", 4, 8 + len(out)) + out)

    async def RecordFlows(self, request, context):
        self.recorded += [(f.assignment.flow.src_port, f.assignment.flow.dst_port) for f in request.flows]
        return tpb.RecordFlowsResponse(recorded=len(request.flows))

    async def ChainReinjects(self, request, context):
        self.reinject_asks += 1
        return tpb.ChainReinjectsResponse(chains={ANNOUNCED: ANNOUNCED_VLAN} if self.reinject_asks > 1 else {})

    async def RemoveFlow(self, request, context):
        await asyncio.sleep(STAGE2_DELAY_S)  # the switch's barrier
        self.removed.append((time.time(), (request.flow.src_port, request.flow.dst_port)))
        return tpb.RemoveFlowResponse(removed=True)

    async def InstallFlow(self, request, context):
        flow = request.assignment.flow
        key = (flow.src_port, flow.dst_port)
        if not request.reinject_only:
            self.stage2_asked[key] = time.time()
            return tpb.InstallFlowResponse(cookie=2)
        if flow.dst_port == TOR_FAILS:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "switch not connected")
        await asyncio.sleep(STAGE1_DELAY_S)
        self.stage1_ack[key] = time.time()
        confirmed = REINJECT_VLAN[REINJECT] if flow.dst_port == REINJECT else 0
        return tpb.InstallFlowResponse(cookie=1, chain_reinject_vlan=confirmed)


class RequireToken(grpc.aio.ServerInterceptor):
    """Refuses calls without TOKEN (UNAUTHENTICATED), as the gateway and keel-torctl do, and
    records each refused call's method and reason in servicer.refused."""

    def __init__(self, servicer):
        self.refused = servicer.refused = []

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        why = controltoken.check(details.invocation_metadata, TOKEN)
        if handler is None or not why:
            return handler
        self.refused.append((details.method, why))

        async def refuse(_request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

        ser = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(refuse, **ser)
        return grpc.unary_unary_rpc_method_handler(refuse, **ser)


class Server:
    """A grpc.aio server for one servicer on 127.0.0.1, on an event loop thread of its own,
    wanting TOKEN."""

    def __init__(self, add, servicer):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start():
            server = grpc.aio.server(interceptors=[RequireToken(servicer)])
            add(servicer, server)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            return server, port

        self.server, port = asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.addr = f"127.0.0.1:{port}"

    def stop(self):
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self.server.stop(0), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()


class Wire:
    """The ToR's side of the ingress port: a raw socket on the veth end inside the netns,
    receiving (with kernel timestamps) in a thread of its own."""

    def __init__(self, ns: str, iface: str):
        made = {}

        def open_in_netns():  # setns moves only this thread; the socket stays in the netns
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
            try:
                if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                    made["err"] = os.strerror(ctypes.get_errno())
                    return
            finally:
                os.close(fd)
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
            s.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE
            s.setsockopt(socket.SOL_SOCKET, 35, 1)         # SO_TIMESTAMPNS
            s.setsockopt(263, 8, 1)  # SOL_PACKET PACKET_AUXDATA: the VLAN tag the kernel strips
            s.bind((iface, 0))
            s.settimeout(0.05)
            made["sock"] = s

        t = threading.Thread(target=open_in_netns)
        t.start()
        t.join()
        assert "sock" in made, made.get("err")
        self.sock = made["sock"]
        self.got = []          # (frame, kernel receive time)
        self.markers = []      # the handover markers, apart: (frame, kernel receive time)
        self.states = []       # a move's state frames, apart: (frame, kernel receive time)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._recv, daemon=True)
        self._thread.start()

    def _recv(self):
        while not self._stop.is_set():
            try:
                data, anc, _, addr = self.sock.recvmsg(2048, 128)
            except socket.timeout:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            ts = time.time()
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == 35:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    ts = sec + nsec * 1e-9
                elif level == 263 and kind == 8:  # tpacket_auxdata: put a stripped tag back
                    status, _, _, _, _, tci, tpid = struct.unpack("IIIHHHH", raw[:20])
                    if status & 0x10:  # TP_STATUS_VLAN_VALID
                        data = data[:12] + struct.pack("!HH", tpid or 0x8100, tci) + data[12:]
            if state_frame(data):
                self.states.append((data, ts))
            else:
                (self.markers if marker_flow(data) else self.got).append((data, ts))

    def send(self, frames):
        for f in frames:
            self.sock.send(f)

    def wait_for(self, pred, timeout=5.0):
        end = time.time() + timeout
        while time.time() < end and not pred():
            time.sleep(0.02)
        return pred()

    def take(self):
        got, self.got = self.got, []
        return got

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(addr: str) -> dict:
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=2).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def drops(m: dict, reason: str) -> float:
    return m.get(f'keel_ingress_drops_total{{reason="{reason}"}}', 0)


class Ingress:
    """A keel-ingress process on the veth `host`, talking to the fakes."""

    def __init__(self, tmp_path, host, gateway, torctl, *extra, chains=len(CHAINS) + 1):  # and ANNOUNCED
        self.metrics_addr = f"127.0.0.1:{free_port()}"
        self.stats = tmp_path / "ingress.json"
        token_file = tmp_path / "control-token"
        token_file.write_text(TOKEN + "\n")
        self.proc = subprocess.Popen(
            [str(BIN / "keel-ingress"), "--gateway", gateway, "--torctl", torctl,
             "--control-token-file", str(token_file),
             "--metrics", self.metrics_addr, "--stats-json", str(self.stats), "--report-interval-ms", "500",
             "--assign-timeout-ms", str(ASSIGN_TIMEOUT_MS), "--install-timeout-ms", "1000",
             "--retry-backoff-ms", "100", *extra, "--",
             "-l", "0", "--no-pci", "--no-huge", "-m", "512", "--log-level=error", "--no-telemetry",
             f"--file-prefix=keeltest{os.getpid()}ing",
             # The ring absorbs the test's bursts while the lcore shares its core with the fakes.
             "--vdev", f"net_af_packet0,iface={host},framecnt=8192"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        end = time.time() + 10
        while time.time() < end:  # up, and the chains arrived
            assert self.proc.poll() is None, self.proc.stderr.read()
            try:
                if metrics(self.metrics_addr).get("keel_ingress_chains") == chains:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"keel-ingress did not have {chains} chains within 10 s")

    def metrics(self):
        return metrics(self.metrics_addr)

    def stop(self) -> float:
        """SIGTERM; returns how long the exit took."""
        t0 = time.time()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return time.time() - t0


@pytest.fixture
def rig(tmp_path):
    """(ingress factory, wire, gateway fake, torctl fake, gateway server); all torn down after."""
    if not (BIN / "keel-ingress").exists():
        pytest.fail(f"{BIN / 'keel-ingress'} is missing: run make build")
    gw, tor = FakeGateway(), FakeTorctl()
    gw_server = Server(cgrpc.add_ControlServicer_to_server, gw)
    tor_server = Server(tgrpc.add_TorControlServicer_to_server, tor)
    started = []
    with netns.veth_into_netns("keel") as (ns, host, peer):
        wire = Wire(ns, peer)

        def start(*extra, **kw):
            ing = Ingress(tmp_path, host, gw_server.addr, tor_server.addr, *extra, **kw)
            started.append(ing)
            return ing

        try:
            yield start, wire, gw, tor, gw_server
        finally:
            for ing in started:
                if ing.proc.poll() is None:
                    ing.stop()
            wire.close()
            gw_server.stop()
            tor_server.stop()


def by_flow(got):
    flows = {}
    for fr, ts in got:
        sport, dport, seq = flow_of(fr)
        flows.setdefault((sport, dport), []).append((seq, ts))
    return flows


def test_first_packets_of_1000_flows_come_back_in_order_tagged_with_their_instance_vlan(rig):
    start, wire, gw, tor, _ = rig
    # The Python fakes answer ~1000 calls/s here: give a thousand simultaneous setups the
    # time the fakes (not the ingress) need.
    # Installed flows are remembered for a minute, not 2 s: on a loaded machine the fakes take
    # seconds for the thousand setups, and a retired first flow would set up again below.
    ing = start("--assign-timeout-ms", "5000", "--install-timeout-ms", "5000", "--retire-ms", "60000")
    n_flows, per_flow = 1000, 3
    sent = [frame(10000 + f, 5001, s) for f in range(n_flows) for s in range(per_flow)]
    wire.send(sent)
    assert wire.wait_for(lambda: len(wire.got) >= len(sent), timeout=15), f"{len(wire.got)} {json.dumps({k: v for k, v in ing.metrics().items() if v and 'bucket' not in k})}"
    got = wire.take()
    # Every held packet goes back tagged with its instance's VLAN (the ToR's reinject rule for
    # the instance steers it): no per-flow switch round trip before the release; and marked
    # under it as having come via the ingress (the instance's position 0 orders by it).
    assert {vlan_of(fr) for fr, _ in got} == {INSTANCE_VLAN}
    assert all(marked(fr) for fr, _ in got)
    assert tor.stage1_ack == {}
    assert wire.wait_for(lambda: len(tor.stage2_asked) == n_flows, timeout=10), len(tor.stage2_asked)
    flows = by_flow(got)
    assert len(flows) == n_flows
    for key, pkts in flows.items():
        assert [s for s, _ in pkts] == list(range(per_flow)), key  # zero loss, in order
        # The flow's own rule (which lets its later packets bypass the ingress) is asked for
        # only after its held packets are out.
        assert tor.stage2_asked[key] >= max(ts for _, ts in pkts), key
    m = None

    def installed():
        nonlocal m
        m = ing.metrics()
        return m["keel_ingress_install_latency_seconds_count"] == n_flows

    assert wire.wait_for(installed, timeout=5), m
    assert m["keel_ingress_new_flows_total"] == n_flows
    assert m["keel_ingress_flows_installed_total"] == n_flows
    assert m["keel_ingress_stage2_installed_total"] == n_flows
    # The packet loop publishes its counters a moment after the packets left: every one
    # arrived (above), the count follows. A flow whose rule was in before its last packet
    # reached the ingress (a loaded machine) had that packet forwarded, not held.
    def out():
        c = ing.metrics()
        return c["keel_ingress_packets_reinjected_total"] + c["keel_ingress_packets_forwarded_total"]

    assert wire.wait_for(lambda: out() == len(sent), timeout=5), out()
    m = ing.metrics()  # the counters as they stand now that every one has caught up
    forwarded = m["keel_ingress_packets_forwarded_total"]
    assert m["keel_ingress_hold_latency_seconds_count"] == n_flows
    # New flows that came within a millisecond went to the gateway in one AssignFlows call,
    # at most --assign-batch (64) a call.
    assert sum(gw.batches) == n_flows and 1 < max(gw.batches) <= 64, gw.batches
    assert m["keel_ingress_assign_calls_total"] == len(gw.batches)
    # Stage-2 rules that became ready while a call was out went together in the next one.
    assert sum(tor.batches) == n_flows and max(tor.batches) > 1 and len(tor.batches) < n_flows, tor.batches
    # install (first packet -> rule acknowledged) includes hold (first packet -> released)
    assert m["keel_ingress_install_latency_seconds_sum"] >= m["keel_ingress_hold_latency_seconds_sum"]
    assert {r.chain for r in gw.assigned} == {"a-udp"}
    assert all(r.ingress_id == "ingress-0" for r in gw.assigned)
    # Once a flow's own rule is in and it is quiet here, a marker follows its last packet on the
    # same path (the instance VLAN, marked): one per flow, after every packet of the flow.
    assert wire.wait_for(lambda: len(wire.markers) >= n_flows, timeout=10), len(wire.markers)
    markers = {}
    for fr, ts in wire.markers:
        assert vlan_of(fr) == INSTANCE_VLAN and marked(fr), fr.hex()
        src, dst, sport, dport, proto, seq = marker_flow(fr)
        assert (src, dst, proto) == (0xC6120001, 0xC6130001, 17) and seq > 0
        assert (sport, dport) not in markers, "two markers for one flow"
        markers[(sport, dport)] = ts
    assert markers.keys() == flows.keys()
    for key, pkts in flows.items():
        assert markers[key] > max(ts for _, ts in pkts), key
        assert markers[key] > tor.stage2_asked[key], key
    assert ing.metrics()["keel_ingress_markers_sent_total"] == n_flows

    # A later packet of an installed flow that still reaches the ingress goes straight out,
    # tagged like the first ones.
    wire.send([frame(10000, 5001, 3)])
    assert wire.wait_for(lambda: len(wire.got) == 1)
    assert vlan_of(wire.got[0][0]) == INSTANCE_VLAN and flow_of(wire.got[0][0]) == (10000, 5001, 3)
    assert marked(wire.got[0][0])
    # ... late: its marker went already (counted; the instance passes it, it cannot be put back)
    assert wire.wait_for(lambda: ing.metrics()["keel_ingress_packets_after_marker_total"] == 1, timeout=3)
    # the lcore counts the packet after it sent it: the counter may trail the wire by a moment
    assert wire.wait_for(lambda: ing.metrics()["keel_ingress_packets_forwarded_total"] == forwarded + 1, timeout=3)
    assert wire.wait_for(lambda: gw.reports and gw.reports[-1].flows_installed == n_flows, timeout=3)
    assert ing.stop() < 1.0
    st = json.loads(ing.stats.read_text())
    assert st["flows_installed"] == n_flows and st["install_p99_ms"] > 0 and st["hold_count"] == n_flows


def test_a_marker_follows_every_packet_that_reached_the_ingress_before_it(rig):
    """A flow's marker goes once the flow has been quiet here for --marker-quiet-us, and quiet
    must mean "nothing of it has reached the ingress", not "nothing of it was read": after a
    stall (its core busy elsewhere; here SIGSTOP) the port's ring holds more than one read's
    worth of frames, and a packet of the flow that waits behind them must still go out before
    the flow's marker (the instance passes a marked packet after its flow's marker as it
    comes: it would overtake nothing, and be overtaken by the flow's direct packets)."""
    start, wire, gw, tor, _ = rig
    ing = start("--marker-quiet-us", "400000")
    wire.send([frame(12000, 5001, 0)])
    assert wire.wait_for(lambda: ing.metrics()["keel_ingress_stage2_installed_total"] == 1, timeout=10)
    time.sleep(0.05)  # the lcore has the install (its quiet time counts from it) ...
    os.kill(ing.proc.pid, signal.SIGSTOP)  # ... and stops well within the quiet time
    try:
        # 64 frames the ingress drops (not IPv4), then the flow's late packet, all waiting in
        # the ring; the stall outlasts the quiet time
        wire.send([not_ipv4(frame(13000 + i, 5001, 0)) for i in range(64)]
                  + [frame(12000, 5001, 1)])
        time.sleep(0.6)
    finally:
        os.kill(ing.proc.pid, signal.SIGCONT)
    assert wire.wait_for(lambda: wire.markers, timeout=5)
    assert wire.wait_for(lambda: len(wire.got) == 2, timeout=5), wire.got
    late = [ts for fr, ts in wire.got if flow_of(fr) == (12000, 5001, 1)]
    (marker, ts), = wire.markers
    assert marker_flow(marker)[2:4] == (12000, 5001)
    assert late and ts > late[0], (ts, late)
    assert ing.metrics()["keel_ingress_packets_after_marker_total"] == 0


def softnet_drops() -> int:
    """Frames the kernel's per-CPU backlog dropped (/proc/net/softnet_stat, second column)."""
    return sum(int(line.split()[1], 16) for line in open("/proc/net/softnet_stat"))


def test_frames_the_ports_full_ring_dropped_are_counted(rig):
    """A stall longer than the port's receive ring lasts (the lcore's core busy elsewhere;
    here SIGSTOP): the kernel drops what does not fit in the ring, and DPDK's af_packet driver
    does not count it. The ingress reads its port sockets' PACKET_STATISTICS and counts those
    frames as port_ring_full, so a loss before the ingress shows in keel_ingress_drops_total."""
    start, wire, gw, tor, _ = rig
    ing = start()
    base = ing.metrics()
    n, ring = 10000, 8192  # the rig's net_af_packet framecnt
    backlog0 = softnet_drops()
    os.kill(ing.proc.pid, signal.SIGSTOP)
    try:
        wire.send([not_ipv4(frame(20000 + i % 1000, 5001, i)) for i in range(n)])
        time.sleep(0.2)
    finally:
        os.kill(ing.proc.pid, signal.SIGCONT)
    lost_before = softnet_drops() - backlog0  # never reached the port's socket

    def since(m, reason):
        return drops(m, reason) - drops(base, reason)
    assert wire.wait_for(lambda: since(ing.metrics(), "not_ipv4") + since(ing.metrics(), "port_ring_full")
                         >= n - lost_before, timeout=5), (since(ing.metrics(), "not_ipv4"), lost_before)
    m = ing.metrics()
    full = since(m, "port_ring_full")
    assert since(m, "not_ipv4") + full == n - lost_before
    assert full >= n - ring - lost_before, (full, lost_before)


def test_a_switch_only_chains_packets_come_back_untagged_after_their_stage1_rule(rig):
    start, wire, gw, tor, _ = rig
    ing = start()
    n_flows, per_flow = 20, 3
    sent = [frame(11000 + f, SWITCH_ONLY, s) for f in range(n_flows) for s in range(per_flow)]
    wire.send(sent)
    assert wire.wait_for(lambda: len(wire.got) >= len(sent), timeout=10), len(wire.got)
    assert wire.wait_for(lambda: len(tor.stage2_asked) == n_flows, timeout=5), len(tor.stage2_asked)
    got = wire.take()
    assert {vlan_of(fr) for fr, _ in got} == {0}
    # no instance, no position 0 to hold anything: no mark, no marker (dataplane.h says what that costs)
    assert not any(fr[12:14] == b"\x81\x00" for fr, _ in got) and wire.markers == []
    for key, pkts in by_flow(got).items():
        assert [s for s, _ in pkts] == list(range(per_flow)), key
        # re-injected only after the stage-1 ack; stage 2 asked only after the release
        assert min(ts for _, ts in pkts) >= tor.stage1_ack[key], key
        assert tor.stage2_asked[key] >= max(ts for _, ts in pkts), key
    assert wire.wait_for(lambda: ing.metrics()["keel_ingress_install_latency_seconds_count"] == n_flows, timeout=3)


def test_a_switch_only_chains_reinject_vlan_replaces_stage1_once_torctl_confirms_it(rig):
    """The chain's first flow takes a stage-1 rule; torctl's answer says the chain's reinject
    rule is on the switch, so the chain's later flows go back at once, tagged with the chain's
    reinject VLAN, without the in-band mark and without a stage-1 call, their packets in
    order. A chain whose VLAN torctl does not confirm keeps stage 1."""
    start, wire, gw, tor, _ = rig
    ing = start()
    first = [frame(14000, REINJECT, s) for s in range(3)]
    wire.send(first)
    assert wire.wait_for(lambda: len(wire.got) >= 3 and len(tor.stage2_asked) == 1, timeout=5), len(wire.got)
    assert {vlan_of(fr) for fr, _ in wire.take()} == {0} and (14000, REINJECT) in tor.stage1_ack
    n_flows, per_flow = 20, 3
    sent = [frame(14001 + f, REINJECT, s) for f in range(n_flows) for s in range(per_flow)]
    wire.send(sent)
    assert wire.wait_for(lambda: len(wire.got) >= len(sent), timeout=10), len(wire.got)
    assert wire.wait_for(lambda: len(tor.stage2_asked) == 1 + n_flows, timeout=5), len(tor.stage2_asked)
    got = wire.take()
    assert {vlan_of(fr) for fr, _ in got} == {REINJECT_VLAN[REINJECT]}
    for fr, _ in got:
        if vlan_of(fr):  # tagged: the frame as it came under the one tag, no mark inside
            assert fr[16:18] == b"\x08\x00", fr[12:20].hex()
    assert wire.markers == []
    for key, pkts in by_flow(got).items():
        assert [s for s, _ in pkts] == list(range(per_flow)), key
        assert key not in tor.stage1_ack, f"{key}: a stage-1 call although the chain's VLAN is confirmed"
    assert ing.metrics()["keel_ingress_chain_reinjects_total"] == n_flows
    # Unconfirmed: every flow keeps its stage-1 rule and comes back untagged.
    sent = [frame(14100 + f, UNCONFIRMED, 0) for f in range(3)]
    wire.send(sent)
    assert wire.wait_for(lambda: len(wire.got) >= len(sent), timeout=5), len(wire.got)
    assert {vlan_of(fr) for fr, _ in wire.take()} == {0}
    assert all((14100 + f, UNCONFIRMED) in tor.stage1_ack for f in range(3))
    assert ing.metrics()["keel_ingress_chain_reinjects_total"] == n_flows


def test_a_switch_only_chain_announced_with_its_reinject_vlan_needs_no_stage1_even_for_its_first_flow(rig):
    """The Watch announces a switch-only chain with its reinject VLAN; the ingress asks torctl
    (ChainReinjects) until the chain's rule is on the switch (the first answer says not yet),
    and then even the chain's first flow goes back tagged, with no stage-1 call."""
    start, wire, gw, tor, _ = rig
    ing = start()
    assert wire.wait_for(lambda: tor.reinject_asks >= 2, timeout=5), tor.reinject_asks
    time.sleep(0.1)
    asks = tor.reinject_asks
    sent = [frame(15000 + f, ANNOUNCED_PORT, s) for f in range(3) for s in range(3)]
    wire.send(sent)
    assert wire.wait_for(lambda: len(wire.got) >= len(sent), timeout=5), len(wire.got)
    got = wire.take()
    assert {vlan_of(fr) for fr, _ in got} == {ANNOUNCED_VLAN}
    for key, pkts in by_flow(got).items():
        assert [s for s, _ in pkts] == [0, 1, 2], key
        assert key not in tor.stage1_ack, key
    assert ing.metrics()["keel_ingress_chain_reinjects_total"] == 3
    time.sleep(0.5)
    assert tor.reinject_asks == asks, "confirmed: no more asks"
    # --chain-reinject off: every flow waits for its own stage-1 rule, as before there were any
    ing.stop()
    ing = start("--chain-reinject", "off")
    sent = [frame(15100 + f, ANNOUNCED_PORT, 0) for f in range(3)]
    wire.send(sent)
    assert wire.wait_for(lambda: len(wire.got) >= len(sent), timeout=5), len(wire.got)
    assert {vlan_of(fr) for fr, _ in wire.take()} == {0}
    assert all((15100 + f, ANNOUNCED_PORT) in tor.stage1_ack for f in range(3))
    assert ing.metrics()["keel_ingress_chain_reinjects_total"] == 0 and tor.reinject_asks == asks


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_while_flows_are_set_up_the_ingress_sleeps_on_its_port_instead_of_napping(rig):
    """With flows in its table the lcore may not nap long, or a flow's next packet could wait
    behind the one that takes its rule. Sleeping on the port's socket (port_wake.h) lets a
    frame end the nap, so the naps can be long: the same quiet second with flows in the table
    costs a fraction of what 25-200 us naps cost (--port-wake off), and every packet still
    comes back, in order."""
    start, wire, gw, tor, _ = rig
    share = {}
    for mode in ("off", "on"):
        ing = start("--port-wake", mode, "--retire-ms", "60000")
        base = 12000 if mode == "on" else 13000
        sent = [frame(base + f, 5001, s) for f in range(20) for s in range(2)]
        wire.send(sent)
        assert wire.wait_for(lambda: len(wire.got) >= len(sent), timeout=10), len(wire.got)
        assert wire.wait_for(lambda: ing.metrics()["keel_ingress_install_latency_seconds_count"] == 20, timeout=5)
        assert ing.metrics()["keel_ingress_flows_in_table"] == 20  # the table holds them: short naps without the port
        time.sleep(0.3)
        c0, t0 = cpu_seconds(ing.proc.pid), time.monotonic()
        time.sleep(2.0)
        share[mode] = (cpu_seconds(ing.proc.pid) - c0) / (time.monotonic() - t0)
        # a packet of a flow in the table after the quiet time still comes straight back
        wire.take()
        late = [frame(base + f, 5001, 2) for f in range(20)]
        wire.send(late)
        assert wire.wait_for(lambda: len(wire.got) >= len(late), timeout=5), len(wire.got)
        got = by_flow(wire.take())
        assert sorted(got) == sorted((base + f, 5001) for f in range(20))
        ing.stop()
    # here: 12.5-13.0 % of a core napping, 2.5-3.0 % sleeping on the port
    assert share["on"] < share["off"] / 2 and share["on"] < 0.05, share


def test_every_call_carries_the_control_token(rig):
    start, wire, gw, tor, _ = rig
    ing = start("--report-interval-ms", "200")
    sent = [frame(30000, 5001, s) for s in range(3)]
    wire.send(sent)
    assert wire.wait_for(lambda: len(wire.got) >= len(sent))
    assert wire.wait_for(lambda: bool(gw.reports) and len(tor.stage2_asked) == 1, timeout=3)
    assert gw.assigned and tor.stage2_asked  # Watch, AssignFlow, InstallFlow and stats all got through
    assert gw.refused == [] and tor.refused == []
    ing.stop()


def test_a_wrong_control_token_is_refused_and_no_chain_is_loaded(rig, tmp_path):
    start, wire, gw, tor, _ = rig
    wrong = tmp_path / "wrong-token"
    wrong.write_text("fedcba9876543210fedcba9876543210\n")
    ing = start("--control-token-file", str(wrong), chains=0)
    assert wire.wait_for(lambda: any(m.endswith("/Watch") for m, _ in gw.refused), timeout=5), gw.refused
    assert all("wrong token" in why for _, why in gw.refused)
    # No chain known yet: the ingress fails closed. The packet is dropped and counted, not
    # sent on the normal path (where a chain's packets would reach the sink untransformed).
    wire.send([frame(30001, 5001, 0)])
    time.sleep(0.3)
    assert ing.metrics()["keel_ingress_chains"] == 0 and not gw.assigned
    assert wire.take() == [] and drops(ing.metrics(), "not_synced") == 1
    ing.stop()
    assert "wrong token" in ing.proc.stderr.read()


def test_no_chain_forward_drop_and_malformed(rig):
    start, wire, gw, tor, _ = rig
    normal = [frame(20000 + i, 53, i) for i in range(5)]
    # No fragment here: net_af_packet's socket asks the kernel to reassemble fragments
    # (PACKET_FANOUT_FLAG_DEFRAG), so a lone one never reaches the ingress (the unit tests
    # cover the parser's fragment drop).
    malformed = {
        "truncated": frame(1, 5001, 0)[:30],
        "bad_ihl": (lambda f: f[:14] + b"\x44" + f[15:])(frame(1, 5001, 0)),
        "not_ipv4": not_ipv4(frame(1, 5001, 0)),
        "unknown_ethertype": frame(1, 5001, 0)[:12] + b"\x88\xb5" + frame(1, 5001, 0)[14:],
    }
    ing = start("--no-chain", "forward")
    wire.send(normal + list(malformed.values()))
    assert wire.wait_for(lambda: len(wire.got) >= len(normal))
    time.sleep(0.2)
    # unchanged but for the normal path's VLAN tag (the ToR pops it), and nothing malformed
    assert [fr for fr, _ in wire.take()] == [f[:12] + struct.pack("!HH", 0x8100, 4094) + f[12:] for f in normal]
    m = ing.metrics()
    assert m["keel_ingress_packets_normal_path_total"] == len(normal)
    for reason in malformed:
        assert drops(m, reason) == 1, json.dumps({k: v for k, v in m.items() if v and "bucket" not in k})
    assert ing.proc.poll() is None and not gw.assigned
    ing.stop()

    ing = start("--no-chain", "drop")
    wire.send(normal)
    time.sleep(0.5)
    assert wire.take() == []
    assert drops(ing.metrics(), "no_chain") == len(normal)


class FakeSwitch:
    """The ToR's OpenFlow management socket (a Unix socket): answers HELLO, FEATURES_REQUEST
    (with dpid) and BARRIER_REQUEST, records each flow-mod's UDP source port, and answers an
    OFPT_ERROR for a flow-mod whose source port is in refuse."""

    def __init__(self, path, dpid: int):
        self.path, self.dpid = str(path), dpid
        self.refuse: set[int] = set()
        self.installed: list[int] = []  # UDP source ports of the flow-mods accepted
        self.connected = False
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(1)
        self.srv.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @staticmethod
    def _udp_src(msg: bytes) -> int:
        mlen = struct.unpack("!H", msg[50:52])[0]
        i = 52
        while i < 48 + mlen:
            hdr = struct.unpack("!I", msg[i:i + 4])[0]
            field, n = (hdr >> 9) & 0x7F, hdr & 0xFF
            if field == 15:  # OXM_OF_UDP_SRC
                return struct.unpack("!H", msg[i + 4:i + 6])[0]
            i += 4 + n
        return -1

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.srv.accept()
            except socket.timeout:
                continue
            conn.settimeout(0.1)
            buf = b""
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                buf += data
                while len(buf) >= 8 and len(buf) >= struct.unpack("!H", buf[2:4])[0]:
                    n = struct.unpack("!H", buf[2:4])[0]
                    msg, buf = buf[:n], buf[n:]
                    kind, xid = msg[1], struct.unpack("!I", msg[4:8])[0]
                    if kind == 0:  # HELLO
                        conn.sendall(struct.pack("!BBHI", 4, 0, 8, xid))
                    elif kind == 5:  # FEATURES_REQUEST
                        conn.sendall(struct.pack("!BBHIQIBB2xII", 4, 6, 32, xid, self.dpid, 0, 0, 0, 0, 0))
                        self.connected = True
                    elif kind == 14:  # FLOW_MOD
                        sport = self._udp_src(msg)
                        if sport in self.refuse:  # OFPET_FLOW_MOD_FAILED, OFPFMFC_UNKNOWN
                            conn.sendall(struct.pack("!BBHIHH", 4, 1, 12 + 64, xid, 5, 0) + msg[:64])
                        else:
                            self.installed.append(sport)
                    elif kind == 20:  # BARRIER_REQUEST
                        conn.sendall(struct.pack("!BBHI", 4, 21, 8, xid))
            conn.close()
            self.connected = False

    def close(self):
        self._stop.set()
        self._thread.join()
        self.srv.close()


def test_with_tor_openflow_the_ingress_writes_rules_itself_reports_them_and_gives_a_refused_one_to_torctl(
        rig, tmp_path):
    """keel-ingress --tor-openflow: the first flow of an instance goes through torctl, whose
    answer carries the rule's template; the instance's next flows' rules the ingress writes to
    the switch itself and reports to torctl (RecordFlows); one the switch refuses goes through
    torctl, and no flow loses a packet or its order."""
    start, wire, gw, tor, _ = rig
    dpid = 0x6B65656C
    tor.template_dpid = dpid
    switch = FakeSwitch(tmp_path / "tor.mgmt", dpid)
    try:
        switch.refuse = {36007}
        ing = start("--tor-openflow", switch.path)
        assert wire.wait_for(lambda: switch.connected)
        wire.send([frame(36000, 5001, s) for s in range(3)])
        assert wire.wait_for(lambda: any(r.assignment.flow.src_port == 36000 for _, r in tor.installs))
        time.sleep(0.2)  # its answer, with the template, is in
        later = [frame(36001 + f, 5001, s) for f in range(10) for s in range(3)]
        wire.send(later)
        assert wire.wait_for(lambda: len(wire.got) >= 33), len(wire.got)
        assert wire.wait_for(lambda: ing.metrics().get("keel_ingress_stage2_installed_total") == 11)
        m = ing.metrics()
        direct = sorted(set(range(36001, 36011)) - {36007})
        assert sorted(switch.installed) == direct
        assert sorted(r.assignment.flow.src_port for _, r in tor.installs) == [36000, 36007]
        assert (m["keel_ingress_stage2_direct_total"], m["keel_ingress_stage2_direct_failed_total"],
                m["keel_ingress_stage2_failed_total"]) == (9, 1, 0), m
        # reported to torctl, each once (within the 100 ms batching, or the 500 ms report)
        assert wire.wait_for(lambda: len(tor.recorded) >= 9)
        time.sleep(0.3)
        assert sorted(sport for sport, _ in tor.recorded) == direct
        for f in range(36000, 36011):
            assert [flow_of(fr)[2] for fr, _ in wire.got if flow_of(fr)[0] == f] == [0, 1, 2], f
        assert not [k for k, v in m.items() if k.startswith("keel_ingress_drops_total") and v], m
    finally:
        switch.close()


def test_failed_setups_drop_and_count_while_other_flows_are_served(rig):
    start, wire, gw, tor, gw_server = rig
    ing = start()
    good = [frame(31000 + f, 5001, s) for f in range(50) for s in range(3)]
    t0 = time.time()
    # Each bad flow in a batch of its own: the flows of one AssignFlows call share its fate
    # (the slow flow's call runs out of time for all of them).
    for sport, dport in ((30000, REFUSE), (30001, SLOW), (30002, TOR_FAILS)):
        wire.send([frame(sport, dport, s) for s in range(3)])
        time.sleep(0.02)
    wire.send(good)
    assert wire.wait_for(lambda: len(wire.got) >= len(good))
    assert {flow_of(fr)[1] for fr, _ in wire.got} == {5001}
    # Every failed setup's held packets are dropped within its bounded time.
    m = None

    def counted():
        nonlocal m
        m = ing.metrics()
        return drops(m, "assign_failed") == 3 and drops(m, "timeout") == 3 and drops(m, "install_failed") == 3

    assert wire.wait_for(counted, timeout=3), m
    assert time.time() - t0 < 3
    assert m["keel_ingress_buffered_packets"] == 0
    # The flows the gateway may have assigned are released: the one whose install failed and the
    # one whose AssignFlow ran out of time (the gateway carried it out after all); not the refused.
    assert wire.wait_for(lambda: len(gw.released) >= 2)
    assert sorted((r.flow.dst_port, r.reason) for r in gw.released) == \
        sorted([(TOR_FAILS, "install_failed"), (SLOW, "assign_timeout")])
    # The slow flow was asked for three times (--assign-attempts' default) before it was given up.
    assert sum(1 for r in gw.assigned if r.flow.dst_port == SLOW) == 3

    # During the backoff the flow's packets are dropped; after it, a retry gets its own setup.
    wire.take()
    asks = sum(1 for r in gw.assigned if r.flow.dst_port == REFUSE)
    time.sleep(0.15)
    wire.send([frame(30000, REFUSE, 9)])
    assert wire.wait_for(lambda: sum(1 for r in gw.assigned if r.flow.dst_port == REFUSE) == asks + 1)

    # The gateway goes away: new flows fail fast and are counted; the ingress stays up.
    gw_server.stop()
    before = drops(ing.metrics(), "assign_failed") + drops(ing.metrics(), "timeout")
    wire.send([frame(32000, 5001, s) for s in range(2)])
    assert wire.wait_for(lambda: drops(ing.metrics(), "assign_failed") + drops(ing.metrics(), "timeout")
                         == before + 2, timeout=3)
    assert ing.proc.poll() is None


def test_an_assignflow_that_runs_out_of_time_once_is_made_again_and_loses_nothing(rig):
    start, wire, gw, tor, gw_server = rig
    ing = start()
    sent = [frame(33000 + f, LATE_ONCE, s) for f in range(3) for s in range(4)]
    wire.send(sent)
    assert wire.wait_for(lambda: len(wire.got) >= len(sent), timeout=5), len(wire.got)
    m = ing.metrics()
    assert m["keel_ingress_assign_retries_total"] == 3, m
    assert not [k for k, v in m.items() if k.startswith("keel_ingress_drops_total") and v], m
    assert not gw.released
    # in order, per flow
    for f in range(3):
        got = [flow_of(fr)[2] for fr, _ in wire.got if flow_of(fr)[0] == 33000 + f]
        assert got == [0, 1, 2, 3], got


def test_hold_buffer_overflow_is_counted_without_stalling_others(rig):
    start, wire, gw, tor, _ = rig
    ing = start("--hold-per-flow", "16", "--hold-max", "40")
    big = [frame(40000, 5001, s) for s in range(30)]        # 16 held, 14 buffer_full
    others = [frame(41000 + f, 5001, s) for f in range(8) for s in range(3)]  # 24 more: 16 + 24 = 40
    wire.send(big + others)
    assert wire.wait_for(lambda: len(wire.got) >= 16 + len(others))
    flows = by_flow(wire.take())
    assert [s for s, _ in flows[(40000, 5001)]] == list(range(16))
    for f in range(8):
        assert [s for s, _ in flows[(41000 + f, 5001)]] == [0, 1, 2]
    m = ing.metrics()
    assert drops(m, "buffer_full") == 14
    assert m["keel_ingress_buffered_packets_max"] == 40


def test_past_the_gateways_capacity_new_flows_wait_for_a_slot_and_late_ones_are_dropped(rig):
    start, wire, gw, tor, _ = rig
    ing = start("--max-assigning", "2", "--assign-patience-ms", str(ASSIGN_TIMEOUT_MS))
    # Two flows the gateway is slow for take both places in AssignFlows calls for three calls
    # of ASSIGN_TIMEOUT_MS; three new flows wait behind them longer than a call's deadline.
    wire.send([frame(34000, SLOW, 0), frame(34001, SLOW, 0)])
    time.sleep(0.1)
    wire.send([frame(34100 + f, 5001, 0) for f in range(3)])
    assert wire.wait_for(lambda: drops(ing.metrics(), "control_busy") == 3, timeout=5), ing.metrics()
    assert not [r for r in gw.assigned if r.flow.dst_port == 5001]  # never asked: no place in time
    assert wire.wait_for(lambda: drops(ing.metrics(), "assign_failed") + drops(ing.metrics(), "timeout") == 2, timeout=5)
    # Slots free again: new flows are set up.
    time.sleep(0.3)
    wire.take()
    wire.send([frame(34200 + f, 5001, 0) for f in range(3)])
    assert wire.wait_for(lambda: len(wire.got) == 3, timeout=5)


def test_by_default_new_flows_wait_out_a_slow_gateway_within_their_hold(rig):
    start, wire, gw, tor, _ = rig
    ing = start("--max-assigning", "2")
    # As above, but with the default patience (a call's deadline x the calls a flow may have):
    # the three new flows wait for the slow ones' places and are set up, none is dropped.
    wire.send([frame(34000, SLOW, 0), frame(34001, SLOW, 0)])
    time.sleep(0.1)
    wire.send([frame(34100 + f, 5001, 0) for f in range(3)])
    assert wire.wait_for(lambda: len(wire.got) == 3, timeout=5), ing.metrics()
    assert drops(ing.metrics(), "control_busy") == 0


# ----- flow moves (issue 37): the test plays the ToR and both instances -----

MOVED_VLAN = 200  # the move's destination instance D; the source S is INSTANCE_VLAN


def nf_id(name: str) -> int:
    """flow_move.h's NfId: the FNV-1a hash of an NF's name."""
    h = 2166136261
    for c in name.encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


def move_key(sport: int) -> bytes:
    return struct.pack("!IIHHB", 0xC6120001, 0xC6130001, sport, 5001, 17)


def move_body(kind: int, sport: int, status: int = 0, failed: int = 0, records=()) -> bytes:
    """flow_move.h's frame for flow (sport, 5001): kind 1 export, 2 import; records (position, value)."""
    key = move_key(sport)
    out = b"KM" + bytes([1, kind, status, failed, len(records), 0]) + key + key
    for pos, value in records:
        out += struct.pack("!BI", pos, nf_id("nat")) + key + bytes([len(value)]) + value
    return out


def parse_body(body: bytes) -> dict:
    """A flow_move.h frame: kind, status, the flow's source port and its records."""
    assert body[:3] == b"KM\x01", body.hex()
    kind, status, failed, count = body[3], body[4], body[5], body[6]
    flow, cur = body[8:21], body[21:34]
    off, records = 34, []
    for _ in range(count):
        pos, nf = struct.unpack_from("!BI", body, off)
        assert nf == nf_id("nat") and body[off + 5:off + 18] == flow
        n = body[off + 18]
        records.append((pos, body[off + 19:off + 19 + n]))
        off += 19 + n
    assert off == len(body), "bytes after the last record"
    return {"kind": kind, "status": status, "failed": failed, "sport": struct.unpack_from("!H", flow, 8)[0],
            "cur": cur == flow, "records": records}


def state_frame(fr: bytes):
    """(instance VLAN, in-band type, body) of a move's EXPORT_STATE (2) / IMPORT_STATE (3) frame
    as the ingress sends it (instance VLAN, mark, 0x88B5), or None if fr is none."""
    if not marked(fr):
        return None
    inner = untagged(fr)
    if struct.unpack_from("!H", inner, 12)[0] != INBAND_ETHERTYPE or inner[15] not in (2, 3):
        return None
    version, kind, length = struct.unpack_from("!BBH", inner, 14)
    assert version == 1 and len(inner) >= 14 + length
    return vlan_of(fr), kind, inner[18:14 + length]


def returned(vlan: int, kind: int, body: bytes) -> bytes:
    """A state frame as an instance's last position sends it back and the ToR's return rule
    hands it to the ingress: instance VLAN, mark, 0x88B5, header, body, padded to 60 bytes."""
    fr = (bytes.fromhex("020000000002020000000001") + struct.pack("!HHHH", 0x8100, vlan, 0x8100, MARK_VID)
          + struct.pack("!HBBH", INBAND_ETHERTYPE, 1, kind, 4 + len(body)) + body)
    return fr + b"\0" * max(0, 60 - len(fr))


def instance(vlan: int, idx: int) -> cpb.ChainInstance:
    return cpb.ChainInstance(id=f"a-udp/{idx}", chain="a-udp", worker="w1", vlan=vlan)


def flow_move(move_id: str, sports, src=INSTANCE_VLAN, dst=MOVED_VLAN, ingress="ingress-0") -> cpb.FlowMove:
    return cpb.FlowMove(id=move_id, ingress_id=ingress, chain="a-udp", to=instance(dst, 1 if dst != src else 0),
                        flows=[cpb.FiveTuple(src_ip="198.18.0.1", dst_ip="198.19.0.1", src_port=p, dst_port=5001,
                                             proto=17) for p in sports],
                        **{"from": instance(src, 0)})


def set_up_on_source(wire, sports) -> None:
    """Each flow's first two packets through the ingress to S, its marker sent: settled on S."""
    wire.send([frame(p, 5001, s) for p in sports for s in range(2)])
    assert wire.wait_for(lambda: len(wire.markers) >= len(sports), timeout=5), len(wire.markers)
    wire.take()
    wire.markers.clear()


class Instances:
    """Answers the ingress' state frames as S's and D's positions would, in a thread: `act`
    (vlan, in-band type, parsed body) returns the body to send back (None: the frame is lost);
    every frame seen is kept in `seen` as (vlan, type, parsed body)."""

    def __init__(self, wire, act):
        self.wire, self.act, self.seen = wire, act, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            if not self.wire.states:
                time.sleep(0.002)
                continue
            vlan, kind, body = state_frame(self.wire.states.pop(0)[0])
            frame_ = parse_body(body)
            self.seen.append((vlan, kind, frame_))
            back = self.act(vlan, kind, frame_)
            if back is not None:
                self.wire.send([returned(vlan, kind, back)])

    def close(self):
        self._stop.set()
        self._thread.join()


def nat_state(sport: int) -> bytes:
    return struct.pack("!IHH", 0xC6126401, sport + 1000, 0)  # a NAT mapping's 8 bytes


def test_a_moved_flow_carries_its_state_from_s_to_d_and_its_held_packets_follow_in_order(rig):
    start, wire, gw, tor, _ = rig
    ing = start("--marker-quiet-us", "20000")
    F = 20000
    set_up_on_source(wire, [F])

    def act(vlan, kind, f):
        if kind == 2:  # S's position 0 (NAT) hands over its mapping and forgets it
            assert vlan == INSTANCE_VLAN and f["records"] == []
            return move_body(1, F, records=[(0, nat_state(F))])
        assert vlan == MOVED_VLAN  # D's position 0 takes it
        return move_body(2, F, records=f["records"])

    peers = Instances(wire, act)
    try:
        gw.moves.put(flow_move("m1", [F]))
        assert wire.wait_for(lambda: tor.removed, timeout=5)
        # The flow's rule is gone: its packets miss on the ToR and reach the ingress, which holds them.
        wire.send([frame(F, 5001, s) for s in range(2, 6)])
        assert wire.wait_for(lambda: len(gw.moved) == 1, timeout=5), peers.seen
    finally:
        peers.close()
    # export through S (no records) -> import through D (S's records, status ok)
    assert [(v, k, f["kind"], f["status"], f["records"]) for v, k, f in peers.seen] == [
        (INSTANCE_VLAN, 2, 1, 0, []), (MOVED_VLAN, 3, 2, 0, [(0, nat_state(F))])]
    assert all(f["sport"] == F and f["cur"] for _, _, f in peers.seen)
    # The rule to D is in (barrier), then the held packets go to D, marked, in order, then the marker.
    assert wire.wait_for(lambda: len(wire.got) == 4 and wire.markers, timeout=3), (wire.got, wire.markers)
    got = wire.take()
    assert [flow_of(fr) for fr, _ in got] == [(F, 5001, s) for s in range(2, 6)]
    assert all(vlan_of(fr) == MOVED_VLAN and marked(fr) for fr, _ in got)
    (ack, rule), = [(t, r) for t, r in tor.installs if r.assignment.flow.src_port == F and r.assignment.vlan == MOVED_VLAN]
    assert (rule.assignment.instance, rule.assignment.chain, rule.assignment.worker) == ("a-udp/1", "a-udp", "w1")
    assert min(ts for _, ts in got) >= ack
    (marker, ts), = wire.markers
    assert vlan_of(marker) == MOVED_VLAN and marker_flow(marker)[2] == F and ts > max(t for _, t in got)
    report = gw.moved[0]
    assert (report.ingress_id, report.move_id, len(report.results)) == ("ingress-0", "m1", 1)
    r = report.results[0]
    assert (r.flow.src_port, r.moved, r.reason) == (F, True, "")
    assert 0 < r.pause_us < 5e6
    m = ing.metrics()
    assert m['keel_ingress_flow_moves_total{result="moved"}'] == 1
    assert m["keel_ingress_move_pause_seconds_count"] == 1
    assert m["keel_ingress_move_frames_sent_total"] == 2 and m["keel_ingress_move_frames_back_total"] == 2
    assert m["keel_ingress_move_packets_held_total"] == 4
    # A later packet that still reaches the ingress goes to D.
    wire.send([frame(F, 5001, 6)])
    assert wire.wait_for(lambda: len(wire.got) == 1)
    assert vlan_of(wire.got[0][0]) == MOVED_VLAN and flow_of(wire.got[0][0]) == (F, 5001, 6)


def test_moves_that_fail_leave_each_flow_whole_on_its_source(rig):
    start, wire, gw, tor, _ = rig
    ing = start("--move-frame-timeout-ms", "300")
    GLOBAL, LOST, REFUSED, NO_RULE = 21000, 21001, 21002, 21003
    flows = [GLOBAL, LOST, REFUSED, NO_RULE]
    set_up_on_source(wire, flows)
    imported_back = {}

    def act(vlan, kind, f):
        p = f["sport"]
        if vlan == INSTANCE_VLAN and kind == 2:
            if p == LOST:
                return None  # S never answers
            if p == GLOBAL:  # NAT at 0 gave its mapping up, position 1 keeps global state
                return move_body(1, p, status=2, failed=1, records=[(0, nat_state(p))])
            return move_body(1, p, records=[(0, nat_state(p))])
        if vlan == INSTANCE_VLAN and kind == 3:  # S takes its state back
            imported_back[p] = (f["status"], f["records"])
            return move_body(2, p, records=f["records"])
        if vlan == MOVED_VLAN and kind == 3:
            if p == REFUSED:  # position 0 imported, position 1 refused
                return move_body(2, p, status=3, failed=1, records=f["records"])
            if p == NO_RULE:
                tor.refuse_vlan = MOVED_VLAN  # the ToR will not take its rule to D
            return move_body(2, p, records=f["records"])
        assert vlan == MOVED_VLAN and kind == 2 and f["records"] == []  # D gives back what it took
        return move_body(1, p, records=[(0, nat_state(p))])

    before = len(tor.installs)
    peers = Instances(wire, act)
    try:
        gw.moves.put(flow_move("elsewhere", [GLOBAL], ingress="ingress-9"))  # another ingress': not ours
        gw.moves.put(flow_move("same", [GLOBAL], dst=INSTANCE_VLAN))  # from and to are one instance
        gw.moves.put(flow_move("m2", flows))
        assert wire.wait_for(lambda: len(tor.removed) == len(flows), timeout=5), tor.removed
        wire.send([frame(p, 5001, s) for s in range(2, 5) for p in flows])
        assert wire.wait_for(lambda: len(gw.moved) == 2, timeout=5), (gw.moved, peers.seen)
    finally:
        peers.close()
    assert [r.move_id for r in gw.moved] == ["same", "m2"]
    assert [(r.moved, r.reason) for r in gw.moved[0].results] == [(False, "invalid")]
    reasons = {r.flow.src_port: (r.moved, r.reason) for r in gw.moved[1].results}
    assert reasons == {GLOBAL: (False, "global"), LOST: (False, "timeout"), REFUSED: (False, "refused"),
                       NO_RULE: (False, "rule")}
    # S got back exactly what it gave, status reset so that its positions take it; the lost
    # export took S's state with it: nothing to give back.
    assert imported_back == {p: (0, [(0, nat_state(p))]) for p in (GLOBAL, REFUSED, NO_RULE)}
    # Every held packet went back to S, in order, before the flow's rule to S was put back.
    assert wire.wait_for(lambda: len(wire.got) == 3 * len(flows), timeout=3), len(wire.got)
    # (the rule NO_RULE could not have to D, and each flow's rule to S)
    assert wire.wait_for(lambda: len(tor.installs) == before + 1 + len(flows), timeout=3), tor.installs[before:]
    got = wire.take()
    for p, pkts in by_flow(got).items():
        assert [s for s, _ in pkts] == [2, 3, 4], p
        (ack, rule), = [(t, r) for t, r in tor.installs[before:] if r.assignment.flow.src_port == p[0]
                        and r.assignment.vlan == INSTANCE_VLAN]
        assert rule.assignment.instance == "a-udp/0" and ack >= max(ts for _, ts in pkts), p
    assert all(vlan_of(fr) == INSTANCE_VLAN and marked(fr) for fr, _ in got)
    m = ing.metrics()
    for reason, n in (("global", 1), ("timeout", 1), ("refused", 1), ("rule", 1), ("invalid", 1), ("moved", 0)):
        assert m[f'keel_ingress_flow_moves_total{{result="{reason}"}}'] == n, reason
    assert len(tor.removed) == len(flows)  # the other ingress' move was not acted on
    # A frame that comes back late, for a flow no longer moving, is dropped and counted.
    wire.send([returned(INSTANCE_VLAN, 2, move_body(1, LOST, records=[(0, nat_state(LOST))]))])
    assert wire.wait_for(lambda: ing.metrics()["keel_ingress_move_frames_bad_total"] == 1, timeout=3)
    assert wire.got == [] and wire.states == []
