# SPDX-License-Identifier: Apache-2.0
"""A hostile tenant next to a victim tenant (issue 31), on the real stack (make up).

The hostile tenant's packet function (tests/hostile/function/handler.cc, in the packet-cpp
template's shape) runs in a chain of its own beside a victim's chain (ACL -> NAT, whose NAT
mappings live in Redis). From Init on and after every batch it tries to read and write the
victim's NF state and the control plane's keys, KEYS/FLUSHALL/CONFIG/ACL, to register a host
thread with keel-coopsched (a sacrificial `sleep` this test starts, never a real daemon), to
attach, detach, re-batch and unregister the victim's groups, to plant buffer files, to open
other instances' chain buffers and the host's sockets, and it forges its statistics file to
claim overload. It counts each outcome in hostile.json in its instance directory.

Every attempt must be refused; the victim's packets all arrive with their NAT mappings
unchanged, its Redis state is untouched, its instance keeps its group, core and containers;
the sacrificial process is neither stopped nor made real-time nor moved; and the controller
does not take cores for the hostile chain because of its forged figures. The flow-move
frames it forges for the victim's flow (issue 37) reach keel-ingress, which drops every one
(no move of that flow from that instance waits for them): the victim's flow keeps its
instance and its NAT mapping."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from keelenv import ROOT
from keelstack import (SKIP_REASON, all_ready, capture, coopsched_groups, faas, instances, nf_containers,
                       redis, redis_cli, redis_env, running_stack, sh, udp, wait_for)

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "n/a")

PKTBUF = "/run/keel/pktbuf"  # deploy/local/lib.sh
IMAGE = "keel/nf-hostile:test"
VICTIM_NET, VICTIM_NAT = "198.18.6.0/24", "198.18.100.6"
HOSTILE_NET = "198.18.7.0/24"
# Every attack the NF makes (hostile.json's keys); each must be tried and refused.
ATTACKS = {
    "redis_anonymous_keys", "redis_keys", "redis_flushall", "redis_config", "redis_acl",
    "redis_read_victim_state", "redis_write_victim_state", "redis_read_control", "redis_write_control",
    "coopsched_status", "coopsched_register_host_tid", "coopsched_register_host_tid_hostns",
    "coopsched_planted_buffer", "coopsched_attach_victim", "coopsched_detach_victim",
    "coopsched_set_batch_victim", "coopsched_unregister_victim", "other_chain_buffers", "host_files",
}
# Source ports of this run: a flow the gateway still records from an earlier run (Redis keeps
# flows across make down/up until they expire) would go where that run sent it.
SPORT = 20000 + (os.getpid() * 7) % 30000
VICTIM, ATTACKER = "victim", "attacker"  # the two tenants' chains
VICTIM_FLOW = f"198.18.0.1:{SPORT}>198.18.6.10:5001/17"  # victim_packets' flow, as the hostile NF forges it
INGRESS_METRICS = "http://127.0.0.1:9103/metrics"
ROUNDS = 3  # attack rounds to wait for (each after a batch, ≥ 0.5 s apart)


# A stack file's start, as faas-cli reads it, for the make up gateway.
HEADER = """version: 1.0
provider:
  name: openfaas
  gateway: http://127.0.0.1:8080
functions:
"""


def stack_yaml(host_tid: int, host_pidns: int) -> str:
    return HEADER + f"""  hostile:
    image: {IMAGE}
    labels:
      com.keel.kind: nf
  {VICTIM}:
    image: keel/chain:latest
    labels:
      com.keel.kind: chain
    annotations:
      com.keel.chain: "ACL(rules=[{{'dst_ip':'{VICTIM_NET}','drop':False}}]) -> NAT(external_ip='{VICTIM_NAT}', port_range=[1024, 65535])"
      com.keel.filter: "dst net {VICTIM_NET}"
      com.keel.slo: "p99=500us,t_min=10Mbps"
  {ATTACKER}:
    image: keel/chain:latest
    labels:
      com.keel.kind: chain
    annotations:
      com.keel.chain: "hostile(victim='{VICTIM}', host_tid={host_tid}, host_pidns={host_pidns}, victim_flow='{VICTIM_FLOW}')"
      com.keel.filter: "dst net {HOSTILE_NET}"
      com.keel.slo: "p99=500us,t_min=10Mbps"
