// SPDX-License-Identifier: Apache-2.0
// keel's operator page: polls /system/keel/topology every 2 s and draws the rack, each
// chain's recent history (hand-drawn SVG) and the controller's decisions.
"use strict";

const POLL_MS = 2000;
const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4d7c0f"];

// el builds an element; children are nodes or strings (always inserted as text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v;
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function color(chains, name) {
  const i = chains.findIndex((c) => c.name === name);
  return PALETTE[(i < 0 ? 0 : i) % PALETTE.length];
}

function gbps(v) {
  if (v >= 1) return v.toFixed(2) + " Gbps";
  if (v >= 0.001) return (v * 1000).toFixed(1) + " Mbps";
  return (v * 1e6).toFixed(0) + " kbps";
}

function pps(v) {
  return v >= 1000 ? (v / 1000).toFixed(1) + " kpps" : v.toFixed(0) + " pps";
}

function us(v) { return v.toFixed(1) + " µs"; }

function bar(value, mark, over) {
  const b = el("div", { class: "bar" });
  const scale = Math.max(1, value, mark || 0);
  b.append(el("div", { class: "fill" + (over ? " over" : ""), style: `width:${(100 * value / scale).toFixed(1)}%` }));
  if (mark > 0) b.append(el("div", { class: "mark", style: `left:${(100 * mark / scale).toFixed(1)}%`, title: "threshold" }));
  return b;
}

function kv(pairs) {
  const dl = el("dl", { class: "kv" });
  for (const [k, v, cls] of pairs) dl.append(el("dt", {}, k), el("dd", cls ? { class: cls } : {}, v));
  return dl;
}

function sgroupCard(sg, chains) {
  const slo = sg.slo_p99_us > 0 ? ` / server budget ${us(sg.server_budget_us)} (SLO ${us(sg.slo_p99_us)})` : " (no SLO)";
  const p99cls = sg.slo_p99_us > 0 && sg.p99_us > sg.server_budget_us ? "bad" : "ok";
  const card = el("div", { class: "sgroup", style: `border-left-color:${color(chains, sg.chain)}`, "data-instance": sg.instance },
    el("div", { class: "title" }, el("span", { class: "chain-name" }, sg.chain), el("span", {}, sg.instance)),
    el("div", { class: "nfs" }, sg.nfs.join(" → ") || "—"),
    kv([
      ["rate", `${gbps(sg.rate_gbps)} · ${pps(sg.rate_pps)}`, "rate"],
      ["load", `${sg.load.toFixed(2)} / threshold ${sg.threshold.toFixed(2)}${sg.overloaded ? " · overloaded" : ""}`, sg.overloaded ? "bad" : ""],
      ["VF refused", `${sg.vf_dropped} packets`, sg.vf_dropped > 0 ? "warn" : ""],
      ["NIC queue (NF's own figure)", `${sg.nf_reported_queue_len} packets`],
      ["batch", `${sg.batch} bursts/turn`],
      ["server p99 (measured)", (sg.p99_us > 0 ? us(sg.p99_us) : "not measured") + slo, sg.p99_us > 0 ? p99cls : ""],
      ["flows", String(sg.flows)],
      ["vlan · phase", `${sg.vlan} · ${sg.phase || "unseen"}`, sg.phase === "failed" ? "bad" : ""],
    ]),
    bar(sg.load, sg.threshold, sg.overloaded));
  if (sg.slo_p99_us > 0 && sg.history.length) {
    // its measured p99 over the view's window, against the server budget (a sparkline)
    const t1 = Date.parse(sg.history[sg.history.length - 1].t);
    const t0 = Math.min(Date.parse(sg.history[0].t), t1 - 60000);
    card.append(el("div", { class: "charts spark" }, chart("server p99", sg.history, "p99_us", us, sg.server_budget_us, t0, t1)));
  }
  if (sg.why) card.title = sg.why;
  return card;
}

function drawRack(t) {
  const rack = document.getElementById("rack");
  const workers = t.workers.map((w) => {
    const cores = w.cores.map((c) => el("div", { class: "core", "data-core": `${w.name}:${c.id}` },
      el("h4", {}, el("span", {}, `core ${c.id}`), el("span", { class: "hint" }, `load ${c.load.toFixed(2)} · ${c.sgroups.length} sgroup(s)`)),
      c.sgroups.length ? c.sgroups.map((sg) => sgroupCard(sg, t.chains)) : el("div", { class: "empty" }, "idle")));
    const pool = el("div", { class: "pool" }, "idle pool: ",
      w.pool.length ? w.pool.map((p) => el("span", { class: "chip", title: p.why || "" }, `${p.instance} (${p.phase || "unseen"})`)) : "none");
    return el("div", { class: "worker" }, el("h3", {}, `worker ${w.name}`),
      el("div", { class: "cores" }, cores.length ? cores : el("div", { class: "empty" }, "no managed core")), pool);
  });
  rack.replaceChildren(...(workers.length ? workers : [el("div", { class: "empty" }, "no worker registered")]));
}

