"""torctl's state and its reconcile loop: chains, instances and flows to switch rules.

Level-triggered like a Kubernetes controller: the rules the switch should hold (base,
chain programs, instance reinject and return rules) are computed from the chains and instances the
gateway's Watch reported, compared with the rules read back from the switch (by cookie),
and the difference is committed. Flow rules are the exception: they come from InstallFlow,
and after the switch lost them, from the gateway's Control.ListFlows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import ofp
from .metrics import Metrics
from .nfs import ChainError, Program, SwitchNf, compile_program
from .rules import (KIND_BASE, MissingPort, KIND_CHAIN_REINJECT, KIND_FLOW, KIND_INSTANCE_REINJECT, KIND_MASK,
                    KIND_PROGRAM, KIND_REINJECT, KIND_RETURN, PRIO_FLOW, PRIO_REINJECT, STEER_TABLE, TAG_MASK,
                    FiveTuple, Rule, base_rules, chain_reinject_rule, chain_tag, cookie, cookie_detail, cookie_kind,
                    cookie_tag, flow_rule, instance_inband_rule, instance_move_return_rule, instance_reinject_rule,
                    return_rule)
from .switch import Switch

LOG = logging.getLogger("keel_torctl.controller")
_FLOW_KINDS_VALUE, _FLOW_KINDS_MASK = cookie(KIND_FLOW), 0xE << 60  # kinds 4 and 5
# follow chains and instances
_PROGRAM_KINDS = (KIND_PROGRAM, KIND_RETURN, KIND_INSTANCE_REINJECT, KIND_CHAIN_REINJECT)


def worker_port_id(worker: str) -> str:
    """What the netdev names of a worker end in (keel-tor-ID toward it; keel-agent's
    keel-nic-ID and keel-up-ID): the worker's name when it fits a 15-byte interface name
    (6 bytes at most), else "h" and the first 5 hex digits of its SHA-256, as Kubernetes node
    names are longer. keel-agent's vf.WorkerPortID is the same rule (vector: keel-k8s ->
    hdc3bf)."""
    if len(worker.encode()) <= 6:
        return worker
    return "h" + hashlib.sha256(worker.encode()).hexdigest()[:5]


@dataclass(frozen=True)
class Options:
    """What the operator told torctl on its command line."""

    ingress_port: str
    egress_port: str
    worker_ports: Mapping[str, str]
    idle_timeout: int
    capabilities: Mapping[str, Any]
    has_gateway: bool


@dataclass(frozen=True)
class Assignment:
    """A flow's assignment (keel.v1.FlowAssignment)."""

    flow: FiveTuple
    chain: str
    instance: str
    vlan: int
    worker: str


@dataclass
class Flow:
    """A flow torctl has on the switch, per stage."""

    assignment: Assignment
    stage2: bool = False
    stage1: bool = False
    idle_timeout: int = 0
    cookie: int = 0


@dataclass(frozen=True)
class Instance:
    chain: str
    vlan: int
    worker: str


class UnknownChain(LookupError):
    """InstallFlow named a chain the gateway has not reported."""


