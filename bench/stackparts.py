# SPDX-License-Identifier: Apache-2.0
"""The local stack for benchmarks: bringing it up with faas-cli logged in (local_stack), and
restarting one of its parts with other flags (restart), to compare two settings of a part side
by side on the same stack."""
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "run"
GATEWAY = "http://127.0.0.1:8080"
FAAS_CLI = os.environ.get("FAAS_CLI") or str(ROOT.parent / "shared" / "tools" / "faas-cli")


def wait_until(what: str, timeout: float, fn) -> None:
    deadline = time.time() + timeout
    while not fn():
        if time.time() > deadline:
            sys.exit(f"{Path(sys.argv[0]).name}: {what} within {timeout:.0f} s")
        time.sleep(0.2)


def restart(part: str, ready, extra: list[str] = (), remove: list[str] = ()) -> None:
    """Stops `part` (run/PART.pid) and starts it again with the arguments it had, less the
    flags in `remove` (as --flag=value or --flag value) and with `extra` first after the
    program; its log (run/PART.log) goes on, its CPU affinity stays. Waits until ready()."""
    pid_file = RUN / f"{part}.pid"
    pid = int(pid_file.read_text())
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")]
    kept, skip = [argv[0]], False
    for a in argv[1:]:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in remove:
            skip = "=" not in a
            continue
        kept.append(a)
    cpus = os.sched_getaffinity(pid)
    os.kill(pid, signal.SIGTERM)

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True
    wait_until(f"{part} (pid {pid}) did not stop", 30, gone)
    with open(RUN / f"{part}.log", "ab") as log:
        p = subprocess.Popen([kept[0], *extra, *kept[1:]], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                             start_new_session=True, preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    pid_file.write_text(f"{p.pid}\n")
    wait_until(f"{part} was not ready again", 60, ready)


@contextlib.contextmanager
def local_stack(name: str):
    """The local stack for benchmark `name`: make up (deploy/local/up.sh), faas-cli logged in
    (HOME=run/faas-home); make down at the end only if it was not up before. Needs root."""
    if os.geteuid() != 0:
        sys.exit(f"{name}: needs root (make up, network namespaces)")
    was_up = (RUN / "keel-agent.pid").exists() and (RUN / "keel-gateway.pid").exists()
    subprocess.run([str(ROOT / "deploy" / "local" / "up.sh")], capture_output=True, text=True, check=True,
                   timeout=900)
    try:
        password = (RUN / "secrets" / "basic-auth-password").read_text().strip()
        env = {**os.environ, "HOME": str(RUN / "faas-home")}
        subprocess.run([FAAS_CLI, "login", "-g", GATEWAY, "-u", "admin", "--password-stdin"], input=password,
                       capture_output=True, text=True, env=env, timeout=30, check=True)
        yield
    finally:
        if not was_up:
            subprocess.run([str(ROOT / "deploy" / "local" / "down.sh")], capture_output=True, timeout=300)
