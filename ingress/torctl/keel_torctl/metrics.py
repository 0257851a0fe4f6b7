"""keel_torctl_* Prometheus metrics (labels bounded: a stage, a reason, nothing per flow)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """torctl's counters; serve() exposes them as Prometheus text."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.installs = Counter("keel_torctl_installs", "flows InstallFlow and InstallFlows answered, by stage and result",
                                ["stage", "result"], registry=r)
        self.recorded = Counter("keel_torctl_flows_recorded",
                                "stage-2 rules keel-ingress wrote to the switch itself and reported (RecordFlows)",
                                registry=r)
        self.install_latency = Histogram("keel_torctl_install_seconds",
                                         "an InstallFlow or InstallFlows call: request received to barrier reply",
                                         buckets=_LATENCY_BUCKETS, registry=r)
        self.barrier_latency = Histogram("keel_torctl_batch_barrier_seconds",
                                         "one group-committed batch: first flow-mod sent to barrier reply",
                                         buckets=_LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("keel_torctl_batch_requests", "callers answered by one barrier",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), registry=r)
        self.flows = Gauge("keel_torctl_flows_installed", "stage-2 flow rules torctl knows on the switch",
                           registry=r)
        self.flow_removed = Counter("keel_torctl_flow_removed", "flow rules the switch expired, by reason",
                                    ["reason"], registry=r)
        self.flow_removed_dropped = Counter("keel_torctl_flow_removed_dropped",
                                            "expiries no watcher took before the backlog was full",
                                            registry=r)
        self.switch_connected = Gauge("keel_torctl_switch_connected", "1 while the switch is connected",
                                      registry=r)
        self.gateway_synced = Gauge("keel_torctl_gateway_synced",
                                    "1 once the gateway's chains and instances are known (its Watch snapshot)",
                                    registry=r)
        self.reconnects = Counter("keel_torctl_reconnects", "switch connections after the first", registry=r)
        self.switch_refused = Counter("keel_torctl_switch_refused",
                                      "OpenFlow connections refused: their datapath ID is not a --datapath-id", registry=r)

    def connected(self, up: bool) -> None:
        self.switch_connected.set(1 if up else 0)

    def batch(self, callers: int, seconds: float) -> None:
        self.batch_size.observe(callers)
        self.barrier_latency.observe(seconds)

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)
