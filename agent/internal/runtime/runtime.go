// SPDX-License-Identifier: Apache-2.0

// Package runtime is where keel-agent's NF containers run: one small interface, Runtime,
// and its implementations beside it: Docker (one container per NF on the worker's engine)
// and Kubernetes (one Pod per chain instance, one container per NF, through client-go).
package runtime

import (
	"context"
	"errors"
	"time"
)

// ErrImageMissing is returned by Create when the image is not on the worker.
var ErrImageMissing = errors.New("image not found on the worker")

// Mount is a host path bind-mounted into a container.
type Mount struct {
	Source, Target string
	ReadOnly       bool
	// Dir marks a host directory (an instance's secrets); other host paths are sockets.
	// Kubernetes checks the hostPath's type.
	Dir bool
	// Instance marks the instance's own directory (chain buffer, stats files): a host
	// directory under Docker, a hugepages-2Mi emptyDir of the instance's Pod under
	// Kubernetes; shared by that instance's containers only either way.
	Instance bool
	// Scratch marks a directory of the instance in memory that its containers share and
	// write with ordinary writes (the NFs' statistics files under Kubernetes, where the
	// Instance directory is hugetlbfs, which takes no write(2)): an emptyDir of medium
	// Memory. Source is unused.
	Scratch bool
}

// Spec is one NF container to create.
type Spec struct {
	Name   string
	Image  string
	Args   []string // after the image's entry point (keel-nf)
	Labels map[string]string
	Mounts []Mount
	// Cpuset is the cores the container may run on (the cores coopsched manages).
	Cpuset      string
	MemoryBytes int64   // 0: no limit
	CPUs        float64 // 0: no limit (CFS quota; coopsched's SCHED_FIFO time is not under it)
	// RTRuntimeUs is the container's cgroup v1 cpu.rt_runtime_us: the kernel refuses
	// SCHED_FIFO to threads of a cgroup whose RT runtime is 0 (Docker's default).
	RTRuntimeUs int64
	CapAdd      []string
	// MemlockUnlimited lifts RLIMIT_MEMLOCK (AF_XDP's UMEM).
	MemlockUnlimited bool
}

// Container is a container as the runtime reports it.
type Container struct {
	ID      string
	Name    string
	Labels  map[string]string
	Created time.Time
	Running bool
	State   string // created, running, exited, dead, ...
	Pid     int    // host pid of its first process while running (Inspect only)
	// When not running (Inspect only):
	ExitCode  int
	OOMKilled bool
	Error     string
	LastLine  string // the last line it wrote (stdout or stderr)
}

// Event says that a container of the agent changed (died, was OOM killed, removed ...).
type Event struct {
	ID, Action string
	Labels     map[string]string
}

// Runtime creates and watches the agent's containers.
type Runtime interface {
	// List returns the containers (running or not) that carry every label in match.
	List(ctx context.Context, match map[string]string) ([]Container, error)
	// CreateInstance creates and starts the containers of one chain instance (specs in
	// chain order) and returns their ids in that order. first runs once position 0 runs,
	// with its pid (the agent moves the VF into its netns there); Docker starts the other
	// positions only after it returns. A missing image is an error wrapping ErrImageMissing.
	CreateInstance(ctx context.Context, specs []Spec, first func(Container) error) ([]string, error)
	// Inspect returns a container with its pid, or its exit status and last output line.
	Inspect(ctx context.Context, id string) (Container, error)
	// Remove kills and deletes a container; a container that is gone is no error.
	Remove(ctx context.Context, id string) error
	// Events streams changes of containers that carry every label in match until ctx ends
	// or the stream breaks (an error on the second channel).
	Events(ctx context.Context, match map[string]string) (<-chan Event, <-chan error)
}
