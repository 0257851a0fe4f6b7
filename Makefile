# SPDX-License-Identifier: Apache-2.0
# keel — network functions the cloud-native way.
#
#   make deps   install what is missing (Debian packages, Python venv)
#   make build  build everything into build/ (binaries in build/bin/)
#   make test   deps + build + every test (C++ unit tests, Go tests with a real kube-apiserver, pytest)
#   make bench  deps + build + benchmarks (bench/results/*.json), keel-sim's rack simulations
#   make demo   deps + build + run the demo and print its report
#   make chaos  deps + build + the chaos run: parts of the stack killed under traffic
#               (CHAOS_SECONDS, CHAOS_SEED, CHAOS_INTERVAL; bench/results/chaos.json)
#   make fuzz   clang + libFuzzer: each fuzz harness for FUZZ_SECONDS (tests/fuzz)
#   make images the bases of packet-function images (dockerd must run)
#   make up     deps + build + start the local stack in the background (run/); SMARTNIC=0:
#               the worker's NIC is not an eBPF SmartNIC (no NF runs in XDP)
#   make down   stop the local stack and remove what it made

SHELL := /bin/bash
.DEFAULT_GOAL := build

BUILD   ?= build
VENV    ?= .venv
PY      := $(VENV)/bin/python
PYTHON  ?= python3
JOBS    ?= $(shell nproc)
GO      ?= $(shell command -v go || echo /usr/local/go/bin/go)
GOBIN   := $(shell $(GO) env GOPATH 2>/dev/null)/bin
CMAKE_FLAGS ?=
# What keel-gateway's /system/info (faas-cli version) reports: the checkout's git describe and commit.
GIT_VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
GIT_SHA     := $(shell git rev-parse HEAD 2>/dev/null || echo dev)
GATEWAY_LDFLAGS := -X github.com/keel-nfv/keel/gateway/internal/handlers.Version=$(GIT_VERSION) \
	-X github.com/keel-nfv/keel/gateway/internal/handlers.SHA=$(GIT_SHA)
ifeq ($(CI),true)
CMAKE_FLAGS += -DKEEL_WERROR=ON
endif

APT_PACKAGES := build-essential cmake ninja-build pkg-config \
	libdpdk-dev dpdk-dev dpdk libpcap-dev libssl-dev libhiredis-dev \
	nlohmann-json3-dev libgtest-dev redis-server tcpdump iproute2 ethtool curl python3-venv \
	libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc openvswitch-switch libjemalloc2 \
	fonts-liberation containernetworking-plugins clang libbpf-dev
# Installed without their recommendations (docker.io would pull apparmor, criu, ...;
# prometheus its node exporter; chromium a desktop's daemons). Prometheus scrapes the local
# stack; chromium and chromium-driver run the dashboard's browser test headless.
APT_NO_RECOMMENDS := docker.io prometheus chromium chromium-driver

.PHONY: deps apt-deps py-deps go-deps xdp-objs build test unit-test py-test k8s-bins k8s-cluster-bins test-k8s bench demo chaos images up down clean \
	fuzz fuzz-deps

deps: apt-deps py-deps go-deps

# Installs only the Debian packages that are missing (idempotent).
apt-deps:
	@missing() { for p in "$$@"; do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done; }; \
	plain=$$(missing $(APT_PACKAGES)); bare=$$(missing $(APT_NO_RECOMMENDS)); \
	if [ -n "$$plain$$bare" ]; then \
	  echo "installing:" $$plain $$bare; \
	  SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && export DEBIAN_FRONTEND=noninteractive && \
	  { [ -z "$$plain" ] || $$SUDO apt-get install -y -q $$plain; } && \
	  { [ -z "$$bare" ] || $$SUDO apt-get install -y -q --no-install-recommends $$bare; }; \
	fi

