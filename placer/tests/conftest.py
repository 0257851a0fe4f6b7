"""Shared fixtures: example paths and a deterministic cost catalog."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from keel_placer.catalog import load_profiles
from keel_placer.pattern import Problem
from keel_placer.service import pb_grpc, start
from keel_placer.spec import parse_spec
from keel_placer.topology import load_topology, topology_from_dict

# Tests must not pick up a bench/results/nf_profile.json measured on some machine.
os.environ["KEEL_NF_PROFILE"] = "none"

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


@pytest.fixture
def stub():
    """A PlacerStub on a keel-place gRPC service of the test's own (loopback, free port)."""
    server, port = start("127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.PlacerStub(channel)
    finally:
        channel.close()
        server.stop(grace=None)


def one_server(cores: int = 16, ghz: float = 1.7, gbps: float = 40, stages: int = 12,
               kind: str = "pisa", smartnic: dict | None = None):
    return topology_from_dict({
        "switch": {"kind": kind, "stages": stages, "ports_gbps": 100},
        "servers": [{"name": "s1", "cores": cores, "ghz": ghz,
                     "nics": [{"gbps": gbps, "smartnic": smartnic}]}]})


def problem(text: str, topo=None, profiles: str | None = None) -> Problem:
    return Problem(parse_spec(text), topo or one_server(), load_profiles(profiles))


@pytest.fixture
def canonical() -> Problem:
    return Problem(parse_spec((EXAMPLES / "chain_0_1_2_3.conf").read_text()),
                   load_topology(str(EXAMPLES / "lemur_testbed.yaml")),
                   load_profiles(str(EXAMPLES / "lemur_eval_profiles.json")))
