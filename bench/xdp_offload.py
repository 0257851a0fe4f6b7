#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What running NFs in XDP costs and saves (issue 36), written to bench/results/xdp_offload.json.

nfs     Each NF that runs in XDP: ns/packet of its XDP program alone through
        BPF_PROG_TEST_RUN at 64 and 1024 bytes (keel-xdp bench, minus test_run's own cost per
        run), beside keel-nf's cycles/packet of the same NF as keel-nfbench measured it
        (bench/results/nf_profile.json, 80- and 1500-byte rows), both in ns and cycles at the
        TSC rate nf_profile.json records.
chains  The demo's chains (stack.yml) and the live test's (LB -> NAT) placed by keel-place --refine all on this rack with its
        NIC declared an eBPF SmartNIC (make up's topology), each alone: the NFs the NIC runs in XDP and
        the NFs left to the server, server cycles/packet with and without the offload (the
        server NFs' keel-nf cycles at 1500 bytes, summed: measured per NF) and the cores the
        server part needs at the chain's t_max of 1024-byte packets.
galleon keel-sim's prediction for the Galleon rack (bench/scenarios/galleon.yaml: 10 workers x
        16 cores at 2.4 GHz), run twice in this run: as is, and with each chain's longest
        prefix of NFs that keel runs in XDP on the workers' SmartNICs (what SmartChain's
        nic-ingress takes when the ToR offloads nothing). A chain wholly on the NIC needs no
        core; keel-sim is not run for it.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
XDP_NFS = {"acl", "chacha", "tunnel", "detunnel", "ipv4fwd", "lb", "macswap"}  # keel-xdp list
NFBENCH_SIZE = {64: 80, 1024: 1500}  # keel-nfbench's nearest packet sizes


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def nf_rows(bin_dir: Path, repeat: int, profile: dict) -> list[dict]:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([str(bin_dir / "keel-xdp"), "bench", "--repeat", str(repeat), "--json", f.name],
                       check=True, stdout=sys.stderr)
        xdp = json.load(open(f.name))["rows"]
    hz = profile["tsc_hz"]
    server = {}
    for r in profile["rows"]:
        if r["nf"] == "acl" and r.get("rules") != 10:
            continue
        server[(r["nf"], r["pkt_bytes"])] = r["cycles_per_pkt"]
    out = []
    for r in xdp:
        row = {"nf": r["nf"], "pkt_bytes": r["pkt_bytes"], "xdp_ns_per_pkt": r["ns_per_pkt"],
               "xdp_cycles_per_pkt": round(r["ns_per_pkt"] * hz / 1e9, 1),
               "xdp_ns_measured": r["ns_measured"], "test_run_harness_ns": r["ns_test_run_harness"],
               "xdp_verdict": r["verdict"]}
        cyc = server.get((r["nf"], NFBENCH_SIZE[r["pkt_bytes"]]))
        if cyc is not None:
            row.update(keel_nf_pkt_bytes=NFBENCH_SIZE[r["pkt_bytes"]], keel_nf_cycles_per_pkt=cyc,
                       keel_nf_ns_per_pkt=round(cyc / hz * 1e9, 1),
                       xdp_over_keel_nf=round(row["xdp_cycles_per_pkt"] / cyc, 2) if cyc else None)
        out.append(row)
    return out


# The live test's chain (tests/test_xdp_live.py): on this rack the ToR cannot run LB, so
# UNO puts it on the SmartNIC and NAT stays on the server.
XDP_CHAIN = {"name": "xdpchain", "slo": "t_min=1Gbps,t_max=10Gbps",
             "expr": "LB(backends=['198.18.4.100', '198.18.4.101']) -> "
                     "NAT(external_ip='198.18.100.4', port_range=[1024, 65535])"}


def demo_chains() -> list[dict]:
    """stack.yml's chains (name, chain expression, SLO), then XDP_CHAIN."""
    text = (ROOT / "stack.yml").read_text()
    chains = []
    for m in re.finditer(r"\n  (chain\w*):\n(.*?)(?=\n  \w|\Z)", text, re.S):
        body = m.group(2)
        expr = re.search(r'com\.keel\.chain: "(.*)"', body)
        slo = re.search(r'com\.keel\.slo: "(.*)"', body)
        if expr and slo:
            chains.append({"name": m.group(1), "expr": expr.group(1), "slo": slo.group(1)})
    return chains + [XDP_CHAIN]


def gbps(slo: str, key: str) -> float:
    v = re.search(key + r"=([0-9.]+)([MG])bps", slo)
    return float(v.group(1)) * (1e-3 if v.group(2) == "M" else 1.0)


def place(chains: list[dict], topology: str, py: str) -> dict:
    lines = []
    for i, c in enumerate(chains):
        lines.append(f"flow f{i} = [{{'dst_ip': '198.18.{i + 1}.0/24'}}]")
        lines.append(f"chain {c['name']} = {c['expr']}")
        lines.append(f"f{i} : {c['name']} @ {{'t_min': '{gbps(c['slo'], 't_min')}Gbps', "
                     f"'t_max': '{gbps(c['slo'], 't_max')}Gbps'}}")
    with tempfile.TemporaryDirectory() as d:
        spec, topo = Path(d) / "spec.conf", Path(d) / "topology.yaml"
        spec.write_text("\n".join(lines) + "\n")
        topo.write_text(topology)
        out = sh(py, "-m", "keel_placer.cli", "place", "--spec", str(spec), "--topology", str(topo),
                 "--refine", "all", "--json")
    return json.loads(out)


