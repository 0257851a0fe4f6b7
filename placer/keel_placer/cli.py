"""keel-place: the command line of keel's Placer (its --help is the user documentation)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from . import refine_cli
from .algos import ALGOS, run
from .catalog import (ALIASES, Catalog, CatalogError, ProfileError, default_catalog_path,
                      default_nf_profile_path, library, load_profiles, use_catalog)
from .evaluate import evaluate
from .lang import SpecError
from .model import Placement
from .pattern import Problem
from .spec import parse_spec
from .topology import TopologyError, load_topology

EXIT_BAD_INPUT = 2

DESCRIPTION = """\
Place NF chains across a programmable ToR switch, SmartNICs and server cores so that
every chain gets at least its t_min and the aggregate marginal throughput (rate above
t_min) is as high as possible (Lemur's Placer).

Chain language (one statement per line; // and /* */ comments):
  flow NAME = [{'dst_ip':'198.18.1.0/24', 'proto':'tcp'}, ...]   a traffic aggregate
  func NAME = NF(arg=value, ...)                                  a named NF instance
  chain NAME = A(args) -> B -> [{'flowspec':[{...}], 'nfchain': X -> Y},
                                {'gate_select':'2', 'nfchain': ''}] -> C
      a list is a branch: each arm has a flowspec (or gate_select), an optional
      'weight' (traffic share, default equal) and a sub-chain (a chain's name, an
      inline chain, or '' to pass through); the arms merge into what follows
  FLOW : CHAIN [@ {'t_min':'1.1Gbps', 't_max':'100Gbps', 'd_max':'45us'}]
      binds a flow to a chain with its SLO (t_min default 0, t_max unbounded, no
      d_max); bare numbers mean Gbps and microseconds
NF names are case-insensitive: %(nfs)s
  aliases: %(aliases)s
NF arguments are keel-nf's: the names, types and ranges each NF declares (KEEL_NF_ARGS),
e.g. Tunnel(vlan=7), NAT(external_ip='198.18.100.1', port_range=[1024, 65535]). They
come from the NF catalogue `keel-chain --list --json` exports (--catalog FILE, env
KEEL_NF_CATALOG, default build/nf-catalog.json as `make build` writes it); see
`keel-nf --help` for its schema. Required arguments may be left out here (placement
needs costs, not configurations). --tenant-nfs FILE adds a tenant's packet functions:
a JSON list of catalogue entries named by function name, with optional "cycles"
(server cycles per packet, default 500); they run on servers only.

Topology YAML:
  switch: {kind: pisa|openflow, stages: 12, ports_gbps: 100}
  servers: [{name, cores, ghz, numa_nodes, link_latency_us (default 5),
             nics: [{gbps, smartnic: {kind: ebpf, cores, ghz} | null}]}]

Profiles (--profiles FILE, JSON) replace the catalog's costs:
  {"packet_bytes":1500, "server_cycles":{"acl":985,...}, "smartnic_cycles":{...},
   "targets":{"ipv4fwd":["p4"]}}
Measured costs in bench/results/nf_profile.json are used when present
(--nf-profile FILE|none overrides; env KEEL_NF_PROFILE too).

Exit status: 0 on success (also when no placement is feasible: see "feasible"),
2 on bad input (the message names file:line:column and the problem).
"""


def _description() -> str:
    try:
        nfs = ", ".join(library().names())
    except CatalogError as e:
        nfs = f"(no catalogue: {e})"
    return DESCRIPTION % {"nfs": nfs,
                          "aliases": ", ".join(f"{k}={v}" for k, v in sorted(ALIASES.items()))}


class BadInput(Exception):
    """Input that the user must fix; printed and exit status 2."""


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--catalog")
    use_catalog(pre.parse_known_args(argv)[0].catalog)
    p = argparse.ArgumentParser(prog="keel-place", description=_description(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def common(sp: argparse.ArgumentParser, topology: bool = True) -> None:
        sp.add_argument("--spec", required=True, metavar="FILE", help="chain spec file")
        if topology:
            sp.add_argument("--topology", required=True, metavar="FILE", help="topology YAML")
        sp.add_argument("--profiles", metavar="FILE", help="JSON cost profiles replacing the catalog's")
        sp.add_argument("--nf-profile", metavar="FILE|none",
                        help="measured nf_profile.json (default: bench/results/nf_profile.json if found)")
        catalog(sp)
        sp.add_argument("--tenant-nfs", metavar="FILE",
                        help="JSON list of a tenant's packet functions (catalogue entries + cycles)")

    def catalog(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--catalog", metavar="FILE",
                        help=f"NF catalogue from keel-chain --list --json (default {default_catalog_path()})")

    sp = sub.add_parser("parse", help="check a spec and print its chain graphs",
                        description="Parse a spec; print each bound chain's NF graph.")
    common(sp, topology=False)
    sp.add_argument("--json", action="store_true", help="print the graphs as JSON")

    sp = sub.add_parser("place", help="place the spec's chains on a topology",
                        description="Place the chains and print the placement. With --json the "
                        "output is {feasible, algo, seconds, marginal_gbps, chains:[{name, "
                        "t_min_gbps, rate_gbps, latency_us, nfs:[{name,nf,target,server,subgroup}], "
                        "subgroups:[{id,server,cores,nfs}]}], switch:{stages_used}} (+ reason "
                        "when infeasible).")
    common(sp)
    sp.add_argument("--algo", default="heuristic", choices=list(ALGOS),
                    help="heuristic (Lemur §3.2, default), optimal (exact MILP), or a Lemur "
                    "§5.1 baseline")
    sp.add_argument("--json", action="store_true", help="print the placement as JSON")
    refine_cli.add_refine_args(sp)

    sp = sub.add_parser("eval", help="compare every algorithm over t_min = delta x base rate",
                        description="For each delta, set every chain's t_min to delta x its base "
                        "rate (one core on its costliest server NF, Lemur §5.1) and t_max to "
                        "100 Gbps, run every algorithm and print a table (JSON with --out).")
    common(sp)
    sp.add_argument("--deltas", default="0.5,1,1.5,2,2.5,3,3.5,4", metavar="LIST",
                    help="comma-separated deltas (default 0.5..4 step 0.5)")
    sp.add_argument("--algos", default=",".join(ALGOS), metavar="LIST",
                    help="comma-separated algorithms (default: all)")
    sp.add_argument("--out", metavar="FILE", help="also write the table as JSON to FILE")

    sp = sub.add_parser("serve", help="run the gRPC service (keel.v1.Placer: Parse, Place)",
                        description="Serve keel.v1.Placer over gRPC until interrupted.")
    sp.add_argument("--listen", default="127.0.0.1:50062", metavar="ADDR:PORT")
    sp.add_argument("--control-token-file", metavar="FILE",
                    help="the control-plane token: calls without \"authorization: Bearer TOKEN\" (TOKEN "
                         "this file's content) are refused (UNAUTHENTICATED); created (random, mode "
                         "0600) if missing; keel-gateway must be given the same file "
                         "(default /var/lib/keel/secrets/control-token)")
    sp.add_argument("--nf-profile", metavar="FILE|none")
    catalog(sp)
    refine_cli.add_parsers(sub)
    return p


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}") from e


def _nf_profile(arg: str | None) -> str | None:
    if arg == "none":
        return None
    return arg or default_nf_profile_path()


def load_catalog(args: argparse.Namespace) -> Catalog:
    """The library's catalogue with the --tenant-nfs file's NFs."""
    try:
        cat = library()
        if args.tenant_nfs:
            try:
                entries = json.loads(_read(args.tenant_nfs))
            except json.JSONDecodeError as e:
                raise BadInput(f"{args.tenant_nfs}: {e}") from e
            cat = cat.with_tenants(entries, args.tenant_nfs)
    except CatalogError as e:
        raise BadInput(str(e)) from e
    return cat


def load_spec(args: argparse.Namespace, cat: Catalog):
    """Read and resolve the --spec file."""
    try:
        return parse_spec(_read(args.spec), cat)
    except SpecError as e:
        raise BadInput("\n".join(d.render(args.spec) for d in e.diagnostics)) from e


def load_problem(args: argparse.Namespace) -> Problem:
    """Read spec, topology and profiles named on the command line."""
    cat = load_catalog(args)
    spec = load_spec(args, cat)
    try:
        topo = load_topology(args.topology)
        profiles = load_profiles(args.profiles, _nf_profile(args.nf_profile), cat)
    except (TopologyError, ProfileError) as e:
        raise BadInput(str(e)) from e
    return Problem(spec, topo, profiles)


def _fmt_gbps(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3f}"


def print_placement(pl: Placement) -> None:
    if not pl.feasible:
        print(f"infeasible ({pl.algo}, {pl.seconds:.3f}s): {pl.reason}")
        return
    print(f"{pl.algo}: marginal {pl.marginal_gbps:.3f} Gbps, switch stages {pl.stages_used}, "
          f"{pl.seconds:.3f}s")
    for c in pl.chains:
        print(f"chain {c.name}: rate {c.rate_gbps:.3f} Gbps (t_min {c.t_min_gbps:.3f}), "
              f"latency {c.latency_us:.1f}us")
        on = {"switch": [], "smartnic": []}
        for n in c.nfs:
            if n.target in on:
                on[n.target].append(n.name)
        for where, names in on.items():
            if names:
                print(f"  {where}: {' '.join(names)}")
        for s in c.subgroups:
            print(f"  subgroup {s.id} on {s.server}, {s.cores} core(s): {' -> '.join(s.nfs)}")


def print_eval(table: dict[str, Any]) -> None:
    algos = list(table["rows"][0]["algos"]) if table["rows"] else []
    print("delta  " + "  ".join(f"{a:>14}" for a in algos))
    for r in table["rows"]:
        cells = []
        for a in algos:
            v = r["algos"][a]
            cells.append(f"{v['marginal_gbps']:14.3f}" if v["feasible"] else f"{'infeasible':>14}")
        print(f"{r['delta']:<6} " + "  ".join(cells))
    for k, v in table["checks"].items():
        print(f"{k}: {v}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(argv).parse_args(argv)
    try:
        if args.cmd == "serve":
            from .service import controltoken, serve
            try:
                serve(args.listen, args.control_token_file or controltoken.DEFAULT_FILE,
                      _nf_profile(args.nf_profile))
            except (CatalogError, controltoken.TokenError) as e:
                raise BadInput(str(e)) from e
            return 0
        if args.cmd == "parse":
            spec = load_spec(args, load_catalog(args))
            if args.json:
                print(json.dumps({"chains": [g.to_dict() for g in spec.chains]}, indent=2))
            else:
                for g in spec.chains:
                    print(f"chain {g.name} (flow {g.flow}): {len(g.nodes)} NFs, "
                          f"t_min {_fmt_gbps(g.slo.t_min)} Gbps")
                    for e in g.edges:
                        src = "ingress" if e.src < 0 else g.nodes[e.src].name
                        dst = "egress" if e.dst == -2 else g.nodes[e.dst].name
                        print(f"  {src} -> {dst} ({e.weight:.3g})")
            return 0
        done = refine_cli.run(args)
        if done is not None:
            return done
        problem = load_problem(args)
        if args.cmd == "place":
            pl = run(problem, args.algo)
            report = refine_cli.refine_report(args, problem, pl)
            if args.json:
                d = pl.to_dict()
                if report is not None:
                    d["refine"] = report
                print(json.dumps(d, indent=2))
            else:
                print_placement(pl)
                if report is not None:
                    refine_cli.print_refine(report)
            return 0
        try:
            deltas = [float(x) for x in args.deltas.split(",") if x.strip()]
        except ValueError:
            raise BadInput(f"--deltas: expected comma-separated numbers, got {args.deltas!r}") from None
        algos = [a.strip() for a in args.algos.split(",") if a.strip()]
        unknown = [a for a in algos if a not in ALGOS]
        if unknown or not deltas or any(d <= 0 for d in deltas):
            raise BadInput(f"--algos: unknown {', '.join(unknown)}" if unknown
                           else "--deltas: expected positive numbers")
        table = evaluate(problem, deltas, algos)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(table, indent=2) + "\n")
        print_eval(table)
        return 0
    except (BadInput, refine_cli.BadInput) as e:
        print(f"keel-place: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
