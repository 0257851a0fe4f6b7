"""The os-ken application: its handlers only decode and hand over to the Switch (never wait)."""

from __future__ import annotations

from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from . import fastparse
from .switch import Switch


class TorApp(app_manager.OSKenApp):
    """Forwards the switch's connection, replies, errors and expiries to TorApp.switch.

    os-ken instantiates the app itself, so the Switch is set on the class before the app
    manager starts (cli.run_openflow).
    """

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    switch: Switch

    def start(self) -> None:
        super().start()
        # Each expiring flow's FlowRemoved through a parser of its own (fastparse.py).
        fastparse.install()
        # Everything torctl's threads send reaches os-ken through this green thread.
        self.threads.append(hub.spawn(self.switch.pump))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev: Any) -> None:
        # MAIN comes after os-ken has read the features and port descriptions (dp.ports).
        if ev.state == MAIN_DISPATCHER:
            self.switch.connected(ev.datapath)
        else:
            self.switch.disconnected(ev.datapath)

    @set_ev_cls([ofp_event.EventOFPBarrierReply, ofp_event.EventOFPFlowStatsReply], MAIN_DISPATCHER)
    def _reply(self, ev: Any) -> None:
        self.switch.deliver(ev.msg)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _error(self, ev: Any) -> None:
        self.switch.error(ev.msg)

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _flow_removed(self, ev: Any) -> None:
        self.switch.flow_removed(ev.msg)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev: Any) -> None:
        self.switch.port_changed()
