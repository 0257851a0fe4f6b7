"""The switch connection: group-committed flow-mods behind one barrier, and request/replies.

os-ken's event handlers only hand messages to this object (deliver, connected, ...), which
never blocks in them; callers that wait (gRPC threads, the reconcile thread) wait here on
events a handler sets. Messages go out through the outbox: os-ken's datapath (its send queue
and semaphore are eventlet primitives of the hub's own OS thread) is only ever called from
the hub, by pump(), which a pipe wakes the moment another thread adds a message. Calling
send_msg from a gRPC or committer thread instead parks the wake-up of os-ken's send loop on
that thread's own (never running) hub, so a flow-mod waited for the hub to wake for something
else: that cost tens to hundreds of milliseconds per install. Group commit: every flow-mod pending when the committer thread wakes
goes out, then one barrier; each caller is answered when that barrier's reply arrives, so
the switch's round trip is paid once per batch, not once per install.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from os_ken.ofproto import ofproto_v1_3 as ofp

from . import ofp as msgs
from .metrics import Metrics
from .rules import MissingPort

LOG = logging.getLogger("keel_torctl.switch")


class Unavailable(RuntimeError):
    """The switch is not connected (or went away before answering)."""


class SwitchError(RuntimeError):
    """The switch refused a message (an OpenFlow error reply)."""


class _Waiter:
    """One outstanding request: set when its (last) reply or an error arrives. on_finish runs
    once, in the thread that finishes it (never blocking: os-ken's handlers finish waiters)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.replies: list[Any] = []
        self.error: Exception | None = None
        self.on_finish: Callable[[], None] | None = None
        self._once = threading.Lock()

    def finish(self, error: Exception | None = None) -> None:
        with self._once:
            if self.event.is_set():
                return
            self.error = self.error or error
            self.event.set()
        if self.on_finish:
            self.on_finish()

    def wait(self, timeout: float) -> list[Any]:
        if not self.event.wait(timeout):
            raise Unavailable(f"the switch did not answer within {timeout:.1f} s")
        if self.error:
            raise self.error
        return self.replies


@dataclass
class _Commit:
    """One caller's flow-mods in a batch."""

    build: Callable[[Any], list[Any]]  # datapath -> messages (built against the live datapath)
    xids: list[int] = field(default_factory=list)
    waiter: _Waiter = field(default_factory=_Waiter)


def _port_name(port: Any) -> str:
    name = port.name
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


class Switch:
    """The one switch torctl controls (its datapath while connected)."""

    MAX_IN_FLIGHT = 4  # batches sent whose barrier reply has not come yet

    def __init__(self, metrics: Metrics, timeout_s: float = 5.0, datapath_ids: frozenset[int] = frozenset()):
        self.metrics = metrics
        # The datapath IDs allowed to be the ToR (--datapath-id); empty: any.
        self.datapath_ids = datapath_ids
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._pending_cv = threading.Condition(self._lock)
        self._dp: Any = None
        self._waiters: dict[int, _Waiter] = {}
        self._errors: dict[int, str] = {}
        self._pending: list[_Commit] = []
        self._in_flight = threading.Semaphore(self.MAX_IN_FLIGHT)
        self._deadlines: dict[int, float] = {}  # barrier xid -> when to give up on it
        self._out_lock = threading.Lock()
        self._outbox: list[tuple[Any, Any]] = []  # (datapath, message) for pump() to send
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.on_connect: Callable[[], None] = lambda: None
        self.on_flow_removed: Callable[[Any], None] = lambda msg: None
        self.on_port_change: Callable[[], None] = lambda: None
        threading.Thread(target=self._commit_loop, name="torctl-commit", daemon=True).start()
        threading.Thread(target=self._reap_loop, name="torctl-reaper", daemon=True).start()

    # ----- called from os-ken's event handlers (never block) -----

    def connected(self, dp: Any) -> None:
        """The switch finished its handshake (features and port descriptions). A switch whose
        datapath ID is not pinned is refused: its connection is closed and the ToR, if
        connected, keeps its own."""
        if self.datapath_ids and dp.id not in self.datapath_ids:
            LOG.warning("refused switch %016x: not a --datapath-id (%s)", dp.id,
                        ", ".join(f"{d:016x}" for d in sorted(self.datapath_ids)))
            self.metrics.switch_refused.inc()
            dp.close()
            return
        with self._lock:
            self._dp = dp
        LOG.info("switch %016x connected", dp.id)
        self.metrics.connected(True)
        threading.Thread(target=self.on_connect, name="torctl-reconcile", daemon=True).start()

    def disconnected(self, dp: Any) -> None:
        """The switch's connection closed: fail every outstanding request."""
        with self._lock:
            if self._dp is not dp:
                return
            self._dp = None
            waiters, self._waiters = self._waiters, {}
            self._deadlines.clear()
        LOG.warning("switch %016x disconnected", dp.id)
        self.metrics.connected(False)
        for w in waiters.values():
            w.finish(Unavailable("the switch disconnected"))

    def deliver(self, msg: Any) -> None:
        """A barrier or multipart reply: finish its waiter (multipart: on the last part)."""
        with self._lock:
            w = self._waiters.get(msg.xid)
            if w is None:
                return
            if msg.msg_type == ofp.OFPT_MULTIPART_REPLY:
                w.replies.extend(msg.body)
                if msg.flags & ofp.OFPMPF_REPLY_MORE:
                    return
            del self._waiters[msg.xid]
            self._deadlines.pop(msg.xid, None)
        w.finish()

    def error(self, msg: Any) -> None:
        """An OpenFlow error: remembered for its request's batch, or fails its waiter."""
        text = f"OpenFlow error type {msg.type} code {msg.code}"
        LOG.warning("switch error for xid %d: %s", msg.xid, text)
        with self._lock:
            w = self._waiters.pop(msg.xid, None)
            if w is None:
                self._errors[msg.xid] = text
        if w is not None:
            w.finish(SwitchError(text))

    def flow_removed(self, msg: Any) -> None:
        self.on_flow_removed(msg)

    def port_changed(self) -> None:
        threading.Thread(target=self.on_port_change, name="torctl-ports", daemon=True).start()

    def pump(self) -> None:
        """Runs on os-ken's hub (a green thread TorApp spawns): sends what the other threads put
        in the outbox, in order, as soon as they wake it."""
        from eventlet.hubs import trampoline
        while True:
            trampoline(self._wake_r, read=True)
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            with self._out_lock:
                out, self._outbox = self._outbox, []
            for dp, msg in out:
                if dp is self._dp:  # not to a connection that closed meanwhile
                    dp.send_msg(msg)

    def _send(self, dp: Any, msg: Any) -> None:
        """Queue one message for pump() (its xid is set here, in the caller's order)."""
        if msg.xid is None:
            dp.set_xid(msg)
        with self._out_lock:
            first = not self._outbox
            self._outbox.append((dp, msg))
        if first:
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # the pipe is full of wake-ups: pump() is awake already

    # ----- called from any other thread -----

    @property
    def dp(self) -> Any:
        return self._dp

    def ports(self) -> dict[str, int]:
        """Port name -> OpenFlow port number, as the switch reported them."""
        dp = self._dp
        if dp is None:
            return {}
        return {_port_name(p): no for no, p in list(dp.ports.items()) if no < ofp.OFPP_MAX}

    def port(self, name: str) -> int:
        """The OpenFlow number of a port name; MissingPort if the switch has none such."""
        no = self.ports().get(name)
        if no is None:
            raise MissingPort(f"the switch has no port named {name}")
        return no

    def commit(self, build: Callable[[Any], list[Any]], timeout: float | None = None) -> None:
        """Send the flow-mods build(dp) returns and return once the switch's barrier reply says
        they are in; Unavailable if not connected, SwitchError if the switch refused one."""
        if self._dp is None:
            raise Unavailable("the switch is not connected")
        c = _Commit(build)
        with self._lock:
            self._pending.append(c)
            self._pending_cv.notify()
        c.waiter.wait(timeout or self.timeout_s)

    def request(self, build: Callable[[Any], Any], timeout: float | None = None) -> list[Any]:
        """Send one request (e.g. flow stats) and return its reply bodies."""
        w = _Waiter()
        with self._lock:
            dp = self._dp
            if dp is None:
                raise Unavailable("the switch is not connected")
            msg = build(dp)
            dp.set_xid(msg)
            self._waiters[msg.xid] = w
            self._send(dp, msg)
        return w.wait(timeout or self.timeout_s)

    def _commit_loop(self) -> None:
        while True:
            # At most MAX_IN_FLIGHT batches wait for their barrier: the switch reads the next
            # batch while it still works on the last one, so a slow barrier (OVS revalidating
            # its datapath flows after a table change) does not idle the connection.
            self._in_flight.acquire()
            with self._lock:
                while not self._pending:
                    self._pending_cv.wait()
                batch, self._pending = self._pending, []
            self._commit_batch(batch)

    def _commit_batch(self, batch: list[_Commit]) -> None:
        """Sends the batch's flow-mods and a barrier; the barrier's reply (or the connection's
        end) answers every caller of the batch and frees its in-flight slot."""
        start = time.monotonic()
        barrier = _Waiter()
        with self._lock:
            dp = self._dp
            if dp is None:
                for c in batch:
                    c.waiter.finish(Unavailable("the switch is not connected"))
                self._in_flight.release()
                return
            live = []
            for c in batch:
                try:
                    out = c.build(dp)
                except (MissingPort, ValueError) as e:
                    c.waiter.finish(e)
                    continue
                for m in out:
                    dp.set_xid(m)
                    c.xids.append(m.xid)
                    self._send(dp, m)
                live.append(c)
            b = msgs.barrier(dp)
            dp.set_xid(b)
            barrier.on_finish = lambda: self._batch_done(live, barrier, start)
            self._waiters[b.xid] = barrier
            self._deadlines[b.xid] = start + self.timeout_s
            self._send(dp, b)

    def _reap_loop(self) -> None:
        """Fails batches whose barrier reply is overdue (a switch that stopped answering)."""
        while True:
            time.sleep(0.25)
            now = time.monotonic()
            with self._lock:
                overdue = [x for x, t in self._deadlines.items() if t < now]
                waiters = [self._waiters.pop(x, None) for x in overdue]
                for x in overdue:
                    del self._deadlines[x]
            for w in waiters:
                if w is not None:
                    w.finish(Unavailable(f"the switch did not answer within {self.timeout_s:.1f} s"))

    def _batch_done(self, live: list[_Commit], barrier: _Waiter, start: float) -> None:
        self._in_flight.release()
        if barrier.error:
            for c in live:
                c.waiter.finish(barrier.error)
            return
        self.metrics.batch(len(live), time.monotonic() - start)
        with self._lock:
            errors = [[self._errors.pop(x) for x in c.xids if x in self._errors] for c in live]
        for c, errs in zip(live, errors):
            c.waiter.finish(SwitchError("; ".join(errs)) if errs else None)
