"""Shared fixtures: example paths and a deterministic cost catalog."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from keel_placer.catalog import load_profiles
from keel_placer.pattern import Problem
from keel_placer.service import controltoken, pb_grpc, start
from keel_placer.spec import parse_spec
from keel_placer.topology import load_topology

# Tests must not pick up a bench/results/nf_profile.json measured on some machine.
os.environ["KEEL_NF_PROFILE"] = "none"

from placer_env import TOKEN

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


@pytest.fixture
def stub():
    """A PlacerStub on a keel-place gRPC service of the test's own (loopback, free port)."""
    server, port = start("127.0.0.1:0", TOKEN)
    channel = controltoken.channel(f"127.0.0.1:{port}", TOKEN)
    try:
        yield pb_grpc.PlacerStub(channel)
    finally:
        channel.close()
        server.stop(grace=None)


@pytest.fixture
def canonical() -> Problem:
    return Problem(parse_spec((EXAMPLES / "chain_0_1_2_3.conf").read_text()),
                   load_topology(str(EXAMPLES / "lemur_testbed.yaml")),
                   load_profiles(str(EXAMPLES / "lemur_eval_profiles.json")))
