"""keel.v1.TorControl over gRPC: InstallFlow(s), RemoveFlow, ListFlows, WatchFlowRemoved, Status."""

from __future__ import annotations

import queue
import socket
import struct
import time
from typing import Any, Iterator

import grpc

from .controller import Assignment, Controller, UnknownChain
from .metrics import Metrics
from .nfs import ChainError
from .pb import control_pb2, torctl_pb2, torctl_pb2_grpc
from .rules import FiveTuple, MissingPort
from .switch import SwitchError, Unavailable
from .wire import instructions_bytes

OFPFF_SEND_FLOW_REM = 1  # a stage-2 rule's expiry reaches torctl (OpenFlow 1.3 ofp_flow_mod_flags)

# Exceptions to gRPC status codes (the first that matches).
_CODES = ((Unavailable, grpc.StatusCode.UNAVAILABLE),
          (UnknownChain, grpc.StatusCode.FAILED_PRECONDITION),
          (ChainError, grpc.StatusCode.FAILED_PRECONDITION),
          (MissingPort, grpc.StatusCode.FAILED_PRECONDITION),
          (SwitchError, grpc.StatusCode.INTERNAL),
          (ValueError, grpc.StatusCode.INVALID_ARGUMENT))


def five_tuple(f: Any) -> FiveTuple:
    return FiveTuple(f.src_ip, f.dst_ip, f.src_port, f.dst_port, f.proto)


def assignment_from_pb(a: Any) -> Assignment:
    return Assignment(five_tuple(a.flow), a.chain, a.instance, a.vlan, a.worker)


_PACKED_PORTS = struct.Struct("!HHB")


def packed_flow(f: FiveTuple) -> bytes:
    """A flow as ListTorFlowsResponse.packed_flows carries it (13 bytes)."""
    return socket.inet_aton(f.src_ip) + socket.inet_aton(f.dst_ip) + _PACKED_PORTS.pack(f.src_port, f.dst_port, f.proto)


def assignment_pb(a: Assignment) -> Any:
    f = a.flow
    return torctl_pb2.FlowAssignment(
        flow=control_pb2.FiveTuple(src_ip=f.src_ip, dst_ip=f.dst_ip, src_port=f.src_port,
                                   dst_port=f.dst_port, proto=f.proto),
        chain=a.chain, instance=a.instance, vlan=a.vlan, worker=a.worker)


def _code(e: Exception) -> grpc.StatusCode | None:
    for cls, code in _CODES:
        if isinstance(e, cls):
            return code
    return None


def _abort(context: Any, e: Exception) -> None:
    code = _code(e)
    if code is not None:
        context.abort(code, str(e))
    raise e


