"""The NF library: names, aliases, targets, argument schemas and cost profiles.

Targets follow Lemur Table 3 (server = C++/BESS, p4, ebpf = SmartNIC, openflow).
Server cycle costs marked "Lemur Table 4" are the worst-case (max, other NUMA node)
profiles the paper reports; the others are keel's own estimates until
bench/results/nf_profile.json measures them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

SERVER, P4, EBPF, OPENFLOW = "server", "p4", "ebpf", "openflow"

# Lemur §5.3: NSH/VLAN encap+decap on the server and the multi-core load balancer.
ENCAP_CYCLES = 220.0
LB_CYCLES = 180.0
# Lemur §4.2/§5.3: two PISA stages are burnt on encap and decap.
PISA_ENCAP_STAGES = 2
# One OpenFlow table steers packets by VLAN before the NF tables.
OPENFLOW_STEER_TABLES = 1
DEFAULT_PACKET_BYTES = 1500
DEFAULT_ACL_RULES = 1024


def _is_rules(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(r, dict) for r in v)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_rate(v: Any) -> bool:
    return _is_number(v) or isinstance(v, str)


@dataclass(frozen=True)
class ArgSpec:
    """One accepted NF argument: its check and a word for error messages."""

    check: Callable[[Any], bool]
    expect: str


@dataclass(frozen=True)
class NFKind:
    """One NF of the library with its targets, state and resource profile."""

    name: str
    targets: frozenset[str]
    replicable: bool
    server_cycles: float
    per_rule_cycles: float = 0.0
    smartnic_cycles: float | None = None
    p4_stages: int = 1
    p4_memory: float = 0.1  # fraction of one PISA stage's table memory
    openflow_rank: int | None = None  # fixed table order on an OpenFlow switch
    args: Mapping[str, ArgSpec] = field(default_factory=dict)

    def cycles(self, args: Mapping[str, Any]) -> float:
        """Server cycles per packet, linear in the rule count where relevant (§3.2)."""
        if not self.per_rule_cycles:
            return self.server_cycles
        rules = args.get("rules")
        n = len(rules) if isinstance(rules, list) else DEFAULT_ACL_RULES
        return self.server_cycles + self.per_rule_cycles * n


_RULES = {"rules": ArgSpec(_is_rules, "a list of rule dicts")}
_KINDS: list[NFKind] = [
    # ACL: Lemur Table 4 gives 4091 cycles max for 1024 rules -> 120 + 3.88/rule.
    NFKind("acl", frozenset({SERVER, P4, EBPF, OPENFLOW}), True, 120.0, 3.88, 900.0,
           1, 0.2, 1, _RULES),
    NFKind("nat", frozenset({SERVER, P4}), False, 507.0, p4_stages=2, p4_memory=0.9,
           args={"entries": ArgSpec(_is_int, "an integer"),
                 "ext_addr": ArgSpec(_is_str, "an address string")}),
    NFKind("tunnel", frozenset({SERVER, P4, EBPF, OPENFLOW}), True, 110.0, 0.0, 150.0,
           1, 0.1, 3, {"tag": ArgSpec(_is_int, "an integer VLAN id")}),
    NFKind("detunnel", frozenset({SERVER, P4, EBPF, OPENFLOW}), True, 110.0, 0.0, 150.0,
           1, 0.1, 0),
    NFKind("ipv4fwd", frozenset({SERVER, P4, EBPF, OPENFLOW}), True, 90.0, 0.0, 200.0,
           1, 0.3, 5, {"routes": ArgSpec(lambda v: isinstance(v, (list, dict)), "a list or dict")}),
    NFKind("urlfilter", frozenset({SERVER}), True, 1900.0,
           args={"blocked": ArgSpec(lambda v: isinstance(v, list), "a list of URLs")}),
    NFKind("encrypt", frozenset({SERVER}), True, 9123.0,
           args={"key": ArgSpec(_is_str, "a key string")}),
    NFKind("decrypt", frozenset({SERVER}), True, 9800.0,
           args={"key": ArgSpec(_is_str, "a key string")}),
    NFKind("chacha", frozenset({SERVER, EBPF}), True, 5200.0, 0.0, 450.0,
           args={"key": ArgSpec(_is_str, "a key string")}),
    NFKind("dedup", frozenset({SERVER}), True, 33185.0),
    NFKind("rededup", frozenset({SERVER}), True, 12000.0),
    NFKind("limiter", frozenset({SERVER}), False, 110.0,
           args={"rate": ArgSpec(_is_rate, "a rate such as '1Gbps'"),
                 "burst": ArgSpec(_is_number, "a number")}),
    NFKind("monitor", frozenset({SERVER, OPENFLOW}), True, 140.0, openflow_rank=2),
    NFKind("lb", frozenset({SERVER, P4, EBPF}), True, 150.0, 0.0, 250.0, 2, 0.3,
           args={"backends": ArgSpec(lambda v: isinstance(v, list), "a list of backends")}),
    NFKind("bpf", frozenset({SERVER, P4, EBPF}), True, 60.0, 0.0, 100.0, 1, 0.1,
           args={"filter": ArgSpec(_is_str, "a pcap-filter string"),
                 "rules": ArgSpec(lambda v: isinstance(v, list), "a list")}),
    NFKind("macswap", frozenset({SERVER, P4, EBPF, OPENFLOW}), True, 40.0, 0.0, 60.0,
           1, 0.05, 4),
]

LIBRARY: dict[str, NFKind] = {k.name: k for k in _KINDS}

ALIASES: dict[str, str] = {
    "vlanpush": "tunnel", "vlanpop": "detunnel", "ipv4forward": "ipv4fwd",
    "aescbc": "encrypt", "aescbcde": "decrypt", "trafficshaper": "limiter",
    "measure": "monitor", "hashlb": "lb", "pktfilter": "bpf", "match": "bpf",
}


def lookup(name: str) -> NFKind | None:
    """Return the library NF for a case-insensitive name or alias, or None."""
    key = name.lower()
    return LIBRARY.get(ALIASES.get(key, key))


def check_args(kind: NFKind, args: Mapping[str, Any]) -> str | None:
    """Return a message naming the first bad argument of an NF instance, or None."""
    for key, value in args.items():
        spec = kind.args.get(key)
        if spec is None:
            allowed = ", ".join(sorted(kind.args)) or "none"
            return f"bad argument '{key}' for {kind.name}: accepted arguments: {allowed}"
        if not spec.check(value):
            return f"bad argument '{key}' for {kind.name}: expected {spec.expect}, got {value!r}"
    return None


@dataclass(frozen=True)
class Profiles:
    """Cost profiles: packet size and per-NF cycles that override the catalog."""

    packet_bytes: int = DEFAULT_PACKET_BYTES
    server_cycles: Mapping[str, float] = field(default_factory=dict)
    smartnic_cycles: Mapping[str, float] = field(default_factory=dict)
    targets: Mapping[str, frozenset[str]] = field(default_factory=dict)
    linear: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def kind(self, name: str) -> NFKind:
        """Return the library NF with this profile's costs and targets applied."""
        k = LIBRARY[name]
        if name in self.linear:
            base, per_rule = self.linear[name]
            k = replace(k, server_cycles=base, per_rule_cycles=per_rule)
        if name in self.server_cycles:
            k = replace(k, server_cycles=float(self.server_cycles[name]), per_rule_cycles=0.0)
        if name in self.smartnic_cycles:
            k = replace(k, smartnic_cycles=float(self.smartnic_cycles[name]))
        if name in self.targets:
            k = replace(k, targets=self.targets[name])
        return k


