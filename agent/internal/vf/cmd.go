// SPDX-License-Identifier: Apache-2.0

package vf

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// Runner runs a command and returns its standard output; the one place the VF providers
// reach the system (ip, ovs-vsctl, ethtool, nsenter), replaced by a fake in tests.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Exec runs commands for real.
func Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	var out, errb bytes.Buffer
	c := exec.CommandContext(ctx, name, args...)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// The command lines, each built in one place.

func ipLinkList() []string { return []string{"ip", "-j", "link", "show"} }

func ipVethAdd(host, peer string) []string {
	return []string{"ip", "link", "add", host, "type", "veth", "peer", "name", peer}
}

func ipLinkDel(name string) []string { return []string{"ip", "link", "del", name} }

func ipLinkUp(name string) []string { return []string{"ip", "link", "set", name, "up"} }

func ipLinkToNetns(name string, pid int) []string {
	return []string{"ip", "link", "set", name, "netns", strconv.Itoa(pid)}
}

// inNetns runs argv in the network namespace of pid (nsenter keeps the host's /sys,
// which `ip netns exec` would remount).
func inNetns(pid int, argv []string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(pid), "-n", "--"}, argv...)
}

func ipLinkRenameUp(from, to string) []string {
	return []string{"ip", "link", "set", from, "name", to, "up"}
}

// ethtoolTxOff disables TX checksum offload: OVS's userspace datapath otherwise drops
// the veth's UDP/TCP packets (DESIGN.md, facts).
func ethtoolTxOff(name string) []string { return []string{"ethtool", "-K", name, "tx", "off"} }

// noIPv6 turns IPv6 off on a link that is still down, so its kernel sends nothing on it.
func noIPv6(name string) []string {
	return []string{"sysctl", "-q", "-w", "net.ipv6.conf." + name + ".disable_ipv6=1"}
}

func ipVFVLAN(pf string, vf int, vlan uint32) []string {
	return []string{"ip", "link", "set", pf, "vf", strconv.Itoa(vf), "vlan", strconv.FormatUint(uint64(vlan), 10)}
}

// ovs prefixes ovs-vsctl with the database (empty: OVS's default socket).
func ovs(db string, args ...string) []string {
	argv := []string{"ovs-vsctl", "--timeout=10"}
	if db != "" {
		argv = append(argv, "--db="+db)
	}
	return append(argv, args...)
}

func run(ctx context.Context, r Runner, argv []string) ([]byte, error) {
	return r(ctx, argv[0], argv[1:]...)
}
