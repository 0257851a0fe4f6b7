"""keel-place's finer placement commands: smartchain (SmartNIC/CPU partition), octans (NUMA
cores), uno (host/SmartNIC offload), oneswitch (rule translation). cli.py adds them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from . import octans as oc
from . import refine as rf
from . import oneswitch as osw
from . import smartchain as sc
from . import uno
from .lang import SpecError

SMARTCHAIN_HELP = """\
Partition an element graph between a bump-in-the-wire SmartNIC and the CPU (SmartChain
§III-IV). Each element goes to the SmartNIC's ingress part, the CPU or the SmartNIC's
egress part so that a packet crosses PCIe at most once each way; SmartChain's 0-1 ILP
maximises t_trans*(1-y) + sum of the SmartNIC elements' suitability s_e = t_cpu - t_nic,
keeping branch dependencies (from the graph) and action dependencies (from read/write sets)
in order and each device within capacity. The two strawmen of §IV-A are scored the same way:
sequential (SmartNIC in processing order until full) and suitability-greedy (most suitable
elements onto the SmartNIC wherever they are; every change of device crosses PCIe).

--spec: the element graph in the chain language (see keel-place --help); its NFs are the
  elements' names, several bound chains are placed together as one big graph, and each
  chain's t_min is its estimated throughput theta^est (default --rate).
--elements: JSON {"elements": [{"name": "Logger", "t_cpu_us": 15, "t_nic_us": 245,
  "cap_cpu_gbps": 4, "cap_nic_gbps": 2, "reads": ["ip.src", ...], "writes": [...],
  "help": "..."}]}. t_*: latency on CPU and SmartNIC; cap_*: the element's throughput
  alone on one CPU core / on the whole SmartNIC. Two elements on a common path depend on
  each other when one writes a field the other reads or writes (NAT and a load balancer
  that both rewrite addresses keep their order; read-only elements may move).
  placer/examples/smartchain_elements.json holds SmartChain Table I.

The benefit is latency saved against running every element on the CPU (one round trip),
on the worst forwarding path. JSON (--json): {"t_trans_us", "chains": [{"name",
"rate_gbps"}], "dependencies": [{"before", "after", "kind", "fields"}], "algos":
{"smartchain"|"sequential"|"suitability-greedy": {"feasible", "seconds", "benefit_us",
"round_trips", "nic_load", "cpu_load", "elements": [{"name", "element", "position",
"suitability_us"}], "edges": [{"src", "dst"}], "reason"?}}}; positions are nic-ingress,
cpu, nic-egress, elements are listed in processing order.
"""

OCTANS_HELP = """\
Map a server's chains onto NUMA nodes and cores (Octans §III-IV): one core per NF, node 0
the local node (the NICs' node). The aggregate throughput is the sum over chains of the
slowest NF's rate P*(1-lambda); lambda, the performance drop index, grows with the
competing level f = sum 1/resource_stalls of the NFs sharing its LLC and its memory
controller or QPI, with separate parameters on local and remote nodes and adjustments
for cross-node and cache-prefetching chaining. Octans' Algorithm 1 (whole chains on
nodes, then moving the part of a remote chain before its bottleneck NF to the local
node) is compared with random, locality-first (whole chains, local node first) and,
when small enough (2^16 assignments), exhaustive search.

--placement: {"chains": [{"name": "sfc1", "nfs": ["router", "firewall", "nids"]}]}, or the
  output of `keel-place place --json` (the NFs it put on --server, default the first).
--machine:
%s
JSON (--json): {"algo", "seconds", "aggregate_mpps", "chains": [{"name", "mpps", "nfs":
[{"name", "nf", "node", "core", "drop_index", "mpps"}]}], "compare": {ALGO: mpps|null}}.
""" % "\n".join("  " + line for line in oc.PROFILE_HELP.splitlines())

UNO_HELP = """\
Decide which NFs of a host run on its SmartNIC(s) (UNO §3.2.1, Algorithm 1): minimise the
host cores sum p_i h_i while the PCIe traffic of the edges cut between host and SmartNIC
stays within T and the SmartNIC's cores within D; VMs stay on the host, ports on their
SmartNIC, NFs the SmartNIC accelerates on it. Several SmartNICs make a (k+1)-way
partition, each with its own D and PCIe link T.

