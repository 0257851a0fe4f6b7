# SPDX-License-Identifier: Apache-2.0
"""InstallFlow throughput and latency of keel-torctl on a private Open vSwitch (root).

Concurrent callers install distinct UDP flows (stage 2, VLAN to a worker trunk) for a bounded
count; group commit answers each batch with one barrier. Writes bench/results/torctl_install.json.
"""
import argparse
import json
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "tests"))

from torctl_env import WORKER, Torctl, bench_torctl  # noqa: E402
from keel_torctl.pb import control_pb2, torctl_pb2  # noqa: E402


def run(n: int, callers: int, torctl: Torctl) -> dict:
    lat: list[float] = []
    lock = threading.Lock()

    def caller(k: int) -> None:
        mine = []
        for i in range(k, n, callers):
            flow = control_pb2.FiveTuple(src_ip="198.18.0.1", dst_ip=f"198.19.{i // 65536}.{i // 256 % 256}",
                                         src_port=i % 65536, dst_port=53, proto=17)
            a = torctl_pb2.FlowAssignment(flow=flow, chain="bench", vlan=7, worker=WORKER)
            t0 = time.monotonic()
            torctl.stub.InstallFlow(torctl_pb2.InstallFlowRequest(assignment=a, idle_timeout_s=60), timeout=10)
            mine.append(time.monotonic() - t0)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(callers)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    lat.sort()
    return {"installs": n, "callers": callers, "seconds": round(took, 3),
            "installs_per_s": round(n / took), "p50_ms": round(lat[len(lat) // 2] * 1e3, 2),
            "p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--installs", type=int, default=20000)
    ap.add_argument("--callers", type=int, default=64)
    ap.add_argument("--out", default=str(HERE.parents[1] / "bench" / "results" / "torctl_install.json"))
    args = ap.parse_args()
    with bench_torctl("keeltorbench") as torctl:
        result = run(args.installs, args.callers, torctl)
        result["flows_on_switch"] = torctl.stub.Status(torctl_pb2.TorStatusRequest(), timeout=10).flows
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