class TorControl(torctl_pb2_grpc.TorControlServicer):
    """The gRPC face of the Controller."""

    def __init__(self, ctl: Controller, metrics: Metrics):
        self.ctl = ctl
        self.metrics = metrics

    def InstallFlow(self, request: Any, context: Any) -> Any:
        start = time.monotonic()
        stage = "1" if request.reinject_only else "2"
        try:
            c = self.ctl.install(assignment_from_pb(request.assignment), request.idle_timeout_s,
                                 request.reinject_only)
        except Exception as e:  # noqa: BLE001 - mapped to a status code by _abort
            self.metrics.installs.labels(stage, type(e).__name__).inc()
            _abort(context, e)
        took = time.monotonic() - start
        self.metrics.installs.labels(stage, "ok").inc()
        self.metrics.install_latency.observe(took)
        return torctl_pb2.InstallFlowResponse(cookie=c, install_ms=took * 1e3,
                                              chain_reinject_vlan=self.ctl.chain_reinject_in(request.assignment.chain))

    def ChainReinjects(self, request: Any, context: Any) -> Any:
        return torctl_pb2.ChainReinjectsResponse(chains=self.ctl.chain_reinjects())

    def InstallFlows(self, request: Any, context: Any) -> Any:
        start = time.monotonic()
        flows = []
        for r in request.flows:
            flows.append((assignment_from_pb(r.assignment), r.idle_timeout_s, r.reinject_only))
        rules: list = []
        results = self.ctl.install_many(flows, rules)
        took = time.monotonic() - start
        out = torctl_pb2.InstallFlowsResponse(install_ms=took * 1e3)
        dp = self.ctl.switch.dp
        for r, res, rule in zip(request.flows, results, rules):
            stage = "1" if r.reinject_only else "2"
            if isinstance(res, Exception):
                code = _code(res) or grpc.StatusCode.INTERNAL
                self.metrics.installs.labels(stage, type(res).__name__).inc()
                out.results.add(error=str(res) or type(res).__name__, code=code.name)
                continue
            self.metrics.installs.labels(stage, "ok").inc()
            result = out.results.add(cookie=res)
            instructions = instructions_bytes(rule) if rule is not None and rule.flow_removed else None
            if instructions is not None and dp is not None:
                result.template.CopyFrom(torctl_pb2.RuleTemplate(
                    datapath_id=dp.id, table_id=rule.table, priority=rule.priority, cookie=rule.cookie,
                    idle_timeout_s=rule.idle_timeout, flags=OFPFF_SEND_FLOW_REM, instructions=instructions))
        self.metrics.install_latency.observe(took)
        return out

    def RecordFlows(self, request: Any, context: Any) -> Any:
        try:
            flows = [(assignment_from_pb(f.assignment), f.cookie, f.idle_timeout_s) for f in request.flows]
            for a, _, _ in flows:
                a.flow.check()
        except ValueError as e:
            _abort(context, e)
        return torctl_pb2.RecordFlowsResponse(recorded=self.ctl.record(flows))

    def RemoveFlow(self, request: Any, context: Any) -> Any:
        try:
            return torctl_pb2.RemoveFlowResponse(removed=self.ctl.remove(five_tuple(request.flow)))
        except Exception as e:  # noqa: BLE001
            _abort(context, e)

    def ListFlows(self, request: Any, context: Any) -> Any:
        if request.keys_only:
            if request.read_back:
                _abort(context, ValueError("keys_only: only for the record (read_back false)"))
            return torctl_pb2.ListTorFlowsResponse(packed_flows=b"".join(
                packed_flow(f.assignment.flow) for f in self.ctl.list_known()))
        if not request.read_back:
            return torctl_pb2.ListTorFlowsResponse(flows=[
                torctl_pb2.InstalledFlow(assignment=assignment_pb(f.assignment), idle_timeout_s=f.idle_timeout,
                                         cookie=f.cookie)
                for f in self.ctl.list_known()])
        try:
            rows = self.ctl.list_installed()
        except Exception as e:  # noqa: BLE001
            _abort(context, e)
        return torctl_pb2.ListTorFlowsResponse(flows=[
            torctl_pb2.InstalledFlow(assignment=assignment_pb(a), reinject_only=e.priority > 100,
                                     idle_timeout_s=e.idle_timeout, packets=e.packet_count,
                                     bytes=e.byte_count, cookie=e.cookie,
                                     duration_s=e.duration_sec + e.duration_nsec / 1e9)
            for a, e in rows])

    def WatchFlowRemoved(self, request: Any, context: Any) -> Iterator[Any]:
        for batch in self._removed(context, 1):
            yield batch[0]

    def WatchFlowsRemoved(self, request: Any, context: Any) -> Iterator[Any]:
        for batch in self._removed(context, self.MAX_REMOVED_BATCH):
            yield torctl_pb2.FlowsRemoved(removed=batch)

    MAX_REMOVED_BATCH = 256
    REMOVED_WINDOW_S = 0.005

    def _removed(self, context: Any, most: int) -> Iterator[list[Any]]:
        """The FlowRemoved events of one watcher, up to `most` of those queued at a time."""
        q = self.ctl.subscribe()
        try:
            while context.is_active() and self.ctl.subscribed(q):
                try:
                    events = [q.get(timeout=0.5)]
                except queue.Empty:
                    continue
                # The removals of the next few milliseconds join this message: at a thousand
                # expiries a second, a message each costs torctl more than the expiries. The
                # thread sleeps through the window and then takes what came, rather than waking
                # for each removal as it is queued (a thread switch each, on the shared core).
                if most > 1:
                    time.sleep(self.REMOVED_WINDOW_S)
                try:
                    while len(events) < most:
                        events.append(q.get_nowait())
                except queue.Empty:
                    pass
                yield [torctl_pb2.FlowRemoved(assignment=assignment_pb(a), reason=reason, packets=packets,
                                              bytes=nbytes, duration_s=duration)
                       for a, reason, packets, nbytes, duration in events]
            if context.is_active():
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "watcher fell too far behind")
        finally:
            self.ctl.unsubscribe(q)

    def Status(self, request: Any, context: Any) -> Any:
        dp = self.ctl.switch.dp
        return torctl_pb2.TorStatus(connected=dp is not None, datapath_id=dp.id if dp else 0,
                                    ports=self.ctl.switch.ports(), flows=self.ctl.flow_count(),
                                    installs=self.ctl.installs,
                                    reconnects=max(self.ctl.connections - 1, 0))
