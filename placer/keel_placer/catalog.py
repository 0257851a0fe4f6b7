"""The NF catalogue: names and argument schemas from keel-nf, targets and costs from here.

Names, help and argument schemas come from the catalogue the NFs declare themselves
(KEEL_NF_ARGS, exported by `keel-chain --list --json` into build/nf-catalog.json), so the
chain language takes exactly the arguments keel-nf's Init takes (Tunnel(vlan=7)).
Targets, state and cost profiles stay here, keyed by the catalogue's names
(Lemur Table 3: server = C++/BESS, p4, ebpf = SmartNIC, openflow). Server cycle costs
marked "Lemur Table 4" are the worst-case (max, other NUMA node) profiles the paper
reports; the others are keel's own estimates until bench/results/nf_profile.json
measures them. A catalogue NF without a profile here (and every tenant NF) is
server-only at DEFAULT_CYCLES unless its entry says "cycles".
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

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
# Server cycles per packet of an NF nobody has profiled (tenant NFs without com.keel.cycles).
DEFAULT_CYCLES = 500.0


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class NFKind:
    """One NF with its targets, state, resource profile and argument schemas."""

    name: str
    targets: frozenset[str]
    replicable: bool
    server_cycles: float
    per_rule_cycles: float = 0.0
    smartnic_cycles: float | None = None
    p4_stages: int = 1
    p4_memory: float = 0.1  # fraction of one PISA stage's table memory
    openflow_rank: int | None = None  # fixed table order on an OpenFlow switch
    args: tuple[Mapping[str, Any], ...] = ()  # the catalogue's argument schemas
    tenant: bool = False  # a tenant's packet function, not the library's
    help: str = ""

    def cycles(self, args: Mapping[str, Any]) -> float:
        """Server cycles per packet, linear in the rule count where relevant (§3.2)."""
        if not self.per_rule_cycles:
            return self.server_cycles
        rules = args.get("rules")
        n = len(rules) if isinstance(rules, list) else DEFAULT_ACL_RULES
        return self.server_cycles + self.per_rule_cycles * n


@dataclass(frozen=True)
class _Profile:
    targets: frozenset[str]
    replicable: bool
    server_cycles: float
    per_rule_cycles: float = 0.0
    smartnic_cycles: float | None = None
    p4_stages: int = 1
    p4_memory: float = 0.1


def openflow_nfs_path() -> Path:
    """$KEEL_OPENFLOW_NFS, else keel-torctl's ingress/torctl/openflow_nfs.json in this tree."""
    env = os.environ.get("KEEL_OPENFLOW_NFS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "ingress" / "torctl" / "openflow_nfs.json"


def load_openflow_ranks(path: Path) -> dict[str, int]:
    """NF -> OpenFlow table rank, from the capability table keel-torctl builds its tables from:
    exactly the NFs listed there may be placed on an OpenFlow switch."""
    try:
        doc = json.loads(path.read_text())
        return {nf: int(v["rank"]) for nf, v in doc["nfs"].items()}
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise CatalogError(f"{path}: not keel-torctl's OpenFlow NF table: {e}") from e


_HW = frozenset({SERVER, P4, EBPF})
# Keyed by the catalogue's NF names; test_catalog checks that every key is a catalogue NF.
# OPENFLOW and openflow_rank are not set here: they come from openflow_nfs.json (load_catalog).
PROFILES: dict[str, _Profile] = {
    # ACL: Lemur Table 4 gives 4091 cycles max for 1024 rules -> 120 + 3.88/rule.
    "acl": _Profile(_HW, True, 120.0, 3.88, 900.0, 1, 0.2),
    "nat": _Profile(frozenset({SERVER, P4}), False, 507.0, p4_stages=2, p4_memory=0.9),
    "tunnel": _Profile(_HW, True, 110.0, 0.0, 150.0, 1, 0.1),
    "detunnel": _Profile(_HW, True, 110.0, 0.0, 150.0, 1, 0.1),
    "ipv4fwd": _Profile(_HW, True, 90.0, 0.0, 200.0, 1, 0.3),
    "urlfilter": _Profile(frozenset({SERVER}), True, 1900.0),
    "encrypt": _Profile(frozenset({SERVER}), True, 9123.0),
    "decrypt": _Profile(frozenset({SERVER}), True, 9800.0),
    "chacha": _Profile(frozenset({SERVER, EBPF}), True, 5200.0, 0.0, 450.0),
    "dedup": _Profile(frozenset({SERVER}), True, 33185.0),
    "rededup": _Profile(frozenset({SERVER}), True, 12000.0),
    "limiter": _Profile(frozenset({SERVER}), False, 110.0),
    "monitor": _Profile(frozenset({SERVER}), True, 140.0),
    "lb": _Profile(frozenset({SERVER, P4, EBPF}), True, 150.0, 0.0, 250.0, 2, 0.3),
    "bpf": _Profile(frozenset({SERVER, P4, EBPF}), True, 60.0, 0.0, 100.0, 1, 0.1),
    "macswap": _Profile(_HW, True, 40.0, 0.0, 60.0, 1, 0.05),
}

# Lemur's names for the library's NFs.
ALIASES: dict[str, str] = {
    "vlanpush": "tunnel", "vlanpop": "detunnel", "ipv4forward": "ipv4fwd",
    "aescbc": "encrypt", "aescbcde": "decrypt", "trafficshaper": "limiter",
    "measure": "monitor", "hashlb": "lb", "pktfilter": "bpf", "match": "bpf",
}


class CatalogError(ValueError):
    """An NF catalogue (or a tenant NF entry) that cannot be used."""


# ----- argument values against the catalogue's schemas -----

_PROTOS = {"tcp", "udp", "icmp"}
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_HEX = re.compile(r"^[0-9a-fA-F]*$")
_PORTS = re.compile(r"^([0-9]{1,5})-([0-9]{1,5})$")


def _is_ipv4(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    try:
        ipaddress.IPv4Address(v)
        return True
    except (ValueError, TypeError):
        return False


def _is_cidr(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    addr, slash, length = v.partition("/")
    return _is_ipv4(addr) and (not slash or (re.fullmatch(r"[0-9]{1,2}", length) is not None
                                             and int(length) <= 32))


def is_secret_ref(v: Any) -> bool:
    """{'secret': NAME}: the value of a faas-cli secret, which keel-nf reads when it starts
    (keel-nf --help, --secrets); only keel-nf's own check, with the secret, sees the value."""
    return isinstance(v, dict) and len(v) == 1 and isinstance(v.get("secret"), str)


def check_value(schema: Mapping[str, Any], v: Any, path: str) -> str | None:
    """Return '<path>: problem' if v does not fit the type schema, else None."""
    t = schema["type"]
    if is_secret_ref(v) and t not in ("array", "object"):
        return None

    def bad(expect: str) -> str:
        return f"{path}: expected {expect}, got {v!r}"

    if t == "integer":
        if not _is_int(v):
            return bad("an integer")
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            return f"{path}: {v} is out of range [{lo}, {hi}]"
    elif t == "boolean":
        if not isinstance(v, bool):
            return bad("True or False")
    elif t == "string":
        if not isinstance(v, str):
            return bad("a string")
        if "enum" in schema and v not in schema["enum"]:
            return bad(" or ".join(repr(e) for e in schema["enum"]))
    elif t == "ipv4":
        if not _is_ipv4(v):
            return bad("an IPv4 address 'A.B.C.D'")
    elif t == "cidr":
        if not _is_cidr(v):
            return bad("an IPv4 prefix 'A.B.C.D/N'")
    elif t == "proto":
        if not ((isinstance(v, str) and v in _PROTOS) or (_is_int(v) and 0 <= v <= 255)):
            return bad("'tcp', 'udp', 'icmp' or a protocol number 0-255")
    elif t == "mac":
        if not (isinstance(v, str) and _MAC.match(v)):
            return bad("a MAC address 'aa:bb:cc:dd:ee:ff'")
    elif t == "hex":
        n = schema["bytes"]
        if not (isinstance(v, str) and len(v) == 2 * n and _HEX.match(v)):
            return bad(f"{2 * n} hex digits")
    elif t == "ports":
        m = _PORTS.match(v) if isinstance(v, str) else None
        if not ((_is_int(v) and 0 <= v <= 65535) or
                (m and int(m.group(1)) <= int(m.group(2)) <= 65535)):
            return bad("a port 0-65535 or a range 'lo-hi'")
    elif t == "array":
        if not isinstance(v, list):
            return bad("a list")
        lo, hi = schema.get("min_items"), schema.get("max_items")
        if (lo is not None and len(v) < lo) or (hi is not None and len(v) > hi):
            want = f"{lo}" if lo == hi else f"{lo or 0} to {hi if hi is not None else 'any'}"
            return f"{path}: expected {want} items, got {len(v)}"
        for i, item in enumerate(v):
            msg = check_value(schema["items"], item, f"{path}[{i}]")
            if msg:
                return msg
    elif t == "object":
        if not isinstance(v, dict):
            return bad("a dict")
        return check_fields(schema["fields"], v, path)
    return None


def check_fields(fields: Iterable[Mapping[str, Any]], values: Mapping[str, Any], path: str,
                 required: bool = True) -> str | None:
    """Check a dict against argument schemas: unknown keys, values, missing required ones."""
    by_name = {f["name"]: f for f in fields}
    for key, value in values.items():
        f = by_name.get(key)
        if f is None:
            allowed = ", ".join(by_name) or "none"
            return f"{path}.{key}: unknown field (accepted: {allowed})"
        msg = check_value(f, value, f"{path}.{key}")
        if msg:
            return msg
    if required:
        for name, f in by_name.items():
            if f.get("required") and name not in values:
                return f"{path}.{name}: missing"
    return None


def check_args(kind: NFKind, args: Mapping[str, Any]) -> str | None:
    """Return a message naming the first bad argument of an NF instance, or None.

    Arguments are checked by name and value against the catalogue; a required argument left
    out is not an error here (placement needs costs, not configurations: Lemur's examples
    name bare NFs), but is for a chain that will run (missing_args).
    """
    by_name = {a["name"]: a for a in kind.args}
    for key, value in args.items():
        spec = by_name.get(key)
        if spec is None:
            allowed = ", ".join(by_name) or "none"
            return f"bad argument '{key}' for {kind.name}: accepted arguments: {allowed}"
        msg = check_value(spec, value, key)
        if msg:
            return f"bad argument '{key}' for {kind.name}: {msg.removeprefix(key + ': ')}"
    return None


def missing_args(kind: NFKind, args: Mapping[str, Any]) -> str | None:
    """Return a message naming the first required argument of an NF instance left out, or None."""
    for a in kind.args:
        if a.get("required") and a["name"] not in args:
            return f"NF {kind.name}: argument {a['name']}: missing (required: {a.get('doc', a['type'])})"
    return None


# ----- the catalogue -----

def _entry(e: Any, where: str) -> tuple[str, str, tuple[Mapping[str, Any], ...]]:
    if not (isinstance(e, dict) and isinstance(e.get("name"), str) and e["name"]
            and isinstance(e.get("args", []), list)):
        raise CatalogError(f"{where}: expected {{\"name\": NF, \"args\": [...]}}, got {e!r:.80}")
    for a in e.get("args", []):
        if not (isinstance(a, dict) and isinstance(a.get("name"), str) and isinstance(a.get("type"), str)):
            raise CatalogError(f"{where}: {e['name']}: bad argument schema {a!r:.80}")
    return e["name"], str(e.get("help", "")), tuple(e.get("args", []))


class Catalog:
    """The NFs a spec may name: the library's and, per request, a tenant's."""

    def __init__(self, kinds: Mapping[str, NFKind], source: str = ""):
        self.kinds = dict(kinds)
        self.source = source

    def lookup(self, name: str) -> NFKind | None:
        """Return the NF for a case-insensitive name or a Lemur alias of a library NF, or None."""
        key = name.lower()
        kind = self.kinds.get(key)
        if kind is not None:
            return kind
        alias = ALIASES.get(key)
        return self.kinds.get(alias) if alias else None

    def names(self) -> list[str]:
        return sorted(self.kinds)

    def with_tenants(self, entries: Any, where: str = "tenant NFs") -> "Catalog":
        """A catalogue that also knows tenant NFs: entries like the catalogue's, by function
        name, with an optional "cycles" (server cycles per packet, default DEFAULT_CYCLES) and
        an optional "stateful" (a stateful NF is never replicated over cores, Lemur §3.2).
        An NF that does not say is taken as stateful: replicating an NF that keeps per-flow
        state would split its flows' state across cores, running it on one core only costs
        rate. A tenant NF runs on servers only."""
        if not isinstance(entries, list):
            raise CatalogError(f"{where}: expected a JSON list of NF entries")
        kinds = dict(self.kinds)
        for e in entries:
            name, help_, args = _entry(e, where)
            key = name.lower()
            if key in kinds or key in ALIASES:
                raise CatalogError(f"{where}: '{name}' is already the name of a library NF")
            cycles = e.get("cycles", DEFAULT_CYCLES)
            if not _is_number(cycles) or cycles <= 0:
                raise CatalogError(f"{where}: {name}: cycles must be a positive number, got {cycles!r}")
            stateful = e.get("stateful", True)
            if not isinstance(stateful, bool):
                raise CatalogError(f"{where}: {name}: stateful must be true or false, got {stateful!r}")
            kinds[key] = NFKind(key, frozenset({SERVER}), not stateful, float(cycles), args=args,
                                tenant=True, help=help_)
        return Catalog(kinds, self.source)


def load_catalog(path: str, openflow_nfs: Path | None = None) -> Catalog:
    """Read a catalogue written by `keel-chain --list --json` and join it with PROFILES and
    keel-torctl's OpenFlow NF table (openflow_nfs: default openflow_nfs_path())."""
    ranks = load_openflow_ranks(openflow_nfs or openflow_nfs_path())
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CatalogError(f"{path}: {e}") from e
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("nfs"), list):
        raise CatalogError(f"{path}: not an NF catalogue (keel-chain --list --json, version 1)")
    kinds: dict[str, NFKind] = {}
    for e in doc["nfs"]:
        name, help_, args = _entry(e, path)
        p = PROFILES.get(name) or _Profile(frozenset({SERVER}), True, DEFAULT_CYCLES)
        targets = p.targets | {OPENFLOW} if name in ranks else p.targets
        kinds[name] = NFKind(name, targets, p.replicable, p.server_cycles, p.per_rule_cycles,
                             p.smartnic_cycles, p.p4_stages, p.p4_memory, ranks.get(name), args,
                             help=help_)
    return Catalog(kinds, path)


def default_catalog_path() -> str:
    """$KEEL_NF_CATALOG, else build/nf-catalog.json in the cwd or above it, else beside
    this package's source tree (what `make build` writes)."""
    env = os.environ.get("KEEL_NF_CATALOG")
    if env:
        return env
    for d in [Path.cwd(), *Path.cwd().parents]:
        p = d / "build" / "nf-catalog.json"
        if p.is_file():
            return str(p)
    return str(Path(__file__).resolve().parents[2] / "build" / "nf-catalog.json")


_library: Catalog | None = None
_library_path: str | None = None


def use_catalog(path: str | None) -> None:
    """Make library() read the catalogue at path (None: default_catalog_path())."""
    global _library, _library_path
    _library, _library_path = None, path


def library() -> Catalog:
    """The library's NF catalogue (loaded once; raises CatalogError if it is missing)."""
    global _library
    if _library is None:
        path = _library_path or default_catalog_path()
        if not Path(path).is_file():
            raise CatalogError(f"{path}: no NF catalogue (run `make build`, which writes "
                               "build/nf-catalog.json, or pass --catalog / KEEL_NF_CATALOG)")
        _library = load_catalog(path)
    return _library


def lookup(name: str) -> NFKind | None:
    """Return the library NF for a case-insensitive name or alias, or None."""
    return library().lookup(name)


@dataclass(frozen=True)
class Profiles:
    """Cost profiles: packet size and per-NF cycles that override the catalog."""

    packet_bytes: int = DEFAULT_PACKET_BYTES
    server_cycles: Mapping[str, float] = field(default_factory=dict)
    smartnic_cycles: Mapping[str, float] = field(default_factory=dict)
    targets: Mapping[str, frozenset[str]] = field(default_factory=dict)
    linear: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    catalog: Catalog | None = None  # None: library()

    def kind(self, name: str) -> NFKind:
        """Return the NF with this profile's costs and targets applied."""
        k = (self.catalog or library()).kinds[name]
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


def _cycle_map(doc: Mapping[str, Any], key: str, path: str, names: set[str]) -> dict[str, float]:
    raw = doc.get(key, {})
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: '{key}' must be an object")
    out: dict[str, float] = {}
    for nf, v in raw.items():
        if nf not in names:
            raise ProfileError(f"{path}: {key}: unknown NF '{nf}' (use the library's lower-case names)")
        if not _is_number(v) or v <= 0:
            raise ProfileError(f"{path}: {key}.{nf}: expected a positive number, got {v!r}")
        out[nf] = float(v)
    return out


def load_profiles(path: str | None, nf_profile: str | None = None,
                  catalog: Catalog | None = None) -> Profiles:
    """Build Profiles from an operator's --profiles JSON and/or a measured nf_profile.json.

    --profiles: {"packet_bytes":N,"server_cycles":{nf:cycles},"smartnic_cycles":{...},
    "targets":{nf:[targets]}}. nf_profile.json: {"tsc_hz":N,"rows":[{"nf","rules",
    "pkt_bytes","cycles_per_pkt"}]}, fitted per NF as cycles = a + b*rules (Lemur §3.2).
    catalog: the NFs (with a request's tenant NFs); None: library().
    """
    names = set((catalog or library()).kinds)
    linear = _fit_nf_profile(nf_profile, names) if nf_profile else {}
    if path is None:
        return Profiles(linear=linear, catalog=catalog)
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
        if nf not in names or not isinstance(ts, list) or not set(ts) <= {SERVER, P4, EBPF, OPENFLOW}:
            raise ProfileError(f"{path}: targets.{nf}: expected a library NF and a list of "
                               "server/p4/ebpf/openflow")
        targets[nf] = frozenset(ts)
    return Profiles(pkt, _cycle_map(doc, "server_cycles", path, names),
                    _cycle_map(doc, "smartnic_cycles", path, names), targets, linear, catalog)


def _fit_nf_profile(path: str, names: set[str]) -> dict[str, tuple[float, float]]:
    try:
        doc = json.loads(Path(path).read_text())
        rows = doc["rows"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ProfileError(f"{path}: not an nf_profile file: {e}") from e
    by_nf: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        nf = str(row.get("nf", "")).lower()
        if nf in names and _is_number(row.get("cycles_per_pkt")):
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