class Controller:
    """The state behind keel-torctl's gRPC API."""

    def __init__(self, opts: Options, switch: Switch, metrics: Metrics,
                 list_gateway_flows: Callable[[], list[Assignment]] = lambda: []):
        self.opts = opts
        self.switch = switch
        self.metrics = metrics
        self.list_gateway_flows = list_gateway_flows
        self._lock = threading.RLock()
        self._chains: dict[str, Program | ChainError] = {}
        self._instances: dict[str, Instance] = {}
        self._reinject: dict[str, int] = {}  # switch-only chains' reinject VLANs (0: none)
        self._flows: dict[FiveTuple, Flow] = {}
        self._installed: set[tuple[int, int, int]] = set()
        # Expiries of rules not in the record, by flow: (cookie, when), oldest first (record)
        self._expired_unknown: dict[FiveTuple, tuple[int, float]] = {}
        self._synced = False
        self._seen: set[str] = set()
        self._subscribers: list[queue.Queue] = []
        # Removals no watcher has taken (none was watching, or its queue was full or it ended
        # before sending them): the next watcher gets them first.
        self._unsent: deque = deque()
        self.installs = 0
        self.connections = 0
        switch.on_connect = self.switch_connected
        switch.on_flow_removed = self.flow_removed
        switch.on_port_change = self.reconcile
        # Counted when scraped: counting on every install made installs O(flows).
        metrics.flows.set_function(self.flow_count)

    # ----- names -----

    def trunk(self, worker: str) -> str:
        """The ToR port toward a worker (--worker-port, else keel-tor-ID, worker_port_id)."""
        return self.opts.worker_ports.get(worker, f"keel-tor-{worker_port_id(worker)}")

    def _worker_of_port(self, name: str) -> str:
        for w, p in self.opts.worker_ports.items():
            if p == name:
                return w
        with self._lock:
            known = {i.worker for i in self._instances.values()}
        for w in known:
            if self.trunk(w) == name:
                return w
        return name.removeprefix("keel-tor-") if name.startswith("keel-tor-") else ""

    def _trunks(self) -> list[str]:
        names = set(self.opts.worker_ports.values())
        return sorted(n for n in self.switch.ports() if n in names or n.startswith("keel-tor-"))

    def _chain_name(self, tag: int) -> str:
        with self._lock:
            return next((c for c in self._chains if chain_tag(c) == tag), "")

    def _instance_id(self, chain: str, vlan: int) -> str:
        with self._lock:
            return next((i for i, x in self._instances.items() if x.chain == chain and x.vlan == vlan), "")

    # ----- chains and instances (the gateway's Watch) -----

    def chain_added(self, name: str, nfs: list[str], members: list[str], switch_nfs: list[Any],
                    reinject_vlan: int = 0) -> None:
        """Compile a chain's switch NFs; a chain torctl cannot run is kept with its reason. A
        switch-only chain (no members) with a reinject VLAN gets its chain reinject rule."""
        try:
            parsed = [SwitchNf(s.name, s.nf, json.loads(s.config_json or "{}"), s.after_server)
                      for s in switch_nfs]
            prog: Program | ChainError = compile_program(name, nfs, members, parsed,
                                                         self.opts.capabilities)
        except ChainError as e:
            prog = e
            LOG.error("refusing chain %s: %s", name, e)
        except (ValueError, KeyError, TypeError) as e:
            prog = ChainError(f"bad switch NF configuration: {e}")
            LOG.error("refusing chain %s: %s", name, prog)
        with self._lock:
            self._chains[name] = prog
            self._reinject[name] = 0 if members else reinject_vlan
            self._seen.add(name)
        self._reconcile_if_synced()

    def chain_removed(self, name: str) -> None:
        with self._lock:
            self._chains.pop(name, None)
            self._reinject.pop(name, None)
        self._delete_chain(chain_tag(name))

    def instance_changed(self, iid: str, chain: str, vlan: int, worker: str) -> None:
        with self._lock:
            self._instances[iid] = Instance(chain, vlan, worker)
            self._seen.add("instance:" + iid)
        self._reconcile_if_synced()

    def instance_removed(self, iid: str) -> None:
        """Delete the instance's return rule and its flows."""
        with self._lock:
            inst = self._instances.pop(iid, None)
        if inst is not None:
            self._delete_instance(chain_tag(inst.chain), inst.vlan)

    def watch_restarted(self) -> None:
        """A new Watch snapshot begins: remember what it mentions until SYNCED."""
        with self._lock:
            self._seen = set()

    def synced(self) -> None:
        """The snapshot is complete: forget chains and instances it did not mention."""
        with self._lock:
            gone_chains = [c for c in self._chains if c not in self._seen]
            gone_insts = [i for i in self._instances if "instance:" + i not in self._seen]
            self._synced = True
        self.metrics.gateway_synced.set(1)
        for i in gone_insts:
            self.instance_removed(i)
        for c in gone_chains:
            self.chain_removed(c)
        self.reconcile()

    def chain_error(self, name: str) -> str:
        """Why torctl refuses a chain ("" if it runs it)."""
        with self._lock:
            p = self._chains.get(name)
        return str(p) if isinstance(p, ChainError) else ""

    # ----- the switch -----

    def switch_connected(self) -> None:
        """Read the switch's rules back, then install what is missing (base, programs and, from
        the gateway, every live flow the switch lost)."""
        self.connections += 1
        if self.connections > 1:
            self.metrics.reconnects.inc()
        try:
            self._read_back()
            self.reconcile()
            self._reinstall_gateway_flows()
        except Exception:  # noqa: BLE001 - a failed reconcile must not kill the thread silently
            LOG.exception("reconciling after the switch connected failed")

    def _read_back(self) -> None:
        entries = self.switch.request(lambda dp: ofp.flow_stats_request(dp))
        names = {no: name for name, no in self.switch.ports().items()}
        installed, flows = set(), {}
        for e in entries:
            kind = cookie_kind(e.cookie)
            if kind in (KIND_FLOW, KIND_REINJECT) and e.table_id == STEER_TABLE:
                a = self._assignment(e.cookie, ofp.match_fields(e.match),
                                     ofp.output_ports(e.instructions), names)
                f = flows.setdefault(a.flow, Flow(a))
                f.stage2 |= kind == KIND_FLOW
                f.stage1 |= kind == KIND_REINJECT
                f.idle_timeout, f.cookie = e.idle_timeout, e.cookie
            elif kind:
                installed.add((e.table_id, e.priority, e.cookie))
        with self._lock:
            self._installed = installed
            self._flows = flows
        LOG.info("read back %d rules and %d flows from the switch", len(installed), len(flows))

    def _assignment(self, c: int, match: dict[str, Any], outputs: list[int],
                    names: dict[int, str]) -> Assignment:
        chain, vlan = self._chain_name(cookie_tag(c)), cookie_detail(c)
        worker = self._worker_of_port(names.get(outputs[-1], "")) if vlan and outputs else ""
        return Assignment(FiveTuple.from_match(match), chain, self._instance_id(chain, vlan), vlan, worker)

    def _desired(self) -> list[Rule]:
        port = self.switch.port
        rules: list[Rule] = []
        try:
            rules += base_rules(port, self.opts.ingress_port, self.opts.egress_port, self._trunks())
        except LookupError as e:
            LOG.warning("no base rules yet: %s", e)
        with self._lock:
            programs = {c: p for c, p in self._chains.items() if isinstance(p, Program)}
            instances = list(self._instances.values())
        for c, p in programs.items():
            try:
                rules += self._chain_rules(p, c, port)
            except LookupError as e:
                LOG.warning("no reinject rule for chain %s yet: %s", c, e)
                rules += p.rules
        for inst in instances:
            p = programs.get(inst.chain)
            if p is None or not inst.vlan:
                continue
            try:
                rules += self._instance_rules(p, inst.chain, inst.vlan, inst.worker)
            except LookupError as e:
                LOG.warning("no rules for %s VLAN %d yet: %s", inst.chain, inst.vlan, e)
        return rules

    def _chain_rules(self, p: Program, chain: str, port: Callable[[str], int]) -> list[Rule]:
        """A chain's own rules: its program's, and a switch-only chain's reinject rule (with the
        program, so that the first install of a flow of the chain confirms it is in)."""
        with self._lock:
            vlan = self._reinject.get(chain, 0)
        rules = list(p.rules)
        if vlan:
            rules.append(chain_reinject_rule(port, self.opts.ingress_port, self.opts.egress_port, chain, vlan,
                                             p.first_pre))
        return rules

    def chain_reinject_in(self, chain: str) -> int:
        """The chain's reinject VLAN if its chain reinject rule is on the switch, else 0."""
        with self._lock:
            vlan = self._reinject.get(chain, 0)
            on = vlan and (STEER_TABLE, PRIO_REINJECT, cookie(KIND_CHAIN_REINJECT, chain_tag(chain), vlan)) in self._installed
        return vlan if on else 0

    def chain_reinjects(self) -> dict[str, int]:
        """Every chain whose chain reinject rule is on the switch, with its reinject VLAN."""
        with self._lock:
            chains = list(self._reinject)
        return {c: v for c in chains if (v := self.chain_reinject_in(c))}

    def _instance_rules(self, p: Program, chain: str, vlan: int, worker: str,
                        port: Callable[[str], int] | None = None) -> list[Rule]:
        """An instance's own rules: the ingress's tagged re-injections and in-band frames in, the
        flow moves' in-band frames back to the ingress, its return traffic out (through the
        chain's after-server switch NFs, if it has any)."""
        port, trunk = port or self.switch.port, self.trunk(worker)
        rules = [instance_reinject_rule(port, self.opts.ingress_port, trunk, chain, vlan, p.first_pre),
                 instance_inband_rule(port, self.opts.ingress_port, trunk, chain, vlan),
                 instance_move_return_rule(port, trunk, self.opts.ingress_port, chain, vlan)]
        if p.first_post is not None:
            rules.append(return_rule(port, trunk, self.opts.egress_port, chain, vlan, p.first_post))
        return rules

    def reconcile(self) -> None:
        """Install missing base/program/return rules; once synced with the gateway, delete
        program and return rules (and flows of chains) nobody wants any more."""
        if self.switch.dp is None:
            return
        desired = self._desired()
        want = {r.key for r in desired}
        with self._lock:
            adds = [r for r in desired if r.key not in self._installed]
            stale = [k for k in self._installed if self._synced and k not in want
                     and cookie_kind(k[2]) in _PROGRAM_KINDS]
            live_tags = {chain_tag(c) for c in self._chains}
            dead_tags = {cookie_tag(f.cookie) for f in self._flows.values()} - live_tags \
                if self._synced and self.opts.has_gateway else set()
        if dead_tags:
            for t in dead_tags:
                self._delete_chain(t)
        if not adds and not stale:
            return
        self.switch.commit(lambda dp: [ofp.delete_cookie(dp, k[2], ~0 & (2**64 - 1)) for k in stale]
                           + [ofp.add(dp, r) for r in adds])
        with self._lock:
            self._installed.difference_update(stale)
            self._installed.update(r.key for r in adds)
        LOG.info("reconciled: %d rules added, %d removed", len(adds), len(stale))

    def _reconcile_if_synced(self) -> None:
        if self._synced or not self.opts.has_gateway:
            self.reconcile()

    def _reinstall_gateway_flows(self) -> None:
        if not self.opts.has_gateway:
            return
        missing = [a for a in self.list_gateway_flows() if not self._has_stage2(a.flow)]
        failed = 0
        for i in range(0, len(missing), self.REINSTALL_BATCH):  # a few barriers, not one per flow
            chunk = missing[i:i + self.REINSTALL_BATCH]
            for a, res in zip(chunk, self.install_many([(a, 0, False) for a in chunk])):
                if isinstance(res, Exception):  # one bad flow must not stop the others
                    failed += 1
                    LOG.warning("re-installing %s failed: %s", a.flow, res)
        LOG.info("re-installed %d flows from the gateway (%d failed)", len(missing) - failed, failed)

    REINSTALL_BATCH = 512

    def _has_stage2(self, flow: FiveTuple) -> bool:
        with self._lock:
            f = self._flows.get(flow)
            return f is not None and f.stage2

    def _delete_chain(self, tag: int) -> None:
        """Delete every rule of a chain (program, return rules, flows) by its cookie tag."""
        kinds = (KIND_PROGRAM, KIND_RETURN, KIND_INSTANCE_REINJECT, KIND_CHAIN_REINJECT, KIND_FLOW, KIND_REINJECT)
        if self.switch.dp is not None:
            self.switch.commit(lambda dp: [ofp.delete_cookie(dp, cookie(k, tag), KIND_MASK | TAG_MASK)
                                           for k in kinds])
        with self._lock:
            self._installed = {k for k in self._installed if cookie_tag(k[2]) != tag
                               or cookie_kind(k[2]) == KIND_BASE}
            self._flows = {t: f for t, f in self._flows.items() if cookie_tag(f.cookie) != tag}

    def _delete_instance(self, tag: int, vlan: int) -> None:
        full = 2**64 - 1
        cookies = [cookie(k, tag, vlan) for k in (KIND_RETURN, KIND_INSTANCE_REINJECT, KIND_FLOW, KIND_REINJECT)]
        if self.switch.dp is not None:
            self.switch.commit(lambda dp: [ofp.delete_cookie(dp, c, full) for c in cookies])
        with self._lock:
            self._installed = {k for k in self._installed if k[2] not in cookies}
            self._flows = {t: f for t, f in self._flows.items() if f.cookie not in cookies}

    # ----- flows -----

    def _program_for(self, chain: str) -> Program | None:
        with self._lock:
            p = self._chains.get(chain)
        if isinstance(p, ChainError):
            raise ChainError(f"chain {chain}: {p}")
        if p is None and self.opts.has_gateway:
            raise UnknownChain(f"chain {chain!r} is unknown to torctl (not in the gateway's Watch)")
        return p

    def install(self, a: Assignment, idle_timeout: int, reinject_only: bool) -> int:
        """Install a flow's rule (and its chain's program and instance rules if missing) and
        return its cookie once the switch's barrier reply confirms it."""
        cookie_or_error = self.install_many([(a, idle_timeout, reinject_only)])[0]
        if isinstance(cookie_or_error, Exception):
            raise cookie_or_error
        return cookie_or_error

    def install_many(self, flows: list[tuple[Assignment, int, bool]],
                     rules_out: list[Rule | None] | None = None) -> list[int | Exception]:
        """Install several flows' rules behind one barrier: per flow its cookie, or the
        exception that kept it out (a flow torctl cannot build fails alone; the switch
        refusing or losing the batch fails every flow in it). rules_out, if given, gets per
        flow the rule installed (None for a failed flow)."""
        results: list[int | Exception] = []
        rules: list[Rule] = []
        needed: dict[tuple[int, int, int], Rule] = {}
        built: list[tuple[int, Assignment, Rule, int, bool]] = []
        ports = self._port_lookup()
        for i, (a, idle_timeout, reinject_only) in enumerate(flows):
            try:
                a.flow.check()
                prog = self._program_for(a.chain)
                out = ports(self.trunk(a.worker)) if a.vlan else ports(self.opts.egress_port)
                ingress = ports(self.opts.ingress_port) if reinject_only else None
                idle = idle_timeout or self.opts.idle_timeout
                rule = flow_rule(a.flow, a.chain, a.vlan, out, prog.first_pre if prog else None, idle, ingress)
                extra = self._chain_rules(prog, a.chain, ports) if prog else []
                if prog and a.vlan:
                    extra += self._instance_rules(prog, a.chain, a.vlan, a.worker, ports)
            except Exception as e:  # noqa: BLE001 - this flow's own failure, reported for it alone
                results.append(e)
                continue
            results.append(rule.cookie)
            for r in extra:
                needed.setdefault(r.key, r)
            rules.append(rule)
            built.append((i, a, rule, idle, reinject_only))
        if not built:
            return results
        with self._lock:
            missing = [r for k, r in needed.items() if k not in self._installed]
        try:
            self.switch.commit(lambda dp: [ofp.add(dp, r) for r in missing + rules])
        except Exception as e:  # noqa: BLE001 - the batch's common fate
            for i, *_ in built:
                results[i] = e
            return results
        with self._lock:
            self._installed.update(r.key for r in missing)
            for _, a, rule, idle, reinject_only in built:
                self._record(a, rule.cookie, idle, reinject_only)
                self.installs += 1
        if rules_out is not None:
            rules_out[:] = [None] * len(results)
            for i, _, rule, _, _ in built:
                rules_out[i] = rule
        return results

    def _record(self, a: Assignment, c: int, idle: int, reinject_only: bool) -> bool:
        """Notes a flow's rule in torctl's record (lock held); True if the flow was new to it."""
        f = self._flows.get(a.flow)
        new = f is None or f.assignment != a
        if new:
            f = self._flows[a.flow] = Flow(a)
        f.stage1 |= reinject_only
        f.stage2 |= not reinject_only
        f.idle_timeout, f.cookie = idle, c
        return new

    def record(self, flows: list[tuple[Assignment, int, int]]) -> int:
        """Notes stage-2 rules keel-ingress wrote to the switch itself ((assignment, cookie,
        idle timeout) each) as if torctl had installed them; returns how many were new. A flow
        whose expiry torctl already reported (the ingress' note came late) is not noted: the
        record would keep a rule the switch no longer has."""
        n = 0
        with self._lock:
            for a, c, idle in flows:
                gone = self._expired_unknown.get(a.flow)
                if gone is not None and gone[0] == c:
                    continue
                n += self._record(a, c, idle, False)
                self.installs += 1
        self.metrics.recorded.inc(len(flows))
        return n

    def _port_lookup(self) -> Callable[[str], int]:
        """A port-name lookup over one read of the switch's ports (MissingPort if absent)."""
        names = self.switch.ports()

        def port(name: str) -> int:
            no = names.get(name)
            if no is None:
                raise MissingPort(f"the switch has no port named {name}")
            return no
        return port

    def remove(self, flow: FiveTuple) -> bool:
        """Delete a flow's rules (both stages); False if torctl had none."""
        with self._lock:
            known = self._flows.pop(flow, None) is not None
        m = flow.match()
        ingress = self.switch.port(self.opts.ingress_port)
        self.switch.commit(lambda dp: [ofp.delete_strict(dp, STEER_TABLE, PRIO_FLOW, m),
                                       ofp.delete_strict(dp, STEER_TABLE, PRIO_REINJECT,
                                                         (("in_port", ingress),) + m)])
        return known

    def list_installed(self) -> list[tuple[Assignment, Any]]:
        """The flow rules on the switch (read back), with their stats entries."""
        entries = self.switch.request(lambda dp: ofp.flow_stats_request(dp, _FLOW_KINDS_VALUE,
                                                                         _FLOW_KINDS_MASK))
        names = {no: name for name, no in self.switch.ports().items()}
        return [(self._assignment(e.cookie, ofp.match_fields(e.match), ofp.output_ports(e.instructions),
                                  names), e) for e in entries if e.table_id == STEER_TABLE]

    def list_known(self) -> list[Flow]:
        """The flows whose stage-2 rule torctl has on the switch by its own record (installs the
        switch acknowledged, less the removals it reported; read back whenever it connects)."""
        with self._lock:
            return [f for f in self._flows.values() if f.stage2]

    def flow_count(self) -> int:
        with self._lock:
            return sum(1 for f in self._flows.values() if f.stage2)

    # ----- flow expiry -----

    def flow_removed(self, msg: Any) -> None:
        """Publish a stage-2 rule's idle/hard timeout to every WatchFlowRemoved subscriber, or keep
        it for the next one while none watches (the gateway restarting)."""
        reasons = {0: "idle_timeout", 1: "hard_timeout"}
        if msg.reason not in reasons or cookie_kind(msg.cookie) != KIND_FLOW:
            return
        flow = FiveTuple.from_match(ofp.match_fields(msg.match))
        with self._lock:
            f = self._flows.pop(flow, None)
            if f is None:
                self._note_expired_unknown(flow, msg.cookie)
        if f is not None:
            a = f.assignment
        else:
            chain = self._chain_name(cookie_tag(msg.cookie))
            vlan = cookie_detail(msg.cookie)
            a = Assignment(flow, chain, self._instance_id(chain, vlan), vlan, "")
        self.metrics.flow_removed.labels(reasons[msg.reason]).inc()
        event = (a, reasons[msg.reason], msg.packet_count, msg.byte_count,
                 msg.duration_sec + msg.duration_nsec / 1e9)
        with self._lock:  # no watcher comes or goes meanwhile
            if not self._subscribers:
                self._keep_unsent([event])
            for q in list(self._subscribers):
                if q.qsize() < self.WATCH_QUEUE:
                    q.put_nowait(event)
                    continue
                LOG.warning("a FlowRemoved watcher is too far behind; ending its stream")
                self.unsubscribe(q)
                if not self._subscribers:
                    self._keep_unsent([event])

    def _note_expired_unknown(self, flow: FiveTuple, c: int) -> None:
        """Remembers for a minute the expiry of a rule torctl had no record of (one that
        keel-ingress wrote and has not yet reported to RecordFlows); lock held."""
        now = time.monotonic()
        self._expired_unknown[flow] = (c, now)
        while len(self._expired_unknown) > self.MAX_EXPIRED_UNKNOWN or \
                next(iter(self._expired_unknown.values()))[1] < now - 60:
            self._expired_unknown.pop(next(iter(self._expired_unknown)))

    MAX_EXPIRED_UNKNOWN = 1 << 16

    # At most this many removals wait for a watcher (a switch's flow table's worth); beyond,
    # the oldest go and are counted: the gateway's flow reconciliation still finds them.
    MAX_UNSENT = 1 << 18
    # A watcher with this many removals queued (more than a full backlog handed to it at its
    # start) is too far behind: its stream ends, its removals wait for it to watch again.
    WATCH_QUEUE = 2 * MAX_UNSENT

    def _keep_unsent(self, events: list) -> None:
        with self._lock:
            self._unsent.extend(events)
            over = len(self._unsent) - self.MAX_UNSENT
            for _ in range(max(over, 0)):
                self._unsent.popleft()
        if over > 0:
            self.metrics.flow_removed_dropped.inc(over)

    def subscribe(self) -> queue.Queue:
        """A new watcher's queue: first the removals no watcher took, then each new one."""
        q: queue.Queue = queue.Queue()
        with self._lock:
            while self._unsent:
                q.put_nowait(self._unsent.popleft())
            self._subscribers.append(q)
        return q

    def unsubscribe(self, q: queue.Queue) -> None:
        """Ends a watcher; the removals left in its queue wait for the next one, unless another
        watcher has them too."""
        with self._lock:
            if q not in self._subscribers:
                return
            self._subscribers.remove(q)
            last = not self._subscribers
        left = []
        while True:
            try:
                left.append(q.get_nowait())
            except queue.Empty:
                break
        if last and left:
            self._keep_unsent(left)

    def subscribed(self, q: queue.Queue) -> bool:
        with self._lock:
            return q in self._subscribers
