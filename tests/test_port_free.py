# SPDX-License-Identifier: Apache-2.0
"""deploy/lib/port_free.py, make up's check before it starts a server on a port: a listener
fails it at once; a client connection in TIME-WAIT on the port (which makes the server's bind
fail) is waited out; a server's own closed connections (which do not) are not waited for.
All sockets are on 127.0.0.1 and closed by the test."""
import socket
import subprocess
import sys
import time

import pytest

from keelenv import ROOT

PORT_FREE = ROOT / "deploy" / "lib" / "port_free.py"


def port_free(port: int, wait: float) -> tuple[int, str, float]:
    t = time.monotonic()
    r = subprocess.run([sys.executable, str(PORT_FREE), f"127.0.0.1:{port}", "--wait", str(wait)],
                       capture_output=True, text=True, timeout=wait + 30)
    return r.returncode, r.stderr, time.monotonic() - t


@pytest.fixture
def listener():
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s


def time_wait_on_client_port(listener: socket.socket) -> int:
    """Connects to listener from an ephemeral port and closes the client side first, leaving
    that port in TIME-WAIT (60 s) as another program's connection would."""
    c = socket.create_connection(listener.getsockname())
    port = c.getsockname()[1]
    a, _ = listener.accept()
    c.close()
    time.sleep(0.05)
    a.close()
    return port


def test_a_free_port_passes_at_once(listener):
    port = listener.getsockname()[1]
    listener.close()
    rc, err, took = port_free(port, wait=5)
    assert rc == 0, err
    assert took < 3


def test_another_listener_fails_at_once_and_is_named(listener):
    port = listener.getsockname()[1]
    rc, err, took = port_free(port, wait=5)
    assert rc == 1
    assert f"127.0.0.1:{port} is taken by another process" in err
    assert took < 3


def test_a_client_connection_in_time_wait_on_the_port_is_waited_for(listener):
    port = time_wait_on_client_port(listener)
    with socket.socket() as s:  # what the server will meet: its bind fails
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with pytest.raises(OSError, match="Address already in use"):
            s.bind(("127.0.0.1", port))
    rc, err, took = port_free(port, wait=1.5)
    assert rc == 2, err
    assert "TIME-WAIT" in err and "still cannot be bound after 1.5 s" in err
    assert took >= 1.4


def test_a_servers_own_closed_connections_are_not_waited_for():
    """After make down killed Redis its accepted connections sit in TIME-WAIT on 6379; a new
    Redis binds there anyway (both sockets SO_REUSEADDR), so make up must not wait."""
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        c = socket.create_connection(("127.0.0.1", port))
        a, _ = srv.accept()
        a.close()  # the server closes first: its side goes to TIME-WAIT
        time.sleep(0.05)
        c.close()
    rc, err, took = port_free(port, wait=5)
    assert rc == 0, err
    assert took < 3


def test_a_malformed_address_is_refused():
    r = subprocess.run([sys.executable, str(PORT_FREE), "localhost"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "is not HOST:PORT" in r.stderr