"""


@pytest.fixture(scope="module")
def stack():
    with running_stack():
        yield


@pytest.fixture(scope="module")
def hostile_image(stack, tmp_path_factory):
    """keel/nf-hostile:test: the handler compiled as the template's build stage does (-shared,
    no libkeelnf), with keel's generated coopsched stubs and gRPC's headers (keel-nf resolves
    both when it loads the NF), put into keel/nf-base as the template's second stage does."""
    work = tmp_path_factory.mktemp("hostile")
    cflags = sh("pkg-config", "--cflags", "grpc++", "protobuf").stdout.split()
    sh("g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-o", str(work / "libnf.so"),
       str(ROOT / "tests" / "hostile" / "function" / "handler.cc"), "-I", str(ROOT / "nf-runtime" / "include"),
       "-I", str(ROOT / "build" / "coopsched" / "gen"), *cflags, timeout=300)
    shutil.copy(ROOT / "tests" / "hostile" / "Dockerfile", work / "Dockerfile")
    r = subprocess.run(["docker", "build", "-q", "-t", IMAGE, str(work)], env={**os.environ, "DOCKER_BUILDKIT": "0"},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    yield
    sh("docker", "image", "rm", "-f", IMAGE, check=False)


@pytest.fixture(scope="module")
def sacrificial():
    """A host process for the hostile NF to try to freeze and make real-time: ours, never a daemon."""
    p = subprocess.Popen(["sleep", "900"])
    yield p.pid
    p.kill()
    p.wait()


def proc_state(pid: int) -> tuple:
    stat = open(f"/proc/{pid}/stat").read()
    state = stat[stat.rindex(")") + 2]
    return state, os.sched_getscheduler(pid), sorted(os.sched_getaffinity(pid))


def report(group: str) -> dict | None:
    try:
        return json.loads(open(f"{PKTBUF}/{group}/hostile.json").read())
    except (OSError, ValueError):
        return None


def victim_packets(sport: int) -> list[tuple]:
    """Ten UDP packets of one flow to the victim's prefix: (src ip, src port) at the sink."""
    got = capture(f"p.haslayer(UDP) and p[IP].dst == '198.18.6.10'", udp("198.18.6.10", sport, n=10), timeout=3)
    return [(l.split()[2], l.split()[5]) for l in got]


def state_of(key: str) -> bytes:
    """HGETALL of an NF state hash as raw bytes (its fields are binary flow keys)."""
    r = subprocess.run(redis_cli("HGETALL", key), capture_output=True, env=redis_env(), timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def scrape(url: str) -> dict[str, float]:
    """A Prometheus endpoint's samples (bench/promtext.py)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import promtext  # bench/promtext.py
    return promtext.scrape(url)


def mismatches(instance_ids: list[str]) -> dict[str, float]:
    """keel-agent's count of samples in which the instances' NF statistics contradicted keel's
    own measurement (keel_agent_nf_stats_mismatch_total), by instance and figure."""
    return {k: v for k, v in scrape("http://127.0.0.1:9101/metrics").items()
            if k.startswith("keel_agent_nf_stats_mismatch_total") and any(f'"{i}"' in k for i in instance_ids)}


def ingress_frames_bad() -> float:
    """keel-ingress's count of flow-move frames that came back and were dropped: malformed, or
    no move waits for them (keel_ingress_move_frames_bad_total)."""
    return scrape(INGRESS_METRICS).get("keel_ingress_move_frames_bad_total", 0.0)


def group_of(instance_id: str) -> str:
    return instance_id.replace("/", ".")


def test_a_hostile_nf_reaches_nothing_but_its_own_packets(hostile_image, sacrificial, tmp_path):
    before_proc = proc_state(sacrificial)
    yml = tmp_path / "hostile.yml"
    yml.write_text(stack_yaml(sacrificial, os.stat("/proc/self/ns/pid").st_ino))
    for name in ("hostile", VICTIM, ATTACKER):
        r = faas("deploy", "-f", str(yml), "--filter", name)
        assert r.returncode == 0, r.stdout + r.stderr
    try:
        wait_for("the victim's instances ready", lambda: all_ready(VICTIM), timeout=120)
        wait_for("the attacker's instances ready", lambda: all_ready(ATTACKER), timeout=120)
        # The victim's flow before the attacks: its NAT mapping, and what Redis and coopsched hold.
        # (Retried while the ToR's rules of the fresh deploy go in: torctl installs the chain's
        # switch-placed ACL after the deploy returns.)
        first = wait_for("the victim's flow delivered", lambda: (lambda got: got if len(got) == 10 else None)(
            victim_packets(SPORT)), timeout=30)
        assert len(set(first)) == 1 and first[0][0] == VICTIM_NAT, first
        victim_before = instances(VICTIM)
        containers_before = sorted(c["ID"] for c in nf_containers(chain=VICTIM))
        state_before = {k: state_of(k) for k in redis("--scan", "--pattern", f"keel:state:*:{VICTIM}.*")}
        assert state_before, "the victim's NAT keeps no state in Redis"
        function_before = redis("GET", "keel:function:" + VICTIM)
        frames_bad_before = ingress_frames_bad()

        # The hostile NF attacks after every batch: give it batches until it has made ROUNDS
        # rounds on each of its instances that carries traffic.
        def attacker_traffic():
            capture(f"p.haslayer(UDP) and p[IP].dst == '198.18.7.10'", udp("198.18.7.10", SPORT + 1, n=20), timeout=1)
            return [i for i, v in instances(ATTACKER).items() if v["state"] == "attached"]

        attached = wait_for("an attacker instance attached by its first flow", attacker_traffic, timeout=30)
        groups = [group_of(i) for i in attached]
        deadline = time.time() + 90
        while time.time() < deadline:
            attacker_traffic()
            reps = [report(g) for g in groups]
            if all(r and r["rounds"] > ROUNDS for r in reps):
                break
        reps = [report(g) for g in groups]
        assert all(reps), f"no hostile.json in {groups}"
        for g, rep in zip(groups, reps):
            print(f"{g}: {json.dumps(rep, indent=1)}")
            assert rep["rounds"] > ROUNDS, rep
            assert set(rep["attacks"]) == ATTACKS, set(rep["attacks"]) ^ ATTACKS
            got_through = {a: o for a, o in rep["attacks"].items() if o["succeeded"]}
            assert not got_through, f"attacks that got through on {g}: {json.dumps(got_through, indent=1)}"
            assert all(o["refused"] >= ROUNDS for o in rep["attacks"].values()), rep
            assert rep["stats_forged"] >= ROUNDS, rep
            assert rep["move_frames_forged"] >= ROUNDS, rep
        # Every forged move frame reached keel-ingress (the ToR returns an instance's 0x88B5
        # frames to it) and was dropped there: none went on to the victim.
        forged_moves = sum(rep["move_frames_forged"] for rep in reps)
        wait_for("the forged move frames dropped by keel-ingress",
                 lambda: ingress_frames_bad() - frames_bad_before >= forged_moves, timeout=10)

        # The sacrificial host process: running as before, neither stopped, FIFO nor moved.
        state, policy, cpus = proc_state(sacrificial)
        assert state in "RS" and (policy, cpus) == before_proc[1:], (state, policy, cpus, before_proc)
        # The victim: every packet of the same flow arrives with the same mapping; its state,
        # function record, instances, containers and coopsched groups are as they were.
        again = victim_packets(SPORT)
        assert again == first, (first, again)
        assert {k: state_of(k) for k in state_before} == state_before
        assert redis("GET", "keel:function:" + VICTIM) == function_before
        shape = lambda insts: {i: (v["state"], v["vlan"], v["core"]) for i, v in insts.items()}  # noqa: E731
        assert shape(instances(VICTIM)) == shape(victim_before)
        assert sorted(c["ID"] for c in nf_containers(chain=VICTIM)) == containers_before
        assert {group_of(i) for i in victim_before} <= set(coopsched_groups())
        assert not [c for c in nf_containers(chain=VICTIM) if c["State"] != "running"]
        # The controller: the forged figures took no core for the hostile chain. Its instances
        # stay those it had once attacking (attached and the controller's pool), for 15 s more
        # of forging under traffic.
        # The agent sees a forgery only if it reads the file before keel-nf's own next write
        # (every second) replaces it: the traffic goes on, up to 30 s more, until it has.
        attacker_ids = set(instances(ATTACKER))
        forged, t0 = {}, time.time()
        while time.time() < t0 + 15 or (not sum(forged.values()) and time.time() < t0 + 45):
            attacker_traffic()
            forged = mismatches(attached)
            time.sleep(0.5)
        assert set(instances(ATTACKER)) == attacker_ids, (attacker_ids, instances(ATTACKER))
        # ... and the agent saw the forgery for what it is: the NF's figures contradict keel's.
        print(f"keel_agent_nf_stats_mismatch_total of {attached}: {forged}")
        assert sum(forged.values()) > 0, forged
        assert len([v for v in instances(ATTACKER).values() if v["state"] == "attached"]) == len(attached)
    finally:
        for name in (ATTACKER, VICTIM, "hostile"):  # the packet function after the chain that uses it
            r = faas("remove", name)
            assert r.returncode == 0, r.stdout + r.stderr
        wait_for("the chains' containers removed",
                 lambda: not nf_containers(chain=VICTIM) and not nf_containers(chain=ATTACKER), timeout=60)


# A chain's key as a faas-cli secret (issue 31 item 4): the value reaches only the
# instance's containers, as a read-only file, never an annotation, Redis, or an argument.
AES_KEY, AES_IV = "2b7e151628aed2a6abf7158809cf4f3c", "000102030405060708090a0b0c0d0e0f"
SEALED_NET = "198.18.8.0/24"


def sealed_yaml(listed: bool) -> str:
    secrets = "\n    secrets: [keel-aes-key]" if listed else ""
    return HEADER + f"""  sealed:
    image: keel/chain:latest{secrets}
    labels:
      com.keel.kind: chain
    annotations:
      com.keel.chain: "Encrypt(key={{'secret': 'keel-aes-key'}}, iv='{AES_IV}')"
      com.keel.filter: "dst net {SEALED_NET}"
      com.keel.slo: "p99=500us,t_min=10Mbps"
"""


def test_a_chain_takes_its_key_from_a_faas_cli_secret(stack, tmp_path):
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    r = faas("secret", "create", "keel-aes-key", "--from-literal", AES_KEY)
    assert r.returncode == 0, r.stdout + r.stderr
    yml = tmp_path / "sealed.yml"
    try:
        # An argument may name only a secret the chain lists.
        yml.write_text(sealed_yaml(listed=False))
        r = faas("deploy", "-f", str(yml))
        assert "secret \"keel-aes-key\" is not one of the chain's secrets" in r.stdout + r.stderr, r.stdout + r.stderr
        assert not nf_containers(chain="sealed")

        yml.write_text(sealed_yaml(listed=True))
        r = faas("deploy", "-f", str(yml))
        assert r.returncode == 0, r.stdout + r.stderr
        wait_for("sealed's instances ready", lambda: all_ready("sealed"), timeout=120)
        got = capture("p.haslayer(UDP) and p[IP].dst == '198.18.8.10'", udp("198.18.8.10", SPORT + 2, n=5), timeout=3,
                      payload=True)
        assert len(got) == 5, got
        for i, line in enumerate(sorted(got, key=lambda l: l.split()[-1])):
            d = Cipher(algorithms.AES(bytes.fromhex(AES_KEY)), modes.CBC(bytes.fromhex(AES_IV))).decryptor()
            padded = d.update(bytes.fromhex(line.split()[-1])) + d.finalize()
            u = padding.PKCS7(128).unpadder()
            assert (u.update(padded) + u.finalize()).startswith(b"keel"), line
        # Nowhere but in the instance's secrets: not in describe, Redis or the containers' spec.
        assert AES_KEY not in faas("describe", "sealed").stdout
        assert AES_KEY not in "".join(redis("GET", "keel:function:sealed"))
        for c in nf_containers(chain="sealed"):
            spec = sh("docker", "inspect", c["ID"]).stdout
            assert AES_KEY not in spec, f"the key is in {c['Names']}'s spec"
            assert "/var/openfaas/secrets" in spec
    finally:
        faas("remove", "-f", str(yml))
        wait_for("sealed's containers removed", lambda: not nf_containers(chain="sealed"), timeout=60)
        faas("secret", "remove", "keel-aes-key")
