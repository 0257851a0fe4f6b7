# SPDX-License-Identifier: Apache-2.0
"""Fixtures for cross-component tests: run keel-chain over captures."""
import itertools
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass

import pytest
from scapy.all import rdpcap, wrpcap

from keelenv import BIN
_runs = itertools.count()


@dataclass
class ChainRun:
    returncode: int
    stderr: str
    out: list          # scapy packets written to the output capture
    stats: dict        # the --stats JSON (empty if none was written)


def _eal(in_pcap, out_pcap) -> list:
    return ["--no-pci", "--no-huge", "-m", "512", "--log-level=error", "--no-telemetry",
            f"--file-prefix=keeltest{os.getpid()}_{next(_runs)}",
            "--vdev", f"net_pcap0,rx_pcap={in_pcap},tx_pcap={out_pcap}"]


@pytest.fixture
def keel_chain(tmp_path):
    """run(nfs, packets, *extra) runs keel-chain with --nf NAME=JSON for each
    (name, config) in nfs over packets and returns a ChainRun."""
    binary = BIN / "keel-chain"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run make build")

    def run(nfs, packets, *extra, idle_ms=150, timeout=60):
        n = next(_runs)
        in_pcap, out_pcap = tmp_path / f"in{n}.pcap", tmp_path / f"out{n}.pcap"
        stats = tmp_path / f"stats{n}.json"
        wrpcap(str(in_pcap), packets)
        args = [str(binary)]
        for name, cfg in nfs:
            args += ["--nf", name if cfg is None else f"{name}={json.dumps(cfg)}"]
        args += ["--exit-when-idle", str(idle_ms), "--stats", str(stats), *extra, "--"]
        args += _eal(in_pcap, out_pcap)
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        out = list(rdpcap(str(out_pcap))) if out_pcap.exists() and out_pcap.stat().st_size > 24 else []
        st = json.loads(stats.read_text()) if stats.exists() else {}
        return ChainRun(p.returncode, p.stderr, out, st)

    return run


@pytest.fixture
def redis_server(tmp_path):
    """A redis-server of the test's own on a free loopback port; yields HOST:PORT."""
    exe = shutil.which("redis-server")
    if not exe:
        pytest.skip("redis-server is not installed (make deps installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start")
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)
