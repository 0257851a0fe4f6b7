"""gRPC service keel.v1.Placer (Parse, Place) over the same code as the CLI."""

from __future__ import annotations

import json
import math
import os
import tempfile
from concurrent import futures

import grpc

from .algos import ALGOS, run
from .catalog import Catalog, CatalogError, ProfileError, library, load_profiles
from .lang import SpecError
from .pattern import Problem
from .refine import RefineError, parse_steps, refine
from .source import Source, SourceError, parse_sources
from .spec import parse_spec
from .topology import TopologyError, parse_topology_text

try:
    from .gen.keel.v1 import controltoken
    from .gen.keel.v1 import placer_pb2 as pb
    from .gen.keel.v1 import placer_pb2_grpc as pb_grpc
except ImportError as e:  # pragma: no cover - only without `make build`
    raise ImportError("gRPC stubs missing: run `make build` (proto/genpy.py)") from e


def _errors(e: SpecError) -> list:
    return [pb.SpecError(line=d.line, column=d.col, message=d.message) for d in e.diagnostics]


def _user_errors(e: SourceError) -> list:
    return [pb.SpecError(column=u.column, message=u.message, chain=u.chain, field=u.field) for u in e.errors]


def _spec(text: str, sources, cat: Catalog):
    """The spec of a Place request: its chain sources when it has any, else its text."""
    if sources:
        return parse_sources([Source(c.name, c.expression, c.slo) for c in sources], cat)
    return parse_spec(text, cat)


def _graph(g) -> pb.ChainGraph:
    return pb.ChainGraph(
        name=g.name, flow=g.flow, t_min_gbps=g.slo.t_min,
        t_max_gbps=0.0 if math.isinf(g.slo.t_max) else g.slo.t_max,
        d_max_us=g.slo.d_max or 0.0,
        nodes=[pb.NfNode(id=n.id, name=n.name, nf=n.nf, args_json=json.dumps(n.args), weight=n.weight)
               for n in g.nodes],
        edges=[pb.NfEdge(src=e.src, dst=e.dst, weight=e.weight) for e in g.edges])


def _catalog(tenant_nfs_json: str) -> Catalog:
    if not tenant_nfs_json:
        return library()
    try:
        entries = json.loads(tenant_nfs_json)
    except json.JSONDecodeError as e:
        raise CatalogError(f"tenant_nfs_json: {e}") from e
    return library().with_tenants(entries, "tenant_nfs_json")


class PlacerService(pb_grpc.PlacerServicer):
    """Parse and Place; bad input comes back in the response, never as an RPC error."""

    def __init__(self, nf_profile: str | None = None):
        self.nf_profile = nf_profile

    def Parse(self, request, context):
        try:
            spec = parse_spec(request.spec, _catalog(request.tenant_nfs_json))
        except SpecError as e:
            return pb.ParseResponse(ok=False, errors=_errors(e))
        except CatalogError as e:
            return pb.ParseResponse(ok=False, errors=[pb.SpecError(line=0, column=0, message=str(e))])
        return pb.ParseResponse(ok=True, chains=[_graph(g) for g in spec.chains])

    def Place(self, request, context):
        try:
            cat = _catalog(request.tenant_nfs_json)
            spec = _spec(request.spec, request.chains, cat)
        except SpecError as e:
            return pb.PlaceResponse(ok=False, errors=_errors(e))
        except SourceError as e:
            return pb.PlaceResponse(ok=False, errors=_user_errors(e))
        except CatalogError as e:
            return pb.PlaceResponse(ok=False, input_error=str(e))
        algo = request.algo or "heuristic"
        if algo not in ALGOS:
            return pb.PlaceResponse(ok=False, input_error=f"unknown algo '{algo}' "
                                    f"(expected one of {', '.join(ALGOS)})")
        try:
            topo = parse_topology_text(request.topology_yaml)
            profiles = self._profiles(request.profiles_json, cat)
            steps = parse_steps(request.refine)
        except (TopologyError, ProfileError, RefineError) as e:
            return pb.PlaceResponse(ok=False, input_error=str(e))
        problem = Problem(spec, topo, profiles)
        pl = run(problem, algo)
        report = json.dumps(refine(problem, pl, steps)) if steps else ""
        return pb.PlaceResponse(
            graphs=[_graph(g) for g in spec.chains] if request.chains else [],
            refine_json=report,
            ok=True, feasible=pl.feasible, algo=pl.algo, seconds=pl.seconds,
            marginal_gbps=pl.marginal_gbps, switch_stages_used=pl.stages_used,
            reason=pl.reason or "",
            chains=[pb.PlacedChain(
                name=c.name, t_min_gbps=c.t_min_gbps, rate_gbps=c.rate_gbps, latency_us=c.latency_us,
                nfs=[pb.PlacedNf(name=n.name, nf=n.nf, target=n.target, server=n.server or "",
                                 subgroup=-1 if n.subgroup is None else n.subgroup) for n in c.nfs],
                subgroups=[pb.PlacedSubgroup(id=s.id, server=s.server, cores=s.cores, nfs=s.nfs)
                           for s in c.subgroups]) for c in pl.chains])

    def _profiles(self, text: str, cat: Catalog):
        if not text:
            return load_profiles(None, self.nf_profile, cat)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write(text)
        try:
            return load_profiles(f.name, self.nf_profile, cat)
        except ProfileError as e:
            raise ProfileError(str(e).replace(f.name, "profiles_json")) from None
        finally:
            os.unlink(f.name)


def start(listen: str, token: str, nf_profile: str | None = None) -> tuple[grpc.Server, int]:
    """Start the server on `listen` (host:port, port 0 picks one); returns it and its port.
    Calls without the control-plane token `token` are refused (UNAUTHENTICATED).
    The library's catalogue is loaded first, so a missing one stops the start (CatalogError)."""
    library()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         interceptors=[controltoken.ServerInterceptor(token)])
    pb_grpc.add_PlacerServicer_to_server(PlacerService(nf_profile), server)
    port = server.add_insecure_port(listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    server.start()
    return server, port


def serve(listen: str, token_file: str, nf_profile: str | None = None) -> None:
    """Serve until interrupted (keel-place serve), creating the token file if it is missing."""
    token, created = controltoken.ensure(token_file)
    said = "generated the control-plane token in" if created else "control-plane token from"
    print(f"keel-place: {said} {token_file}", flush=True)
    server, port = start(listen, token, nf_profile)
    print(f"keel-place: serving keel.v1.Placer on {listen.rsplit(':', 1)[0]}:{port}", flush=True)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(grace=1.0)
