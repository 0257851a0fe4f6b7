# SPDX-License-Identifier: Apache-2.0
"""The operator's view with every part real (`make up`): stack.yml's three chains deployed
with faas-cli, flows to each chain's prefix through the ToR, and

- the dashboard at /ui/ in headless Chromium (Debian's chromium and chromium-driver, driven
  by selenium), logged in with the gateway's basic auth: the three chains appear, chains 2
  and 3 on their worker's core with a non-zero rate, chain 1 on the ToR switch with its
  flows, and the controller's attach decisions in the event list; a screenshot goes to
  bench/results/dashboard.png;
- /system/keel/topology, the JSON behind the page, with the same chains;
- Prometheus (make up starts it) scraping a keel metric of every component: gateway, agent,
  ingress and torctl."""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

from keelenv import ROOT
from keelstack import CHAINS, GATEWAY, RUN, SKIP_REASON, all_ready, faas, running_stack, wait_for

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "runs")

FLOWGEN = ROOT / "bench" / "flowgen.py"
PROMETHEUS = "http://127.0.0.1:9090"
SCREENSHOT = ROOT / "bench" / "results" / "dashboard.png"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
# Each chain's prefix and protocol (chain 2 serves HTTP only).
TRAFFIC = {"chain1": ("198.18.1.0/24", "udp"), "chain2": ("198.18.2.0/24", "tcp"), "chain3": ("198.18.3.0/24", "mix")}
TRAFFIC_SECONDS = 150


def browser_skip_reason() -> str:
    if not (CHROMIUM and CHROMEDRIVER):
        return "needs Debian's chromium and chromium-driver (make deps installs them)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium (tests/requirements.txt; make deps installs it)"
    return ""


def password() -> str:
    return (RUN / "secrets" / "basic-auth-password").read_text().strip()


def get_json(url: str, auth: bool = False):
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{password()}".encode()).decode())
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def topology() -> dict:
    return get_json(GATEWAY + "/system/keel/topology", auth=True)


@pytest.fixture(scope="module")
def stack():
    with running_stack():
        r = faas("deploy", "-f", "stack.yml", "--filter", "chain*")
        assert r.returncode == 0, r.stdout + r.stderr
        for c in ("chain2", "chain3"):
            wait_for(f"{c}'s pooled instance ready", lambda: all_ready(c), timeout=180)
        yield