def chain_rows(profile: dict, py: str) -> list[dict]:
    hz = profile["tsc_hz"]
    cycles = {r["nf"]: r["cycles_per_pkt"] for r in profile["rows"]
              if r["pkt_bytes"] == 1500 and (r["nf"] != "acl" or r.get("rules") == 10)}
    topo = (ROOT / "deploy/local/topology.yaml").read_text()
    topo = topo.replace("smartnic: null", "smartnic: {kind: ebpf, cores: 1, ghz: 2.6}")
    rows = []
    for c in demo_chains():
        placed = place([c], topo, py)  # each on the rack alone: together they do not fit 2 cores
        if not placed["feasible"]:
            raise SystemExit(f"{c['name']}: keel-place finds no placement: {placed.get('reason')}")
        (pc,) = placed["chains"]
        nic = {n["name"] for s in placed.get("refine", {}).get("servers", []) for step in s["nic"]
               for n in step["nfs"] if n["target"] == "smartnic"}
        on_server = [n["nf"] for n in pc["nfs"] if n["target"] == "server"]
        on_nic = [n["nf"] for n in pc["nfs"] if f"{c['name']}.{n['name']}" in nic and n["nf"] in XDP_NFS]
        placement = {n["nf"]: n["target"] for n in pc["nfs"]}
        left = list(on_server)
        for nf in on_nic:
            if nf in left:
                left.remove(nf)
        before = sum(cycles.get(nf, 0.0) for nf in on_server)
        after = sum(cycles.get(nf, 0.0) for nf in left)
        pps = gbps(c["slo"], "t_max") * 1e9 / ((1024 + 20) * 8)
        rows.append({"chain": c["name"], "nfs": [n["nf"] for n in pc["nfs"]], "lemur_targets": placement,
                     "switch_nfs": [n["nf"] for n in pc["nfs"] if n["target"] == "switch"],
                     "nic_nfs": on_nic, "server_nfs_without_offload": on_server, "server_nfs_with_offload": left,
                     "server_cycles_per_pkt_without": round(before, 1), "server_cycles_per_pkt_with": round(after, 1),
                     "t_max_gbps": gbps(c["slo"], "t_max"),
                     "cores_at_t_max_without": round(before * pps / hz, 3),
                     "cores_at_t_max_with": round(after * pps / hz, 3)})
    return rows


def galleon(bin_dir: Path) -> list[dict]:
    scenario = (ROOT / "bench/scenarios/galleon.yaml").read_text()
    offloaded, nic_nfs = scenario, {}
    for m in re.finditer(r"\{name: (\w+), nfs: \[([^\]]*)\]", scenario):
        nfs = [x.strip() for x in m.group(2).split(",")]
        k = 0
        while k < len(nfs) and nfs[k] in XDP_NFS:
            k += 1
        nic_nfs[m.group(1)] = nfs[:k]
        if 0 < k < len(nfs):
            offloaded = offloaded.replace(m.group(0), f"{{name: {m.group(1)}, nfs: [{', '.join(nfs[k:])}]")
        elif k == len(nfs):  # wholly on the NIC: no server part to simulate
            offloaded = re.sub(r"\n  - \{name: " + m.group(1) + r",[^\n]*", "", offloaded)
    with tempfile.TemporaryDirectory() as d:
        a, b = Path(d) / "galleon.yaml", Path(d) / "galleon_nic.yaml"
        a.write_text(scenario)
        b.write_text(offloaded.replace("name: galleon", "name: galleon_nic"))
        out = Path(d) / "sim.json"
        sh(str(bin_dir / "keel-sim"), "run", "--policy", "keel", "--out", str(out), str(a), str(b))
        sim = json.loads(out.read_text())["rows"]
    by = {(r["scenario"], r["chain"]): r for r in sim}
    rows = []
    for chain, nic in nic_nfs.items():
        base, off = by.get(("galleon", chain)), by.get(("galleon_nic", chain))
        rows.append({"chain": chain, "nic_nfs": nic,
                     "cores_avg_without": base["cores_avg"], "cores_max_without": base["cores_max"],
                     "p99_us_without": base["p99_us"],
                     "cores_avg_with": off["cores_avg"] if off else 0.0, "cores_max_with": off["cores_max"] if off else 0,
                     "p99_us_with": off["p99_us"] if off else None,
                     "meets_slo_with": off["meets_slo"] if off else True})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build/bin"), help="keel's binaries (default build/bin)")
    ap.add_argument("--repeat", type=int, default=20000, help="test_run runs per NF and size")
    ap.add_argument("--out", default=str(ROOT / "bench/results/xdp_offload.json"))
    args = ap.parse_args()
    bin_dir = Path(args.bin)
    profile = json.loads((ROOT / "bench/results/nf_profile.json").read_text())
    doc = {"method": __doc__.split("\n", 1)[1].strip(),
           "tsc_hz": profile["tsc_hz"],
           "nfs": nf_rows(bin_dir, args.repeat, profile),
           "chains": chain_rows(profile, sys.executable),
           "galleon": galleon(bin_dir)}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