class ProfileError(ValueError):
    """A profiles or nf_profile file that cannot be used."""


def _cycle_map(doc: Mapping[str, Any], key: str, path: str) -> dict[str, float]:
    raw = doc.get(key, {})
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: '{key}' must be an object")
    out: dict[str, float] = {}
    for nf, v in raw.items():
        if nf not in LIBRARY:
            raise ProfileError(f"{path}: {key}: unknown NF '{nf}' (use the library's lower-case names)")
        if not _is_number(v) or v <= 0:
            raise ProfileError(f"{path}: {key}.{nf}: expected a positive number, got {v!r}")
        out[nf] = float(v)
    return out


def load_profiles(path: str | None, nf_profile: str | None = None) -> Profiles:
    """Build Profiles from an operator's --profiles JSON and/or a measured nf_profile.json.

    --profiles: {"packet_bytes":N,"server_cycles":{nf:cycles},"smartnic_cycles":{...},
    "targets":{nf:[targets]}}. nf_profile.json: {"tsc_hz":N,"rows":[{"nf","rules",
    "pkt_bytes","cycles_per_pkt"}]}, fitted per NF as cycles = a + b*rules (Lemur §3.2).
    """
    linear = _fit_nf_profile(nf_profile) if nf_profile else {}
    if path is None:
        return Profiles(linear=linear)
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ProfileError(f"{path}: {e}") from e
    if not isinstance(doc, dict):
        raise ProfileError(f"{path}: expected a JSON object")
    unknown = set(doc) - {"packet_bytes", "server_cycles", "smartnic_cycles", "targets"}
    if unknown:
        raise ProfileError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    pkt = doc.get("packet_bytes", DEFAULT_PACKET_BYTES)
    if not _is_int(pkt) or not 64 <= pkt <= 9216:
        raise ProfileError(f"{path}: packet_bytes must be an integer in 64..9216, got {pkt!r}")
    targets: dict[str, frozenset[str]] = {}
    for nf, ts in (doc.get("targets") or {}).items():
        if nf not in LIBRARY or not isinstance(ts, list) or not set(ts) <= {SERVER, P4, EBPF, OPENFLOW}:
            raise ProfileError(f"{path}: targets.{nf}: expected a library NF and a list of "
                               "server/p4/ebpf/openflow")
        targets[nf] = frozenset(ts)
    return Profiles(pkt, _cycle_map(doc, "server_cycles", path),
                    _cycle_map(doc, "smartnic_cycles", path), targets, linear)


