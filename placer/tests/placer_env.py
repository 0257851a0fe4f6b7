"""Helpers the placer's tests import (a module of its own name: other test directories that
run in the same pytest have a conftest too)."""

from __future__ import annotations

from keel_placer.catalog import load_profiles
from keel_placer.pattern import Problem
from keel_placer.spec import parse_spec
from keel_placer.topology import topology_from_dict

# The control-plane token of the tests' keel-place services.
TOKEN = "0123456789abcdef0123456789abcdef"


def one_server(cores: int = 16, ghz: float = 1.7, gbps: float = 40, stages: int = 12,
               kind: str = "pisa", smartnic: dict | None = None):
    return topology_from_dict({
        "switch": {"kind": kind, "stages": stages, "ports_gbps": 100},
        "servers": [{"name": "s1", "cores": cores, "ghz": ghz,
                     "nics": [{"gbps": gbps, "smartnic": smartnic}]}]})


def problem(text: str, topo=None, profiles: str | None = None) -> Problem:
    return Problem(parse_spec(text), topo or one_server(), load_profiles(profiles))
