// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/keel-nfv/keel/agent/internal/runtime"
	"github.com/keel-nfv/keel/agent/internal/vf"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// Container labels: they are the agent's memory, so a restarted agent re-adopts what runs.
const (
	LabelWorker   = "com.keel.worker"
	LabelInstance = "com.keel.instance"
	LabelChain    = "com.keel.chain"
	LabelPosition = "com.keel.position"
	LabelOf       = "com.keel.of"
	LabelTenant   = "com.keel.tenant"
	LabelVLAN     = "com.keel.vlan"
	LabelSpec     = "com.keel.spec"
)

// Paths inside an NF container.
const (
	// CoopschedSocketIn is where an NF container finds keel-coopsched's NF socket (the
	// host's SpecConfig.CoopschedNFSocket): RegisterThread of its own threads only.
	CoopschedSocketIn = "/run/keel/coopsched.sock"
	RedisSocketIn     = "/run/keel/redis.sock"
	// SecretsIn is where an instance's secrets directory is mounted read-only; RedisAuthIn
	// is its NFs' Redis login there (keel-nf --redis-auth-file).
	SecretsIn   = "/run/secrets/keel"
	RedisAuthIn = SecretsIn + "/" + RedisAuthName
	// PodStatsDir is where the NFs of an instance's Pod write their statistics files
	// (--runtime kubernetes): an emptyDir in memory that all the Pod's containers mount.
	PodStatsDir = "/run/keel/stats"
)

// GroupID is the coopsched sgroup id (and keel-nf --chain-id) of an instance: its id with
// '/' replaced by '.' (chain names use [A-Za-z0-9_.-]).
func GroupID(instance string) string { return strings.ReplaceAll(instance, "/", ".") }

// InstanceOfGroup inverts GroupID: the instance number follows the last '.'.
func InstanceOfGroup(group string) (string, bool) {
	i := strings.LastIndex(group, ".")
	if i <= 0 || i == len(group)-1 {
		return "", false
	}
	if _, err := strconv.ParseUint(group[i+1:], 10, 32); err != nil {
		return "", false
	}
	return group[:i] + "/" + group[i+1:], true
}

// SpecConfig is the part of the agent's configuration that shapes NF containers.
type SpecConfig struct {
	Worker    string
	PktbufDir string // host directory holding one subdirectory per instance
	// StatsDir, when set, is where each NF writes its statistics file inside its container,
	// on a Scratch mount shared by the instance's containers (--runtime kubernetes: the
	// instance directory is the Pod's hugetlbfs emptyDir, which takes no write(2)); "": in
	// the instance directory, on the host.
	StatsDir string
	// CoopschedNFSocket is the host path of keel-coopsched's NF socket (--nf-listen), the
	// one mounted into NF containers; its admin socket, which the agent calls, never is.
	CoopschedNFSocket string
	RedisSocket       string // host path of redis-server's socket ("" : NFs keep no state in Redis)
	// NFRedisAddr is the Redis HOST:PORT NFs reach over their own network for their state,
	// when no socket can be shared with them (Kubernetes: Redis runs on another node). At
	// most one of RedisSocket and NFRedisAddr is set.
	NFRedisAddr string
	// SecretsDir is the host directory holding one directory per instance with its NFs'
	// Redis login (RedisAuthName) and its chain's secrets, mounted read-only into that
	// instance's containers only ("": NFs log in as Redis' default user).
	SecretsDir      string
	Cpuset          string // the managed cores, e.g. "1"
	VFDriver        string // af_packet | af_xdp
	StatsIntervalMs int
	RTRuntimeUs     int64
	WaitIfaceMs     int
}

// InstanceDir is the host directory of an instance's chain buffer and stats files. It is
// bind-mounted at the same path into that instance's containers only, so the buffer path
// keel-nf announces to coopsched names the same file in both mount namespaces.
func (c SpecConfig) InstanceDir(instance string) string {
	return filepath.Join(c.PktbufDir, GroupID(instance))
}

// SecretDir is the host directory of an instance's secrets.
func (c SpecConfig) SecretDir(instance string) string {
	return filepath.Join(c.SecretsDir, GroupID(instance))
}

// NFLogins reports whether each instance's NFs log in to Redis as a user of their own.
func (c SpecConfig) NFLogins() bool { return c.NFState() && c.SecretsDir != "" }

// NFState reports whether NFs keep their state in Redis (a socket or an address).
func (c SpecConfig) NFState() bool { return c.RedisSocket != "" || c.NFRedisAddr != "" }

// StatsFile is position k's statistics file: the same path on the host and in the
// container, or with StatsDir the path inside the instance's containers.
func (c SpecConfig) StatsFile(instance string, k int) string {
	if c.StatsDir != "" {
		return filepath.Join(c.StatsDir, StatsName(k))
	}
	return filepath.Join(c.InstanceDir(instance), StatsName(k))
}