def _fit_nf_profile(path: str) -> dict[str, tuple[float, float]]:
    try:
        doc = json.loads(Path(path).read_text())
        rows = doc["rows"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ProfileError(f"{path}: not an nf_profile file: {e}") from e
    by_nf: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        nf = str(row.get("nf", "")).lower()
        if nf in LIBRARY and _is_number(row.get("cycles_per_pkt")):
            by_nf.setdefault(nf, []).append((float(row.get("rules", 0) or 0),
                                             float(row["cycles_per_pkt"])))
    fits: dict[str, tuple[float, float]] = {}
    for nf, pts in by_nf.items():
        xs = {x for x, _ in pts}
        if len(xs) < 2:
            fits[nf] = (max(y for _, y in pts), 0.0)
            continue
        n = len(pts)
        mx = sum(x for x, _ in pts) / n
        my = sum(y for _, y in pts) / n
        b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        fits[nf] = (max(my - b * mx, 0.0), max(b, 0.0))
    return fits


def default_nf_profile_path() -> str | None:
    """Locate bench/results/nf_profile.json ($KEEL_NF_PROFILE, else above the cwd).

    KEEL_NF_PROFILE=none disables the lookup.
    """
    env = os.environ.get("KEEL_NF_PROFILE")
    if env:
        return None if env == "none" else env
    for d in [Path.cwd(), *Path.cwd().parents]:
        p = d / "bench" / "results" / "nf_profile.json"
        if p.is_file():
            return str(p)
    return None
