# SPDX-License-Identifier: Apache-2.0
"""Checks that a server can listen on HOST:PORT, the way make up's servers bind (SO_REUSEADDR),
and waits while a closed connection still holds the port (deploy/local/up.sh's port_free).

usage: python3 port_free.py HOST:PORT [--wait SECONDS]

Exit 0: a server can bind there now.
Exit 1: another process listens on the port (its ss line is printed); no waiting for that.
Exit 2: after SECONDS (default 65) the port still cannot be bound; the sockets holding it are
        printed.

Why the bind test: a connection in TIME-WAIT keeps its local port for 60 s. Whether it stops
a server from binding depends on how its socket was made, which ss does not show:
  - a connection a server accepted (Redis' own, after make down killed Redis) was made with
    SO_REUSEADDR and does not stop a server that sets it too;
  - a client's socket (another program's connection that got 50062 as its ephemeral port)
    was not, and does: the server fails with "Address already in use".
Binding, as the server will, tells the two apart.
"""
import argparse
import errno
import socket
import subprocess
import sys
import time


def can_bind(host: str, port: int) -> bool:
    """True if a SO_REUSEADDR listener can bind host:port now (it is closed at once)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return False
            raise
        return True


def ss(*args: str) -> str:
    try:
        return subprocess.run(["ss", "-Hn", *args], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("addr", metavar="HOST:PORT")
    ap.add_argument("--wait", type=float, default=65.0, metavar="SECONDS",
                    help="how long to wait for closed connections to let go of the port (default 65)")
    a = ap.parse_args()
    host, _, port_s = a.addr.rpartition(":")
    host = host.strip("[]")
    if not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        ap.error(f"{a.addr!r} is not HOST:PORT")
    port = int(port_s)

    deadline = time.monotonic() + a.wait
    said = False
    while True:
        if can_bind(host, port):
            return 0
        listener = ss("-ltp", "sport", f"= :{port}")
        if listener:
            print(f"{a.addr} is taken by another process: {listener}", file=sys.stderr)
            return 1
        holders = ss("-tap", "sport", f"= :{port}")
        if time.monotonic() >= deadline:
            print(f"{a.addr} still cannot be bound after {a.wait:g} s; it is held by:\n{holders or '(ss shows nothing)'}",
                  file=sys.stderr)
            return 2
        if not said:
            print(f"{a.addr}: a closed connection still holds the port (TIME-WAIT, up to 60 s); waiting:\n{holders}",
                  file=sys.stderr)
            said = True
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