# clang and its sanitizer and libFuzzer runtimes, for make fuzz only.
FUZZ_PACKAGES := clang libclang-rt-14-dev
fuzz-deps:
	@missing=$$(for p in $(FUZZ_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q \
	    --no-install-recommends $$missing; \
	fi

# Go code generators for the gateway's gRPC stubs (Go module proxy).
go-deps:
	@test -x $(GOBIN)/protoc-gen-go || $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	@test -x $(GOBIN)/protoc-gen-go-grpc || $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

$(VENV)/.deps: tests/requirements.txt placer/requirements.txt placer/pyproject.toml \
		ingress/torctl/requirements.txt ingress/torctl/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r tests/requirements.txt -r placer/requirements.txt \
	    -r ingress/torctl/requirements.txt
	$(PY) -m pip install -q --no-deps -e placer
	$(PY) -m pip install -q --no-deps -e ingress/torctl
	touch $@

py-deps: $(VENV)/.deps

# The XDP network functions (xdp/bpf/*.c), compiled for the kernel's BPF target into
# $(BUILD)/xdp/, where keel-agent and keel-xdp load them from.
XDP_OBJS := $(patsubst xdp/bpf/%.c,$(BUILD)/xdp/%.o,$(wildcard xdp/bpf/*.c))
BPF_CFLAGS := -O2 -g -Wall -Werror -target bpf -I/usr/include/$(shell gcc -dumpmachine 2>/dev/null)

$(BUILD)/xdp/%.o: xdp/bpf/%.c xdp/bpf/keel_xdp.h
	@mkdir -p $(@D)
	clang $(BPF_CFLAGS) -c $< -o $@

xdp-objs: $(XDP_OBJS)

build: deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) > /dev/null
	ninja -C $(BUILD) -j $(JOBS)
	mkdir -p $(BUILD)/py
	$(PY) proto/genpy.py placer/keel_placer/gen placer
	$(PY) proto/genpy.py ingress/torctl/keel_torctl/gen control torctl
	$(PY) -m grpc_tools.protoc -Iproto --python_out=$(BUILD)/py --grpc_python_out=$(BUILD)/py \
	    proto/keel/v1/coopsched.proto proto/keel/v1/control.proto proto/keel/v1/torctl.proto
	cp proto/keel/v1/controltoken.py $(BUILD)/py/keel/v1/
	PATH="$$PATH:$$(dirname $(GO))" proto/genproto.sh $(PY)
	$(GO) build -ldflags "$(GATEWAY_LDFLAGS)" -o $(BUILD)/bin/keel-gateway ./gateway/cmd/keel-gateway
	$(GO) build -o $(BUILD)/bin/keel-agent ./agent/cmd/keel-agent
	$(GO) build -o $(BUILD)/bin/keel-sim ./gateway/cmd/keel-sim
	$(MAKE) --no-print-directory xdp-objs
	$(GO) build -o $(BUILD)/bin/keel-xdp ./xdp/cmd/keel-xdp

test: build k8s-bins
	$(MAKE) --no-print-directory unit-test py-test

unit-test:
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	KEEL_K8S_BIN=$(abspath $(BUILD))/k8s $(GO) test ./...

# etcd and kube-apiserver for the API-server-level tests (internal/testapiserver), built
# from pinned modules into $(BUILD)/k8s once (minutes; cached after). If they cannot be
# built (no module proxy), those tests skip and say why; nothing else depends on them.
k8s-bins:
	GO=$(GO) deploy/kubernetes/testcluster/build.sh $(abspath $(BUILD))/k8s || \
	  echo "warning: etcd/kube-apiserver not built: the Kubernetes API-server tests will skip"

# What the one-node cluster of make test-k8s runs besides etcd and kube-apiserver:
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl (same pinned module).
k8s-cluster-bins:
	GO=$(GO) deploy/kubernetes/testcluster/build.sh --cluster $(abspath $(BUILD))/k8s

# keel's Kubernetes backend on a real one-node cluster (deploy/kubernetes/testcluster/
# cluster.sh: own containerd, kubelet with the static CPU manager, kube-proxy), brought up
# and taken down again; as root. See test-k8s.sh for what it proves and what not yet.
test-k8s: build k8s-cluster-bins
	GO=$(GO) KEEL_K8S_BIN=$(abspath $(BUILD))/k8s deploy/kubernetes/testcluster/test-k8s.sh

# pytest exits 5 when it collected no test: that fails the target too.
py-test:
	$(PY) -m pytest -q tests placer/tests ingress/torctl/tests

# The fuzz harnesses (tests/fuzz), built with clang, ASan and UBSan in
# $(FUZZ_BUILD), each run for FUZZ_SECONDS; new inputs and crashes stay in
# $(FUZZ_BUILD)/work. make test replays the checked-in corpus (ctest fuzz_replay_*).
FUZZ_BUILD   ?= $(BUILD)/fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := fuzz_packet fuzz_pktbuf fuzz_nf fuzz_config fuzz_flowmove
fuzz: apt-deps fuzz-deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DKEEL_FUZZ=ON > /dev/null
	ninja -C $(FUZZ_BUILD) -j $(JOBS) $(FUZZ_TARGETS)
	tests/fuzz/run.sh $(FUZZ_BUILD)/bin $(FUZZ_BUILD)/work $(FUZZ_SECONDS)

# keel/nf-base and keel/nf-sdk, the bases of packet-function images, from
# this machine's files (no registry), and stack.yml's normal function. DOCKER=unix:///path/docker.sock picks
# a dockerd (default $$DOCKER_HOST, else docker's socket); dockerd must run.
images: build
	deploy/local/images.sh --bin $(BUILD)/bin $(DOCKER)
	cd gateway && CGO_ENABLED=0 $(GO) build -o examples/hello/hello ./examples/hello
	DOCKER_BUILDKIT=0 docker $(if $(DOCKER),-H $(DOCKER)) build -q -t keel/hello:latest gateway/examples/hello

# The local single-node stack: redis, dockerd (if none runs), Open vSwitch, placer, gateway,
# coopsched and agent as background processes with logs and PID files in run/. KEEL_BIN
# (default build/bin, as for the tests) is where keel's binaries are.
KEEL_BIN ?= $(BUILD)/bin
SMARTNIC ?= 1
up: build
	deploy/local/up.sh --bin $(KEEL_BIN) $(if $(filter 0,$(SMARTNIC)),--no-smartnic)

down:
	deploy/local/down.sh

bench: build
	$(BUILD)/bin/keel-nfbench --out bench/results/nf_profile.json
	taskset -c 1 chrt -f 50 $(BUILD)/bin/keel-sojourn-bench --out bench/results/sojourn_cost.json
	taskset -c 1 chrt -f 50 $(BUILD)/bin/keel-flowmove-bench --out bench/results/flow_state_move.json
	taskset -c 1 chrt -f 50 $(BUILD)/bin/keel-handover-bench --out bench/results/handover_cost.json
	$(PY) bench/xdp_offload.py --bin $(BUILD)/bin --out bench/results/xdp_offload.json
	$(PY) placer/bench_eval.py --out bench/results/placer_eval.json
	$(PY) placer/bench_smartchain.py --out bench/results/smartchain_eval.json \
	    --extra bench/results/smartchain_eval_extra.json
	$(PY) placer/bench_octans.py --out bench/results/octans_eval.json \
	    --extra bench/results/octans_eval_extra.json
	$(PY) placer/bench_uno.py --out bench/results/uno_eval.json \
	    --extra bench/results/uno_eval_extra.json
	$(PY) bench/chain_length.py --out bench/results/chain_length.json
	$(PY) bench/chain_rate.py --out bench/results/chain_rate.json
	$(PY) bench/idle_core.py --out bench/results/idle_core.json
	$(PY) bench/ingress_wake.py --out bench/results/ingress_wake.json
	$(PY) bench/flow_setup.py --out bench/results/flow_setup.json
	$(PY) bench/scale_out.py --out bench/results/scale_out.json
	$(PY) bench/switch_setup.py --out bench/results/switch_setup.json
	$(PY) ingress/torctl/bench_cpu.py --out bench/results/torctl_cpu.json
	$(PY) bench/migration.py --out bench/results/migration.json
	$(PY) deploy/local/demo.py --bin $(BUILD)/bin --down
	$(BUILD)/bin/keel-sim run --policy keel,metron --ablation --out bench/results/autoscale_sim.json \
	    bench/scenarios/galleon.yaml bench/scenarios/diurnal.yaml bench/scenarios/flash.yaml \
	    bench/scenarios/mixed.yaml
	$(BUILD)/bin/keel-sim run --policy keel,metron,metron-slo --out bench/results/random_rack_sim.json \
	    bench/scenarios/random-11.yaml bench/scenarios/random-12.yaml bench/scenarios/random-13.yaml
	$(BUILD)/bin/keel-sim migration --out bench/results/migration.json \
	    bench/scenarios/longflow-21.yaml bench/scenarios/longflow-22.yaml \
	    bench/scenarios/galleon.yaml bench/scenarios/flash.yaml \
	    bench/scenarios/random-11.yaml bench/scenarios/random-12.yaml bench/scenarios/random-13.yaml \
	    bench/scenarios/diurnal.yaml
	$(BUILD)/bin/keel-sim profile --chain chain1 --nfs tunnel,ipv4fwd --pkt-bytes 1024 --ghz 2.4 \
	    --out bench/results/profile_chain1.json
	$(BUILD)/bin/keel-sim profile --chain chain2 --nfs acl,urlfilter,encrypt --pkt-bytes 1024 --ghz 2.4 \
	    --out bench/results/profile_chain2.json
	$(BUILD)/bin/keel-sim profile --chain chain3 --nfs acl,nat --pkt-bytes 1024 --ghz 2.4 \
	    --out bench/results/profile_chain3.json

demo: build
	$(PY) deploy/local/demo.py --bin $(BUILD)/bin

# The chaos run (tests/chaos/chaos.py): make up, faas-cli deploy -f stack.yml, steady traffic,
# and every CHAOS_INTERVAL seconds for CHAOS_SECONDS one part of the stack (NF container, agent,
# coopsched, ingress, torctl, gateway, Redis, ovs-vswitchd) killed with SIGKILL and started
# again; then checks that no chain, NF state or resource was lost and writes
# bench/results/chaos.json; make down at the end. CHAOS_SEED replays a run (default: the time).
# make test runs a short one (tests/chaos/test_chaos.py).
CHAOS_SECONDS  ?= 300
CHAOS_INTERVAL ?= 20
CHAOS_SEED     ?=
chaos: build
	KEEL_BIN=$(abspath $(BUILD))/bin CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_INTERVAL=$(CHAOS_INTERVAL) \
	    CHAOS_SEED=$(CHAOS_SEED) $(PY) tests/chaos/chaos.py --down

clean:
	rm -rf $(BUILD)