@pytest.fixture(scope="module")
def traffic(stack):
    """Flows to every chain's prefix for TRAFFIC_SECONDS: ten new flows a second each, every
    flow 40 packets 50 ms apart, so each chain carries a steady rate while the page is read."""
    senders = []
    for i, (net, proto) in enumerate(TRAFFIC.values()):
        senders.append(subprocess.Popen(
            ["ip", "netns", "exec", "keelsrc", sys.executable, str(FLOWGEN), "send", "--dst-net", net,
             "--proto", proto, "--rate", "10", "--duration", str(TRAFFIC_SECONDS), "--packets", "40",
             "--gap-ms", "50", "--first-flow", str(100000 * (i + 1))],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    try:
        yield
    finally:
        for s in senders:
            s.kill()
            s.wait()


def rates_flowing(t: dict):
    """The chains as the topology shows them, once chains 2 and 3 have a core and a rate and
    chain 1 has flows on the switch."""
    ch = {c["name"]: c for c in t["chains"]}
    ok = (set(CHAINS) <= set(ch) and ch["chain1"]["switch_only"] and ch["chain1"]["flows"] > 0
          and all(ch[c]["cores"] and ch[c]["rate_pps"] > 0 for c in ("chain2", "chain3")))
    return ch if ok else None


def test_topology_json_shows_chains_on_cores_with_rates(traffic):
    ch = wait_for("chains 2 and 3 on a core with a rate, chain 1's flows on the switch",
                  lambda: rates_flowing(topology()), timeout=90, every=2)
    t = topology()
    sgroups = [sg for w in t["workers"] for core in w["cores"] for sg in core["sgroups"]]
    assert {sg["chain"] for sg in sgroups} >= {"chain2", "chain3"}, sgroups
    nat = next(sg for sg in sgroups if sg["chain"] == "chain3")
    # the instance runs the chain's server-placed NFs (the placer may keep the ACL on the switch)
    assert [n.lower() for n in nat["nfs"]] == [n.lower() for n in ch["chain3"]["server_nfs"]], (nat, ch["chain3"])
    assert nat["nfs"][-1].lower() == "nat" and nat["slo_p99_us"] == 100 and nat["batch"] >= 1, nat
    assert ch["chain2"]["slo"]["p99_us"] == 200, ch["chain2"]
    assert [n.lower() for n in ch["chain1"]["switch_nfs"]] == ["tunnel", "ipv4fwd"], ch["chain1"]
    attach = [d for d in t["decisions"] if d["kind"] == "attach" and d["chain"] in ("chain2", "chain3")]
    assert attach and all(d["reason"] in ("no_instance_under_threshold", "cold_start") for d in attach), t["decisions"]
    assert any(len(c["history"]) >= 2 for c in t["chains"]), "the gateway keeps no history"
    # and each instance's own, for its sparkline (issue 32)
    assert all(len(sg["history"]) >= 1 and "p99_us" in sg["history"][-1] for sg in sgroups), sgroups


@pytest.fixture(scope="module")
def browser(stack):
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="keel-chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        # Log in: the gateway's basic-auth credentials on every request the page makes.
        token = base64.b64encode(f"admin:{password()}".encode()).decode()
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": "Basic " + token}})
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


PAGE_STATE = """
const chains = {};
for (const c of document.querySelectorAll('[data-chain]')) {
  chains[c.dataset.chain] = {rate_pps: Number(c.dataset.ratePps), cores: Number(c.dataset.cores),
                             flows: Number(c.dataset.flows), text: c.innerText};
}
const sgroups = [...document.querySelectorAll('.core .sgroup')].map(s => ({
  core: s.closest('.core').dataset.core, chain: s.querySelector('.chain-name').textContent,
  rate: s.querySelector('dd.rate').textContent, spark: !!s.querySelector('.spark svg')}));
const kinds = [...document.querySelectorAll('#decisions tr[data-kind]')].map(r => r.dataset.kind);
return {updated: document.body.dataset.updated || '', status: document.getElementById('status').textContent,
        chains, sgroups, kinds};
"""


def test_dashboard_shows_chains_cores_rates_and_scale_events(browser, traffic):
    t0 = time.time()
    browser.get(GATEWAY + "/ui/")
    last = {}

    def shown():
        nonlocal last
        last = browser.execute_script(PAGE_STATE)
        ch = last["chains"]
        ok = (set(CHAINS) <= set(ch) and ch["chain1"]["flows"] > 0
              and all(ch[c]["cores"] >= 1 and ch[c]["rate_pps"] > 0 for c in ("chain2", "chain3"))
              and {s["chain"] for s in last["sgroups"]} >= {"chain2", "chain3"} and "attach" in last["kinds"])
        return last if ok else None

    state = wait_for("the page to show the three chains, their cores, rates and an attach", shown, timeout=90, every=1)
    print(f"dashboard complete {time.time() - t0:.1f}s after opening; status: {state['status']}")
    assert state["updated"], "the page never loaded the topology"
    assert "ToR switch" in state["chains"]["chain1"]["text"]
    assert all(s["core"].startswith("local:") for s in state["sgroups"]), state["sgroups"]
    # every attached instance of a chain with a latency SLO draws its p99 sparkline
    assert all(s["spark"] for s in state["sgroups"] if s["chain"] in ("chain2", "chain3")), state["sgroups"]
    # A readable screenshot of the whole page, beyond the window.
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 4000), "scale": 1}})
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.write_bytes(base64.b64decode(shot["data"]))
    assert SCREENSHOT.stat().st_size > 20_000


def prometheus_has(query: str):
    url = PROMETHEUS + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    r = get_json(url)
    return r["data"]["result"] if r.get("status") == "success" and r["data"]["result"] else None


def test_prometheus_scrapes_every_component(traffic):
    if not shutil.which("prometheus"):
        pytest.skip("needs Debian's prometheus (make deps installs it)")
    for job, metric in (("keel-gateway", "keel_gateway_chains"), ("keel-agent", "keel_agent_gateway_connected"),
                        ("keel-ingress", "keel_ingress_chains"), ("keel-torctl", "keel_torctl_switch_connected")):
        res = wait_for(f"Prometheus to have {metric} from {job}",
                       lambda: prometheus_has(f'{metric}{{job="{job}"}}'), timeout=60, every=1)
        assert float(res[0]["value"][1]) >= 1, (metric, res)
    up = prometheus_has("up")
    assert {r["metric"]["job"]: r["value"][1] for r in up} == {
        "keel-gateway": "1", "keel-agent": "1", "keel-ingress": "1", "keel-torctl": "1", "prometheus": "1"}, up
    # What Prometheus costs: its CPU time over 10 s of scraping the five targets every 5 s.
    pid = int((RUN / "prometheus.pid").read_text())

    def cpu_seconds() -> float:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    c0, t0 = cpu_seconds(), time.time()
    time.sleep(10)
    share = (cpu_seconds() - c0) / (time.time() - t0)
    print(f"prometheus: {100 * share:.1f} % of one core while scraping the stack every 5 s")
    assert share < 0.25, f"Prometheus takes {100 * share:.0f} % of a core"
    assert wait_for("Prometheus to have the controller's attach decisions and the flows assigned",
                    lambda: prometheus_has('keel_gateway_scale_decisions_total{kind="attach"}')
                    and prometheus_has('keel_gateway_flows_assigned_total{chain="chain3"}'), timeout=30, every=1)
