"""keel.v1.TorControl over gRPC: InstallFlow, RemoveFlow, ListFlows, WatchFlowRemoved, Status."""

from __future__ import annotations

import queue
import time
from typing import Any, Iterator

import grpc

from .controller import Assignment, Controller, UnknownChain
from .metrics import Metrics
from .nfs import ChainError
from .pb import control_pb2, torctl_pb2, torctl_pb2_grpc
from .rules import FiveTuple, MissingPort
from .switch import SwitchError, Unavailable

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


def assignment_pb(a: Assignment) -> Any:
    f = a.flow
    return torctl_pb2.FlowAssignment(
        flow=control_pb2.FiveTuple(src_ip=f.src_ip, dst_ip=f.dst_ip, src_port=f.src_port,
                                   dst_port=f.dst_port, proto=f.proto),
        chain=a.chain, instance=a.instance, vlan=a.vlan, worker=a.worker)


def _abort(context: Any, e: Exception) -> None:
    for cls, code in _CODES:
        if isinstance(e, cls):
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
        return torctl_pb2.InstallFlowResponse(cookie=c, install_ms=took * 1e3)

    def RemoveFlow(self, request: Any, context: Any) -> Any:
        try:
            return torctl_pb2.RemoveFlowResponse(removed=self.ctl.remove(five_tuple(request.flow)))
        except Exception as e:  # noqa: BLE001
            _abort(context, e)

    def ListFlows(self, request: Any, context: Any) -> Any:
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
        q = self.ctl.subscribe()
        try:
            while context.is_active() and self.ctl.subscribed(q):
                try:
                    a, reason, packets, nbytes, duration = q.get(timeout=0.5)
                except queue.Empty:
                    continue
                yield torctl_pb2.FlowRemoved(assignment=assignment_pb(a), reason=reason,
                                             packets=packets, bytes=nbytes, duration_s=duration)
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
