"""The gateway's Control service as torctl uses it: Watch (chains, instances) and ListFlows."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import grpc

from .controller import Assignment, Controller
from .pb import control_pb2, control_pb2_grpc, controltoken
from .rules import FiveTuple

LOG = logging.getLogger("keel_torctl.gateway")
_KIND = control_pb2.WatchEvent


class Gateway:
    """A Control client whose calls carry the control-plane token: one thread follows Watch
    (re-watching on errors, with back-off)."""

    def __init__(self, address: str, token: str):
        self.address = address
        self.stub = control_pb2_grpc.ControlStub(controltoken.channel(address, token))

    def list_flows(self) -> list[Assignment]:
        """Every live flow assignment the gateway knows."""
        resp = self.stub.ListFlows(control_pb2.ListFlowsRequest(), timeout=10)
        return [Assignment(FiveTuple(r.flow.src_ip, r.flow.dst_ip, r.flow.src_port, r.flow.dst_port,
                                     r.flow.proto), r.chain, r.instance, r.vlan, r.worker)
                for r in resp.flows]

    def follow(self, ctl: Controller) -> None:
        threading.Thread(target=self._watch_loop, args=(ctl,), name="torctl-watch", daemon=True).start()

    def _watch_loop(self, ctl: Controller) -> None:
        backoff = 0.2
        while True:
            ctl.watch_restarted()
            try:
                for ev in self.stub.Watch(control_pb2.WatchRequest(watcher="keel-torctl")):
                    apply_event(ctl, ev)
                    backoff = 0.2
                LOG.warning("the gateway ended the Watch stream; watching again")
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                    LOG.error("the gateway at %s refused torctl's control-plane token (%s): "
                              "--control-token-file must hold the gateway's token; retrying in %.1f s",
                              self.address, e.details(), backoff)
                else:
                    LOG.warning("Watch on %s failed (%s); retrying in %.1f s", self.address, e.code(), backoff)
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)


def apply_event(ctl: Controller, ev: Any) -> None:
    """Apply one WatchEvent to the controller's state."""
    if ev.kind == _KIND.CHAIN_ADDED:
        c = ev.chain
        ctl.chain_added(c.name, list(c.nfs), [m.name for m in c.members], list(c.switch_nfs), c.reinject_vlan)
    elif ev.kind == _KIND.CHAIN_REMOVED:
        ctl.chain_removed(ev.chain.name)
    elif ev.kind == _KIND.INSTANCE_CHANGED:
        i = ev.instance
        ctl.instance_changed(i.id, i.chain, i.vlan, i.worker)
    elif ev.kind == _KIND.INSTANCE_REMOVED:
        ctl.instance_removed(ev.instance.id)
    elif ev.kind == _KIND.SYNCED:
        ctl.synced()