// StatsName is position k's statistics file in its instance's directory.
func StatsName(k int) string { return fmt.Sprintf("stats-%d.json", k) }

// ealArgs are position 0's DPDK EAL arguments: no PCI, no hugepages (the chain buffer is
// the agent's 2 MB-page tmpfs file; DPDK's own pool is ordinary memory), the VF through a
// kernel vdev. DPDK 22.11 refuses --in-memory with --no-huge (legacy memory), so the EAL
// keeps its few runtime files under a prefix of its own in the container's /var/run.
func (c SpecConfig) ealArgs(group string) []string {
	vdev := "net_af_packet0,iface=" + vf.InNetns
	if c.VFDriver == "af_xdp" {
		vdev = "net_af_xdp0,iface=" + vf.InNetns
	}
	return []string{"--no-pci", "--no-huge", "-m", "256", "--file-prefix=keel-" + group + "-0", "--no-telemetry",
		"--log-level=error", "--vdev", vdev}
}

// Specs returns the containers of an instance in chain order, each labelled with the
// instance's spec hash.
func (c SpecConfig) Specs(in *pb.ChainInstance, ch *pb.Chain) []runtime.Spec {
	n := len(ch.Members)
	group := GroupID(in.Id)
	dir := c.InstanceDir(in.Id)
	specs := make([]runtime.Spec, 0, n)
	for k, m := range ch.Members {
		nf := m.Nf
		if m.ConfigJson != "" {
			nf += "=" + m.ConfigJson
		}
		args := []string{"--nf", nf, "--chain-id", group, "--position", strconv.Itoa(k), "--of", strconv.Itoa(n),
			"--pktbuf", filepath.Join(dir, "pktbuf")}
		args = append(args, "--coopsched", "unix:"+CoopschedSocketIn,
			"--stats", c.StatsFile(in.Id, k), "--stats-interval", strconv.Itoa(c.StatsIntervalMs))
		mounts := []runtime.Mount{{Source: dir, Target: dir, Instance: true}, {Source: c.CoopschedNFSocket, Target: CoopschedSocketIn}}
		if c.StatsDir != "" {
			mounts = append(mounts, runtime.Mount{Target: c.StatsDir, Scratch: true})
		}
		if c.NFState() {
			if c.RedisSocket != "" {
				args = append(args, "--redis", "unix:"+RedisSocketIn)
				mounts = append(mounts, runtime.Mount{Source: c.RedisSocket, Target: RedisSocketIn})
			} else {
				args = append(args, "--redis", c.NFRedisAddr)
			}
			args = append(args, "--tenant", ch.Tenant)
			if c.NFLogins() {
				args = append(args, "--redis-auth-file", RedisAuthIn)
				mounts = append(mounts, runtime.Mount{Source: c.SecretDir(in.Id), Target: SecretsIn, ReadOnly: true, Dir: true})
			}
		}
		if c.chainSecrets(ch) {
			mounts = append(mounts, runtime.Mount{Source: c.ChainSecretsDir(in.Id), Target: ChainSecretsIn, ReadOnly: true, Dir: true})
		}
		s := runtime.Spec{
			Name:  fmt.Sprintf("keel-%s-%d", group, k),
			Image: m.Image,
			Labels: map[string]string{LabelWorker: c.Worker, LabelInstance: in.Id, LabelChain: in.Chain,
				LabelPosition: strconv.Itoa(k), LabelOf: strconv.Itoa(n), LabelTenant: ch.Tenant,
				LabelVLAN: strconv.FormatUint(uint64(in.Vlan), 10)},
			Mounts:      mounts,
			Cpuset:      c.Cpuset,
			MemoryBytes: ch.MemoryBytes,
			CPUs:        ch.Cpus,
			RTRuntimeUs: c.RTRuntimeUs,
		}
		if k == 0 {
			s.Args = append(args, "--wait-iface", fmt.Sprintf("%s:%d", vf.InNetns, c.WaitIfaceMs), "--")
			s.Args = append(s.Args, c.ealArgs(group)...)
			// DPDK sets vf0 promiscuous and its MAC (ioctls that need NET_ADMIN, which
			// reaches only the container's own netns: --network none); AF_XDP also loads
			// an XDP program and pins UMEM. Exactly these, never --privileged.
			s.CapAdd = []string{"NET_ADMIN"}
			if c.VFDriver == "af_xdp" {
				s.CapAdd = append(s.CapAdd, "BPF", "PERFMON")
				s.MemlockUnlimited = true
			}
		} else {
			s.Args = args
		}
		specs = append(specs, s)
	}
	h := sha256.New()
	_ = json.NewEncoder(h).Encode(specs)
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	for i := range specs {
		specs[i].Labels[LabelSpec] = sum
	}
	return specs
}