--graph: JSON placement graph
  {"smartnics": [{"name": "snic0", "cores": 36, "pcie_gbps": 64}],
   "vertices": [{"name": "dpi1", "kind": "nf", "r_host": 0.556, "r_nic": 1.111,
                 "accelerated": false},
                {"name": "vm1", "kind": "vm"}, {"name": "eth0", "kind": "port", "smartnic": "snic0"}],
   "traffic": [{"src": "eth0", "dst": "dpi1", "gbps": 4}, ...]}
  r_host / r_nic: cores per Gbps on the host / the SmartNIC (UNO measured a DPI at 5 x86
  cores or 10 SmartNIC cores for 9 Gbps); an NF's traffic is the larger of its in and out.
JSON (--json): {"feasible", "seconds", "status", "placement": {NF: "host"|SMARTNIC},
"host_cores", "host_cores_all_host", "host_cores_saved", "smartnic_cores": {..},
"pcie_gbps": {..}}.
"""

ONESWITCH_HELP = """\
Translate the OpenFlow rules of one virtual switch into rules for the host switch and the
SmartNIC switch (UNO §3.3.1, Table 1): a rule is installed on its ingress port's switch;
outputs across the PCIe link carry a flow-id (push on the ingress switch, pop on the
other); a rule with outputs on both switches runs in two stages through table X.

--rules: {"rules": [{"priority": 5, "match": {"in_port": "V1", "ipv4_src": "10.0.0.1"},
  "actions": [["set", "ipv4_src", "1.1.1.1"], ["output", "V2"], ["output", "V4"]]}]}
  match fields: in_port, %s (exact values; a missing field is a wildcard);
  actions run in order, an output sends the packet as modified so far.
--portmap: {"link": {"host": "P2", "snic": "P3"}, "ports": {"V1": ["host", "P1"],
  "V4": ["snic", "P5"]}}: the two switches' ends of the link, and each virtual port's
  switch and physical port.
