"""keel-torctl's command line: one process running os-ken, the gRPC API and /metrics."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Sequence

import grpc

from .controller import Controller, Options
from .gateway import Gateway
from .metrics import Metrics
from .nfs import CAPABILITIES_PATH, load_capabilities
from .pb import controltoken, torctl_pb2_grpc
from .service import TorControl
from .switch import Switch

LOG = logging.getLogger("keel_torctl")

DESCRIPTION = """\
keel-torctl is the OpenFlow 1.3 controller of keel's top-of-rack switch. The switch connects
to it (ovs-vsctl set-controller BRIDGE tcp:HOST:PORT; use fail-mode secure so a torctl restart
keeps forwarding). keel-ingress installs new flows' rules through its gRPC API
(keel.v1.TorControl); it answers InstallFlow only after the switch's barrier reply. It runs the
switch NFs the placer put on the ToR (Chain.switch_nfs from the gateway's Watch) as OpenFlow
tables, reports expired flows (WatchFlowRemoved) and, when the switch reconnects, installs its
rules and every live flow (the gateway's ListFlows) again.

Every gRPC call to and from keel-torctl carries the control-plane token ("authorization:
Bearer TOKEN", TOKEN the content of --control-token-file): its TorControl API refuses calls
without it (UNAUTHENTICATED), and it sends it to the gateway. The file is created (random,
mode 0600) if it does not exist; keel-gateway and keel-ingress must be given the same file.
"""

EPILOG = """\
example:
  keel-torctl --gateway 127.0.0.1:50051 --ingress-port keel-ting --egress-port keel-tsink \\
      --worker-port w1=keel-tor-w1
"""


def host_port(text: str) -> tuple[str, int]:
    """Parse HOST:PORT (argparse type)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def worker_port(text: str) -> tuple[str, str]:
    """Parse WORKER=PORT (argparse type)."""
    worker, sep, port = text.partition("=")
    if not sep or not worker or not port:
        raise argparse.ArgumentTypeError(f"expected WORKER=PORT, got {text!r}")
    if len(port) > 15:
        raise argparse.ArgumentTypeError(f"port name {port!r} is longer than 15 characters")
    return worker, port


def datapath_id(text: str) -> int:
    """A datapath ID as OVS shows it (16 hex digits, other-config:datapath-id) or 0x-prefixed."""
    t = text.lower().removeprefix("0x")
    if not t or len(t) > 16 or any(c not in "0123456789abcdef" for c in t):
        raise argparse.ArgumentTypeError(f"expected a datapath ID of at most 16 hex digits (e.g. 000000006b65656c), got {text!r}")
    return int(t, 16)


def positive(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected seconds 1-65535, got {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="keel-torctl", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", type=host_port, default="127.0.0.1:50070", metavar="HOST:PORT",
                   help="gRPC address of the TorControl API (default %(default)s)")
    p.add_argument("--ofp-listen", type=host_port, default="127.0.0.1:6653", metavar="HOST:PORT",
                   help="where the switch connects, OpenFlow 1.3 (default %(default)s)")
    p.add_argument("--gateway", default="127.0.0.1:50051", metavar="HOST:PORT",
                   help="the gateway's Control API: chains and instances (Watch), live flows "
                        "after a switch reconnect (ListFlows); \"\" = none, then every chain is "
                        "taken to have no switch NFs (default %(default)s)")
    p.add_argument("--control-token-file", default=controltoken.DEFAULT_FILE, metavar="FILE",
                   help="the control-plane token (see above), created if missing (default %(default)s)")
    p.add_argument("--ingress-port", default="keel-ting", metavar="NAME",
                   help="switch port toward keel-ingress: table-miss goes there, re-injected "
                        "packets come from there (default %(default)s)")
    p.add_argument("--egress-port", default="keel-tsink", metavar="NAME",
                   help="egress / uplink port: the normal path, return traffic and switch-only "
                        "chains go out there (default %(default)s)")
    p.add_argument("--worker-port", type=worker_port, action="append", default=[], metavar="WORKER=PORT",
                   help="switch port (VLAN trunk) toward a worker; repeatable; a worker not named "
                        "here is reached on port keel-tor-WORKER (a name over 6 bytes: keel-tor-h and 5 hex digits of its SHA-256, as keel-agent names its end)")
    p.add_argument("--datapath-id", type=datapath_id, action="append", default=[], metavar="DPID",
                   help="the ToR's OpenFlow datapath ID (repeat for several): a switch that connects with "
                        "another is refused (logged, keel_torctl_switch_refused) and the pinned one keeps "
                        "its connection. Default: $KEEL_TOR_DATAPATH_ID if set; without either, any peer "
                        "that speaks OpenFlow 1.3 becomes the ToR (a warning says so at start)")
    p.add_argument("--idle-timeout", type=positive, default=10, metavar="S",
                   help="idle timeout of flow rules when InstallFlow gives none (default %(default)s s)")
    p.add_argument("--metrics", type=host_port, default="127.0.0.1:9102", metavar="HOST:PORT",
                   help="Prometheus metrics (keel_torctl_*) at http://HOST:PORT/metrics "
                        "(default %(default)s)")
    p.add_argument("--capabilities", default=str(CAPABILITIES_PATH), metavar="FILE",
                   help="the OpenFlow NF capability table shared with the placer (default: "
                        "openflow_nfs.json of this source tree)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def _defaults_parsed(args: argparse.Namespace) -> argparse.Namespace:
    """argparse does not run type= on string defaults that are not given: do it here."""
    for name in ("listen", "ofp_listen", "metrics"):
        if isinstance(getattr(args, name), str):
            setattr(args, name, host_port(getattr(args, name)))
    return args


def run_openflow(switch: Switch, host: str, port: int) -> None:
    """Start os-ken's app manager in this process with TorApp listening on host:port."""
    from os_ken import cfg
    from os_ken.base import app_manager
    from os_ken.controller import controller  # noqa: F401 - registers the ofp_* options

    from .app import TorApp

    cfg.CONF([], project="os_ken")
    cfg.CONF.set_override("ofp_listen_host", host)
    cfg.CONF.set_override("ofp_tcp_listen_port", port)
    TorApp.switch = switch
    mgr = app_manager.AppManager.get_instance()
    mgr.load_apps(["keel_torctl.app"])
    mgr.instantiate_apps(**mgr.create_contexts())


def grpc_server(listen: str, servicer: TorControl, token: str) -> grpc.Server:
    """The TorControl API on `listen` (HOST:PORT), not started yet; it refuses calls without
    `token`."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64),
                         interceptors=[controltoken.ServerInterceptor(token)])
    torctl_pb2_grpc.add_TorControlServicer_to_server(servicer, server)
    if not server.add_insecure_port(listen):
        raise OSError(f"--listen {listen}: cannot listen there")
    return server


def main(argv: Sequence[str] | None = None) -> int:
    args = _defaults_parsed(parser().parse_args(argv))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        caps = load_capabilities(Path(args.capabilities))
    except (OSError, ValueError) as e:
        print(f"keel-torctl: --capabilities: {e}", file=sys.stderr)
        return 2
    try:
        token, created = controltoken.ensure(args.control_token_file)
    except controltoken.TokenError as e:
        print(f"keel-torctl: --control-token-file: {e}", file=sys.stderr)
        return 2
    LOG.info("%s %s", "generated the control-plane token in" if created else "control-plane token from",
             args.control_token_file)
    metrics = Metrics()
    pins = frozenset(args.datapath_id)
    if not pins and os.environ.get("KEEL_TOR_DATAPATH_ID"):
        try:
            pins = frozenset([datapath_id(os.environ["KEEL_TOR_DATAPATH_ID"])])
        except argparse.ArgumentTypeError as e:
            print(f"keel-torctl: KEEL_TOR_DATAPATH_ID: {e}", file=sys.stderr)
            return 2
    if pins:
        LOG.info("switches allowed: datapath ID %s", ", ".join(f"{d:016x}" for d in sorted(pins)))
    else:
        LOG.warning("no --datapath-id: any OpenFlow peer that connects to %s:%d becomes the ToR", *args.ofp_listen)
    switch = Switch(metrics, datapath_ids=pins)
    gw = Gateway(args.gateway, token) if args.gateway else None
    opts = Options(args.ingress_port, args.egress_port, dict(args.worker_port), args.idle_timeout,
                   caps, gw is not None)
    ctl = Controller(opts, switch, metrics, gw.list_flows if gw else lambda: [])
    try:
        server = grpc_server("%s:%d" % args.listen, TorControl(ctl, metrics), token)
        metrics.serve(*args.metrics)
    except (OSError, RuntimeError) as e:
        print(f"keel-torctl: {e}", file=sys.stderr)
        return 1
    server.start()
    if gw:
        gw.follow(ctl)
    run_openflow(switch, *args.ofp_listen)
    LOG.info("keel-torctl: gRPC on %s:%d, OpenFlow on %s:%d, metrics on %s:%d",
             *args.listen, *args.ofp_listen, *args.metrics)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(1)
    LOG.info("keel-torctl: stopped (the switch keeps its rules)")
    logging.shutdown()
    # os-ken's threads are not daemons and have no way to stop; the process ends here.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
