# SPDX-License-Identifier: Apache-2.0
"""Where a chain's server time goes, from its instances' own statistics files (keel-nf
--stats, <pktbuf-dir>/<chain>.<N>/stats-K.json, one per position): the files are cumulative,
so two snapshots around a run give that run's figures.

Per chain (its instances together), over the run:
  sojourn        position 0's histogram of each packet's worker RX -> TX (p50, p99, mean)
  rx_wait_bound  how long a packet can have waited in the VF's queue before the poll that
                 found it (the poll before it; not part of the sojourn)
  per position   handoff_wait: the waits for the position's turns that carried packets
                 (the predecessor passing the turn -> this position starting: sched_yield, the
                 context switch, and anything else the core ran meanwhile); turn_busy: those
                 turns themselves; and its work per batch (position 0: its turns that received
                 packets, all of them; the others: their NFs' cycles per batch)
A batch's sojourn is position 0's turn, every later position's wait and turn, and position
0's wait for the turn that transmits it: mean_accounted_us adds those means up, so it can be
read beside the sojourn's mean (keel-nf --help documents the files; chain_sched.h the turns).
"""
import json
from pathlib import Path

SUB = 64  # keel/sojourn.h LatencyHist: values under 64 a bucket each, each octave above in 64


def _lower(b: int) -> int:
    return b if b < SUB else (SUB + b % SUB) << (b // SUB - 1)


def _upper(b: int) -> int:
    return _lower(b + 1) - 1


def snapshot(pktbuf_dir: Path) -> dict:
    """{instance dir name: {position: stats}} of every instance's files now."""
    out = {}
    for f in sorted(Path(pktbuf_dir).glob("*/stats-*.json")):
        try:
            s = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # being replaced (written to .tmp and renamed) or gone with its instance
        out.setdefault(f.parent.name, {})[int(s.get("position", 0))] = s
    return out


def _hist(s: dict | None) -> tuple[dict, int, int]:
    if not s:
        return {}, 0, 0
    return {b: n for b, n in s.get("buckets", [])}, s.get("count", 0), s.get("sum", 0)


def _delta(after: dict | None, before: dict | None) -> tuple[dict, int, int]:
    a, ac, asum = _hist(after)
    b, bc, bsum = _hist(before)
    if bc > ac:  # the instance was rebuilt in between: its files started again
        b, bc, bsum = {}, 0, 0
    return {k: n - b.get(k, 0) for k, n in a.items() if n - b.get(k, 0) > 0}, ac - bc, asum - bsum


def _since(now: float, then: float) -> float:
    """A cumulative figure's growth; all of it if the instance started again in between."""
    return now - then if then <= now else now


def _merge(into: list, h: tuple[dict, int, int]) -> None:
    for k, n in h[0].items():
        into[0][k] = into[0].get(k, 0) + n
    into[1] += h[1]
    into[2] += h[2]


def _quantile(h: list, q: float) -> int:
    """The upper edge of the bucket holding quantile q (never under the true value)."""
    rank, acc = q * h[1], 0
    for b in sorted(h[0]):
        acc += h[0][b]
        if acc >= rank:
            return _upper(b)
    return 0


def _us(cycles: float, hz: float) -> float:
    return round(cycles / hz * 1e6, 1)


def breakdown(before: dict, after: dict) -> dict:
    """{chain: figures} for the instances whose position 0 received packets between the two
    snapshots (see the module's docstring)."""
    chains: dict = {}
    for inst, positions in after.items():
        chain = inst.rsplit(".", 1)[0]
        was = before.get(inst, {})
        p0, w0 = positions.get(0), was.get(0, {})
        if not p0 or "port" not in p0:
            continue
        pkts = _since(p0["port"]["rx_packets"], w0.get("port", {}).get("rx_packets", 0))
        if pkts <= 0:
            continue
        c = chains.setdefault(chain, {"instances": [], "packets": 0, "batches": 0, "batch_cycles": 0,
                                      "tsc_hz": p0["tsc_hz"], "sojourn": [{}, 0, 0], "rx_wait_bound": [{}, 0, 0],
                                      "positions": {}})
        c["instances"].append(inst)
        c["packets"] += pkts
        c["batches"] += _since(p0["batches"], w0.get("batches", 0))
        # cycles_per_batch is the mean over all batches so far: times batches, their sum
        c["batch_cycles"] += _since(p0["cycles_per_batch"] * p0["batches"],
                                    w0.get("cycles_per_batch", 0) * w0.get("batches", 0))
        _merge(c["sojourn"], _delta(p0.get("sojourn"), w0.get("sojourn")))
        _merge(c["rx_wait_bound"], _delta(p0.get("rx_wait_bound"), w0.get("rx_wait_bound")))
        for k, s in positions.items():
            prev = was.get(k, {})
            pos = c["positions"].setdefault(k, {"handoff_wait": [{}, 0, 0], "turn_busy": [{}, 0, 0], "nf": 0,
                                                "nfs": [n["nf"] for n in s.get("nfs", [])]})
            _merge(pos["handoff_wait"], _delta(s.get("handoff_wait"), prev.get("handoff_wait")))
            _merge(pos["turn_busy"], _delta(s.get("turn_busy"), prev.get("turn_busy")))
            pos["nf"] += _since(s["cycles"]["nf"], prev.get("cycles", {}).get("nf", 0))
    out = {}
    for chain, c in sorted(chains.items()):
        hz, batches = c["tsc_hz"], max(c["batches"], 1)
        soj, rxw = c["sojourn"], c["rx_wait_bound"]
        row = {"instances": c["instances"], "packets": c["packets"], "batches": c["batches"],
               "packets_per_batch": round(c["packets"] / batches, 2),
               "sojourn_p50_us": _us(_quantile(soj, 0.5), hz), "sojourn_p99_us": _us(_quantile(soj, 0.99), hz),
               "sojourn_mean_us": _us(soj[2] / soj[1], hz) if soj[1] else None,
               "rx_wait_bound_p50_us": _us(_quantile(rxw, 0.5), hz),
               "rx_wait_bound_p99_us": _us(_quantile(rxw, 0.99), hz), "positions": []}
        accounted = 0.0
        for k in sorted(c["positions"]):
            pos = c["positions"][k]
            hw = pos["handoff_wait"]
            # position 0: the whole of its turns that received packets (RX, its NF, TX of the
            # batch before); the others: their NFs' cycles (their turns do no I/O)
            work = (c["batch_cycles"] if k == 0 else pos["nf"]) / batches
            wait_mean = hw[2] / hw[1] if hw[1] else 0
            row["positions"].append({"position": k, "nfs": pos["nfs"], "turns_with_packets": hw[1],
                                     "handoff_wait_p50_us": _us(_quantile(hw, 0.5), hz),
                                     "handoff_wait_p99_us": _us(_quantile(hw, 0.99), hz),
                                     "handoff_wait_mean_us": _us(wait_mean, hz),
                                     "turn_busy_p50_us": _us(_quantile(pos["turn_busy"], 0.5), hz),
                                     "turn_busy_p99_us": _us(_quantile(pos["turn_busy"], 0.99), hz),
                                     "work_per_batch_us": _us(work, hz)})
            accounted += wait_mean + work
        row["mean_accounted_us"] = _us(accounted, hz)
        out[chain] = row
    return out
