# SPDX-License-Identifier: Apache-2.0
"""FiveTuple.check: what InstallFlow(s) and RecordFlows refuse, naming the field."""
import pytest

from keel_torctl.rules import FiveTuple


def test_a_flow_keel_ingress_reports_passes():
    FiveTuple("198.18.0.1", "198.18.3.9", 40000, 5001, 17).check()
    FiveTuple("0.0.0.0", "255.255.255.255", 0, 65535, 255).check()


@pytest.mark.parametrize("flow, message", [
    (FiveTuple("1.2.3", "198.18.3.9", 1, 2, 17), "flow.src_ip: '1.2.3' is not an IPv4 address"),
    (FiveTuple("198.18.0.1", "256.1.1.1", 1, 2, 17), "flow.dst_ip: '256.1.1.1' is not an IPv4 address"),
    (FiveTuple("198.18.0.01", "198.18.3.9", 1, 2, 17), "flow.src_ip: '198.18.0.01' is not an IPv4 address"),
    (FiveTuple("::1", "198.18.3.9", 1, 2, 17), "flow.src_ip: '::1' is not an IPv4 address"),
    (FiveTuple("198.18.0.1 ", "198.18.3.9", 1, 2, 17), "flow.src_ip: '198.18.0.1 ' is not an IPv4 address"),
    (FiveTuple("198.18.0.1", "198.18.3.9", 1, 2, 256), "flow.proto: 256 is not an IP protocol number"),
    (FiveTuple("198.18.0.1", "198.18.3.9", 65536, 2, 17), "flow.src_port: 65536 is not a port"),
])
def test_a_flow_no_rule_can_match_is_refused_naming_the_field(flow, message):
    with pytest.raises(ValueError) as e:
        flow.check()
    assert str(e.value) == message
