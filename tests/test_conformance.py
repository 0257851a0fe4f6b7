# SPDX-License-Identifier: Apache-2.0
"""OpenFaaS conformance: the Go tests of tests/conformance run against a real keel-gateway
whose functions are real Docker containers in the test's private dockerd. Their images,
keel/test-watchdog and keel/test-redirector, are built by tests/conformance/images.sh from
this machine's files (no registry)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gateway_fixtures import ROOT, control_token, docker_engine, gateway, placer_addr, redis_addr  # noqa: F401  (fixtures)

WATCHDOG_IMAGE = "keel/test-watchdog:latest"
REDIRECTOR_IMAGE = "keel/test-redirector:latest"
GO = shutil.which("go") or "/usr/local/go/bin/go"


@pytest.fixture(scope="module")
def conformance_images(docker_engine):
    """keel/test-watchdog and keel/test-redirector in the module's dockerd."""
    if not Path(GO).exists():
        pytest.fail(f"no go toolchain ({GO})")
    p = subprocess.run([str(ROOT / "tests" / "conformance" / "images.sh"), docker_engine.host],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"images.sh failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    for image in (WATCHDOG_IMAGE, REDIRECTOR_IMAGE):
        docker_engine.cli("image", "inspect", image)
    return p.stdout


def test_openfaas_conformance(gateway, docker_engine, conformance_images):
    env = {**os.environ,
           "PATH": os.environ.get("PATH", "") + os.pathsep + str(Path(GO).parent),
           "KEEL_CONFORMANCE_GATEWAY": gateway.url,
           "KEEL_CONFORMANCE_PASSWORD": gateway.password(),
           "KEEL_CONFORMANCE_DOCKER": docker_engine.host,
           "KEEL_CONFORMANCE_WATCHDOG_IMAGE": WATCHDOG_IMAGE,
           "KEEL_CONFORMANCE_REDIRECTOR_IMAGE": REDIRECTOR_IMAGE}
    p = subprocess.run([GO, "test", "-count=1", "-v", "-timeout", "15m", "./tests/conformance/"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=20 * 60)
    out = p.stdout + p.stderr
    gw_log = gateway.log.read_text()[-4000:] if gateway.log.exists() else ""
    print(out)  # shown whole by pytest when the test fails
    if p.returncode != 0 or "--- FAIL" in out:
        print("--- keel-gateway log (tail):\n" + gw_log)
    assert p.returncode == 0, f"go test exited with {p.returncode} (its output is under Captured stdout)"
    assert "--- FAIL" not in out, "a Go test failed (see Captured stdout)"
    # a Go test that skips (e.g. it lost its environment) must not pass silently
    assert "--- SKIP" not in out, "a Go test skipped (see Captured stdout)"
    assert "--- PASS" in out, "no Go test passed (see Captured stdout)"
