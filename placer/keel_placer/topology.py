"""Load and check the rack topology YAML (one ToR switch, servers, NICs, SmartNICs)."""

from __future__ import annotations

from typing import Any

import yaml

from .model import NicSpec, ServerSpec, SmartNicSpec, SwitchSpec, Topology

DEFAULT_LINK_LATENCY_US = 5.0


class TopologyError(ValueError):
    """A topology file that cannot be used; the message names the field."""


def _num(d: dict[str, Any], key: str, where: str, default: Any = None, integer: bool = False,
         positive: bool = True) -> Any:
    if key not in d:
        if default is None:
            raise TopologyError(f"{where}: missing '{key}'")
        return default
    v = d[key]
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or (positive and v <= 0) or v < 0:
        kind = "a positive integer" if integer else "a positive number"
        raise TopologyError(f"{where}: '{key}' must be {kind}, got {v!r}")
    return v


def _mapping(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise TopologyError(f"{where}: expected a mapping, got {type(v).__name__}")
    return v


def topology_from_dict(doc: Any) -> Topology:
    """Build a Topology from parsed YAML, raising TopologyError naming the bad field."""
    doc = _mapping(doc, "topology")
    sw = _mapping(doc.get("switch"), "switch")
    kind = sw.get("kind")
    if kind not in ("pisa", "openflow"):
        raise TopologyError(f"switch: 'kind' must be pisa or openflow, got {kind!r}")
    switch = SwitchSpec(kind, _num(sw, "stages", "switch", integer=True),
                        float(_num(sw, "ports_gbps", "switch", 100.0)))
    raw_servers = doc.get("servers")
    if not isinstance(raw_servers, list) or not raw_servers:
        raise TopologyError("servers: expected a non-empty list")
    servers = []
    names: set[str] = set()
    for i, s in enumerate(raw_servers):
        where = f"servers[{i}]"
        s = _mapping(s, where)
        name = s.get("name")
        if not isinstance(name, str) or not name:
            raise TopologyError(f"{where}: 'name' must be a non-empty string")
        if name in names:
            raise TopologyError(f"{where}: duplicate server name '{name}'")
        names.add(name)
        nics = []
        raw_nics = s.get("nics")
        if not isinstance(raw_nics, list) or not raw_nics:
            raise TopologyError(f"{where}: 'nics' must be a non-empty list")
        for j, n in enumerate(raw_nics):
            nw = f"{where}.nics[{j}]"
            n = _mapping(n, nw)
            snic = None
            if n.get("smartnic") is not None:
                sn = _mapping(n["smartnic"], f"{nw}.smartnic")
                if sn.get("kind") != "ebpf":
                    raise TopologyError(f"{nw}.smartnic: 'kind' must be ebpf, got {sn.get('kind')!r}")
                snic = SmartNicSpec("ebpf", _num(sn, "cores", f"{nw}.smartnic", 48, integer=True),
                                    float(_num(sn, "ghz", f"{nw}.smartnic", 0.8)))
            nics.append(NicSpec(float(_num(n, "gbps", nw)), snic))
        servers.append(ServerSpec(name, _num(s, "cores", where, integer=True),
                                  float(_num(s, "ghz", where)),
                                  _num(s, "numa_nodes", where, 1, integer=True), tuple(nics),
                                  float(_num(s, "link_latency_us", where, DEFAULT_LINK_LATENCY_US))))
    return Topology(switch, tuple(servers))


def load_topology(path: str) -> Topology:
    """Read a topology YAML file."""
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise TopologyError(f"{path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise TopologyError(f"{path}: bad YAML: {e}") from e
    return topology_from_dict(doc)


def parse_topology_text(text: str) -> Topology:
    """Parse topology YAML text (used by the gRPC service)."""
    try:
        return topology_from_dict(yaml.safe_load(text))
    except yaml.YAMLError as e:
        raise TopologyError(f"bad YAML: {e}") from e