Prints each switch's rules (--json: {SWITCH: [{"table": 0|"X", "priority", "match",
"actions"}]}).
""" % ", ".join(osw.FIELDS)


class BadInput(Exception):
    """Input the user must fix (cli.py prints it and exits 2)."""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add the smartchain, octans, uno and oneswitch commands to keel-place's parser."""
    sp = sub.add_parser("smartchain", help="partition an element graph between SmartNIC and CPU "
                        "(SmartChain)", description=SMARTCHAIN_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("--spec", required=True, metavar="FILE", help="element graph (chain language)")
    sp.add_argument("--elements", required=True, metavar="FILE", help="elements JSON (see above)")
    sp.add_argument("--t-trans", type=float, default=sc.T_TRANS_US, metavar="US",
                    help="SmartNIC<->CPU round-trip latency (default 26, SmartChain §II)")
    sp.add_argument("--rate", type=float, default=1.0, metavar="GBPS",
                    help="theta^est of a chain without t_min (default 1)")
    sp.add_argument("--cpu-cores", type=float, default=1.0, metavar="N",
                    help="CPU capacity in cores (C3's right-hand side; default 1 as the paper)")
    sp.add_argument("--nic-share", type=float, default=1.0, metavar="F",
                    help="share of the SmartNIC these chains may use (C2; default 1)")
    sp.add_argument("--json", action="store_true", help="print the result as JSON")

    sp = sub.add_parser("octans", help="map a server's NFs onto NUMA nodes and cores (Octans)",
                        description=OCTANS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("--placement", required=True, metavar="FILE", help="chains to map (see above)")
    sp.add_argument("--machine", required=True, metavar="FILE", help="NUMA nodes, cores, NF models")
    sp.add_argument("--profile", metavar="FILE", help="NF models replacing the machine file's \"nfs\"")
    sp.add_argument("--server", metavar="NAME", help="which server of a keel-place place output")
    sp.add_argument("--algo", default="octans", choices=oc.ALGOS, help="default octans")
    sp.add_argument("--seed", type=int, default=0, help="random baseline's seed (default 0)")
    sp.add_argument("--json", action="store_true", help="print the result as JSON")

    sp = sub.add_parser("uno", help="offload a host's NFs to its SmartNIC(s) (UNO's ILP)",
                        description=UNO_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("--graph", required=True, metavar="FILE", help="placement graph (see above)")
    sp.add_argument("--json", action="store_true", help="print the result as JSON")

    sp = sub.add_parser("oneswitch", help="translate virtual OpenFlow rules to host + SmartNIC "
                        "switches (UNO's OneSwitch)", description=ONESWITCH_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("--rules", required=True, metavar="FILE", help="virtual rules (see above)")
    sp.add_argument("--portmap", required=True, metavar="FILE", help="port map (see above)")
    sp.add_argument("--json", action="store_true", help="print the physical rules as JSON")


def add_refine_args(sp: argparse.ArgumentParser) -> None:
    """--refine and --octans-profile of `keel-place place`."""
    sp.add_argument("--refine", metavar="STEPS",
                    help="after placing, refine each server: all, or a comma-separated list of "
                    "smartchain (SmartNIC/CPU partition for chains with a d_max), uno (SmartNIC "
                    "offload saving host cores for the others) and octans (NUMA nodes and cores "
                    "of the CPU's subgroups on servers with numa_nodes > 1); adds \"refine\": "
                    "{steps, servers: [{server, nic: [{algo, measure, before, after, nfs: [{name, "
                    "chain, nf, target, position (smartchain: nic-ingress, cpu or nic-egress)}]}], "
                    "numa: {algo, measure, before, after, subgroups: [{chain, name, subgroup, nfs, "
                    "node, cores}]}}]} to --json")
    sp.add_argument("--octans-profile", metavar="FILE",
                    help="Octans NF models for --refine octans (keel-place octans --help); "
                    "default: derived from the NFs' cycles")


def refine_report(args: argparse.Namespace, problem: Any, pl: Any) -> dict[str, Any] | None:
    """The --refine report of a placement, or None without --refine."""
    if not getattr(args, "refine", None):
        return None
    try:
        steps = rf.parse_steps(args.refine)
        prof = None
        if args.octans_profile:
            prof = oc.load_profile(args.octans_profile)
    except (rf.RefineError, oc.OctansError) as e:
        raise BadInput(str(e)) from e
    return rf.refine(problem, pl, steps, prof)


def print_refine(report: dict[str, Any]) -> None:
    for s in report["servers"]:
        steps = list(s["nic"]) + ([s["numa"]] if s["numa"] else [])
        for r in steps:
            after = "-" if r["after"] is None else r["after"]
            note = " (Lemur's split exceeds UNO's PCIe or SmartNIC limits)" if r.get("before_fits") is False else ""
            print(f"refine {s['server']}: {r['algo']}: {r['measure']} {r['before']} -> {after}{note}"
                  + (f" ({r['reason']})" if r.get("reason") else ""))
            for n in r.get("nfs", []):
                print(f"  {n['name']}: {n['target']}")
            for g in r.get("subgroups", []):
                print(f"  {g['chain']} {g['name']}: node {g['node']} cores {g['cores']}")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}") from e


def run(args: argparse.Namespace) -> int | None:
    """Run one of this module's commands; None when args.cmd is not one of them."""
    if args.cmd == "smartchain":
        return _smartchain(args)
    if args.cmd == "octans":
        return _octans(args)
    if args.cmd == "uno":
        return _uno(args)
    if args.cmd == "oneswitch":
        return _oneswitch(args)
    return None


def _positive(name: str, v: float) -> None:
    if not v > 0:
        raise BadInput(f"{name}: must be positive, got {v}")


def _smartchain(args: argparse.Namespace) -> int:
    for name in ("t_trans", "rate", "cpu_cores", "nic_share"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    try:
        elements = sc.load_elements(args.elements)
    except sc.ElementsError as e:
        raise BadInput(str(e)) from e
    try:
        g = sc.graph_from_spec(_read(args.spec), elements, args.rate)
    except SpecError as e:
        raise BadInput("\n".join(d.render(args.spec) for d in e.diagnostics)) from e
    deps = sc.dependencies(g)
    results = {a: sc.place(g, a, deps, args.t_trans, args.nic_share, args.cpu_cores) for a in sc.ALGOS}
    out: dict[str, Any] = {
        "t_trans_us": args.t_trans,
        "chains": [{"name": n, "rate_gbps": r} for n, r in zip(g.chain_names, g.rate_gbps)],
        "dependencies": [{"before": g.names[d.before], "after": g.names[d.after], "kind": d.kind,
                          "fields": list(d.fields)} for d in deps],
        "algos": {a: sc.result_dict(g, r) for a, r in results.items()},
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{len(g.names)} elements, {len(deps)} dependencies, t_trans {args.t_trans:g}us")
    for d in deps:
        why = f" ({', '.join(d.fields)})" if d.fields else ""
        print(f"  {g.names[d.before]} before {g.names[d.after]}: {d.kind}{why}")
    for a, r in results.items():
        if not r.positions:
            print(f"{a}: infeasible: {r.reason}")
            continue
        state = "" if r.feasible else f" [infeasible: {r.reason}]"
        print(f"{a}: benefit {r.benefit_us:.1f}us, {r.round_trips} PCIe round trip(s), SmartNIC "
              f"{r.nic_load:.2f}, CPU {r.cpu_load:.2f}{state}")
        for p, label in enumerate(sc.POSITIONS):
            names = [g.names[n] for n in r.order if r.positions[n] == p]
            if names:
                print(f"  {label}: {' -> '.join(names)}")
    return 0


def _octans(args: argparse.Namespace) -> int:
    try:
        machine, models = oc.load_machine(args.machine, args.profile)
        chains = oc.load_placement(args.placement, args.server)
        missing = oc.unknown_kinds(chains, models)
        if missing:
            raise BadInput(f"{args.profile or args.machine}: no model for NF {', '.join(missing)}")
        res = oc.place(chains, machine, models, args.algo, args.seed)
        if res is None:
            raise BadInput("exhaustive: too many assignments; use --algo octans")
        compare = {}
        for a in oc.ALGOS:
            if a != args.algo:
                r = oc.place(chains, machine, models, a, args.seed)
                compare[a] = None if r is None else round(r.prediction.total, 4)
    except oc.OctansError as e:
        raise BadInput(str(e)) from e
    out = oc.result_dict(res, chains, machine)
    out["compare"] = compare
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{res.algo}: {out['aggregate_mpps']:.3f} Mpps aggregate ({res.seconds:.3f}s); " +
          ", ".join(f"{a} {'-' if v is None else f'{v:.3f}'}" for a, v in compare.items()))
    for c in out["chains"]:
        print(f"chain {c['name']}: {c['mpps']:.3f} Mpps")
        for n in c["nfs"]:
            print(f"  {n['name']}: node {n['node']} core {n['core']}, drop {n['drop_index']:.3f}, "
                  f"{n['mpps']:.3f} Mpps")
    return 0


def _uno(args: argparse.Namespace) -> int:
    try:
        g = uno.load_graph(args.graph)
    except uno.UnoError as e:
        raise BadInput(str(e)) from e
    res = uno.solve(g)
    out = uno.result_dict(g, res)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if not res.feasible:
        print(f"infeasible ({res.status}): no placement keeps PCIe and SmartNIC within limits")
        return 0
    print(f"host cores {out['host_cores']:.2f} (all on host {out['host_cores_all_host']:.2f}, "
          f"saved {out['host_cores_saved']:.2f}), {res.seconds:.3f}s")
    for s in g.nics:
        nfs = [v for v, w in res.where.items() if w == s]
        print(f"  {s}: {out['smartnic_cores'][s]:.2f} cores, PCIe {out['pcie_gbps'][s]:.2f} Gbps: "
              f"{' '.join(nfs) or '-'}")
    print(f"  host: {' '.join(v for v, w in res.where.items() if w == uno.HOST) or '-'}")
    return 0


def _fmt(x: Any) -> str:
    return "X" if x == osw.TABLE_X else str(x)


def _fmt_action(a: tuple) -> str:
    if a[0] == "goto":
        return f"goto:{_fmt(a[1])}"
    return ":".join(str(x) for x in a)


def _oneswitch(args: argparse.Namespace) -> int:
    try:
        rules, pm = osw.load(args.rules, args.portmap)
        tr = osw.translate(rules, pm)
    except osw.OneSwitchError as e:
        raise BadInput(str(e)) from e
    if args.json:
        print(json.dumps({sw: [r.to_dict() for r in rs] for sw, rs in tr.rules.items()}, indent=2))
        return 0
    for sw, rs in tr.rules.items():
        for r in rs:
            match = ",".join(f"{k}={v}" for k, v in r.match.items()) or "*"
            acts = ",".join(_fmt_action(a) for a in r.actions) or "drop"
            print(f"{sw} table {_fmt(r.table)} priority {r.priority}: {match} -> {acts}")
    return 0