// chart draws one series of a chain's history over the window, with an optional reference line.
function chart(label, history, key, fmt, ref, t0, t1) {
  const W = 200, H = 50;
  const vals = history.map((s) => s[key]);
  const top = Math.max(1e-9, ref || 0, ...vals) * 1.1;
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" });
  const span = Math.max(1, t1 - t0);
  const pts = history.map((p) => {
    const x = (W * (Date.parse(p.t) - t0)) / span;
    const y = H - (H * p[key]) / top;
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  if (ref > 0) {
    const y = (H - (H * ref) / top).toFixed(1);
    s.append(svg("line", { class: "slo", x1: 0, x2: W, y1: y, y2: y }));
  }
  if (pts.length) s.append(svg("polyline", { points: pts.join(" ") }));
  const last = vals.length ? fmt(vals[vals.length - 1]) : "—";
  return el("div", { class: "chart", "data-series": key },
    el("div", { class: "label" }, el("span", {}, label), el("span", {}, last)), s);
}

function drawChains(t) {
  const t1 = Date.parse(t.time);
  const cards = t.chains.map((c) => {
    const t0 = c.history.length ? Math.min(Date.parse(c.history[0].t), t1 - 60000) : t1 - 60000;
    const slo = c.slo.p99_us > 0 ? `p99 ≤ ${us(c.slo.p99_us)} (server budget ${us(c.server_budget_us)})` : "no latency bound";
    // No window measured yet (no attached instance, or no packet) is not a met budget.
    const met = c.slo.p99_us > 0 && (c.switch_only || c.p99_us === 0) ? el("span", {}, "p99 not measured")
      : c.slo_met ? el("span", { class: "ok" }, "server budget met") : el("span", { class: "bad" }, "server budget missed");
    const measured = c.switch_only || c.p99_us === 0 ? "— (not measured)"
      : `${us(c.p99_us)} (p50 ${us(c.p50_us)}, p99.9 ${us(c.p999_us)}; ${c.window_s.toFixed(1)} s window)`;
    const nfs = c.nfs.map((n) => el("span", { class: "nf" + (c.switch_nfs.includes(n) ? " switch" : ""),
      title: c.switch_nfs.includes(n) ? "on the ToR switch" : "on a server core" }, n));
    return el("div", { class: "chain", "data-chain": c.name, "data-rate-pps": c.rate_pps, "data-cores": c.cores.length,
      "data-flows": c.flows, style: `border-top:4px solid ${color(t.chains, c.name)}` },
      el("h3", {}, el("span", {}, c.name), met),
      el("div", { class: "spec" }, nfs, " · ", c.filter),
      kv([
        ["SLO", `${slo}, t_min ${gbps(c.slo.t_min_gbps)}${c.slo.t_max_gbps ? ", t_max " + gbps(c.slo.t_max_gbps) : ""}`],
        ["instances", c.switch_only ? "none: runs on the ToR switch" : `${c.attached} attached, ${c.pooled} pooled`],
        ["cores", c.cores.length ? c.cores.join(", ") : "none", "cores"],
        ["flows", String(c.flows)],
        ["rate", c.switch_only ? "— (on the switch; flows only)" : `${gbps(c.rate_gbps)} · ${pps(c.rate_pps)}`, "rate"],
        ["server p99 (measured)", measured, c.p99_us === 0 ? "" : c.slo_met ? "ok" : "bad"],
      ]),
      el("div", { class: "charts" },
        chart("rate", c.history, "rate_gbps", gbps, 0, t0, t1),
        chart("cores", c.history, "cores", (v) => String(v), 0, t0, t1),
        chart("server p99", c.history, "p99_us", us, c.server_budget_us, t0, t1)));
  });
  document.getElementById("chains").replaceChildren(...(cards.length ? cards : [el("div", { class: "empty" }, "no chain deployed")]));
}

function drawDecisions(t) {
  const rows = t.decisions.map((d) => el("tr", { "data-kind": d.kind },
    el("td", {}, new Date(d.time).toLocaleTimeString()),
    el("td", {}, el("span", { class: "kind " + d.kind }, d.kind)),
    el("td", {}, d.reason), el("td", {}, d.chain), el("td", {}, d.instance),
    el("td", {}, d.core >= 0 ? `${d.worker ? d.worker + ":" : ""}${d.core}` : "—"),
    el("td", { class: "what" }, d.text)));
  const body = document.querySelector("#decisions tbody");
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 7, class: "empty" }, "no decision yet"))]));
}

function drawTotals(t) {
  const s = t.totals;
  const item = (label, v, cls) => el("span", {}, label + " ", el("b", cls ? { class: cls } : {}, v));
  document.getElementById("totals").replaceChildren(
    item("chains", String(s.chains)),
    item("cores", `${s.cores_used}/${s.cores_managed}`),
    item("instances", `${s.instances_attached} attached · ${s.instances_pooled} pooled`),
    item("flows", String(s.flows)),
    item("rate", gbps(s.rate_gbps)),
    item("over SLO", String(s.chains_over_slo), s.chains_over_slo ? "bad" : ""));
}

async function poll() {
  const status = document.getElementById("status");
  try {
    // location.origin: a page opened as http://user:pass@host/ui/ must not fetch a URL with credentials.
    const r = await fetch(location.origin + "/system/keel/topology", { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
    const t = await r.json();
    drawTotals(t);
    drawRack(t);
    drawChains(t);
    drawDecisions(t);
    status.className = "status";
    status.textContent = "updated " + new Date(t.time).toLocaleTimeString();
    document.body.dataset.updated = t.time;
  } catch (e) {
    status.className = "status err";
    status.textContent = "topology: " + e.message;
  }
  setTimeout(poll, POLL_MS);
}

poll();
