# SPDX-License-Identifier: Apache-2.0
"""The ToR's trunk port toward a worker is named by the rule keel-agent names the worker's end
by (vf.WorkerPortID): a worker name too long for a 15-byte interface name is hashed. No switch
needed."""
import threading
import types

from keel_torctl.controller import Controller, Instance, worker_port_id


def test_short_names_stay_and_long_ones_fit_an_interface_name():
    assert worker_port_id("local") == "local"
    assert worker_port_id("keel-k8s") == "hdc3bf"  # the vector keel-agent's Go test checks too
    for w in ("keel-k8s", "ip-10-0-1-23.ec2.internal", "wörker"):
        assert len(f"keel-nic-{worker_port_id(w)}".encode()) <= 15, w


def test_a_hashed_trunk_port_maps_back_to_its_worker():
    # Only the naming methods are exercised: a Controller without switch, gateway or metrics.
    c = Controller.__new__(Controller)
    c.opts = types.SimpleNamespace(worker_ports={"w9": "eth9"})
    c._lock = threading.RLock()
    c._instances = {"chain3/0": Instance("chain3", 101, "ip-10-0-1-23.ec2.internal")}
    assert c.trunk("ip-10-0-1-23.ec2.internal") == "keel-tor-h50fb9"
    assert c._worker_of_port("keel-tor-h50fb9") == "ip-10-0-1-23.ec2.internal"
    assert c._worker_of_port("keel-tor-local") == "local"
    assert c._worker_of_port("eth9") == "w9"
