// The wanlab dashboard: the lab map, per-link throughput and queue over the last minutes,
// the arbiter's windows as a Gantt chart and a run's per-GPU progress, from the server's
// events (/events, one tick a second). Plain SVG, no library.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const HISTORY_S = 300;
  const WINDOW_S = 60;
  const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                  "#9c755f", "#bab0ac"];
  const KIND_COLORS = {activation: "#4e79a7", gradient: "#f28e2b", allreduce: "#e15759"};
  const query = new URLSearchParams(location.search);
  const token = query.get("token");
  const withToken = (url) => token ? url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token) : url;

  const series = new Map();  // "src>dst" -> [{t, mbit, queue}]
  let lab = null;
  let ticks = 0;

  function el(name, attrs, parent, text) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }
  function key(l) { return l.src + ">" + l.dst; }
  function colorOf(k) {
    const keys = [...series.keys()].sort();
    return COLORS[Math.max(0, keys.indexOf(k)) % COLORS.length];
  }

  // --- the map ---------------------------------------------------------------------------
  function drawMap(latest) {
    const svg = document.getElementById("map");
    clear(svg);
    if (!lab) return;
    const dcs = lab.dcs || [];
    const pos = {};
    dcs.forEach((dc, i) => {
      const a = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(1, dcs.length);
      pos[dc.name] = {x: 300 + 200 * Math.cos(a), y: 180 + 130 * Math.sin(a)};
    });
    const now = new Map((latest ? latest.links : []).map((l) => [key(l), l]));
    let drawn = 0;
    for (const l of lab.links || []) {
      const a = pos[l.src], b = pos[l.dst];
      if (!a || !b) continue;
      // The two directions side by side: offset each to its right.
      const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy) || 1;
      const ox = (-dy / len) * 7, oy = (dx / len) * 7;
      const live = now.get(key(l));
      const use = live && live.rate_mbit_s > 0 ? Math.min(1, live.mbit_s / live.rate_mbit_s) : 0;
      el("line", {x1: a.x + ox, y1: a.y + oy, x2: b.x + ox, y2: b.y + oy, stroke: use > 0.01 ? colorOf(key(l)) : "#ccc",
                  "stroke-width": 2 + 8 * use, "stroke-linecap": "round"}, svg);
      const mx = (a.x + b.x) / 2 + ox * 3, my = (a.y + b.y) / 2 + oy * 3;
      el("text", {x: mx, y: my, "text-anchor": "middle"}, svg,
         `${l.src}→${l.dst} ${live ? live.mbit_s.toFixed(1) : "0"} Mbit/s`);
      drawn++;
    }
    for (const dc of dcs) {
      const p = pos[dc.name];
      el("circle", {cx: p.x, cy: p.y, r: 26, fill: "#2b3a4a"}, svg);
      el("text", {x: p.x, y: p.y + 4, "text-anchor": "middle", style: "fill:#fff;font-weight:bold"}, svg, dc.name);
      const nodes = (dc.nodes || []).length;
      el("text", {x: p.x, y: p.y + 40, "text-anchor": "middle"}, svg, `${nodes} node${nodes === 1 ? "" : "s"}`);
    }
    svg.dataset.dcs = dcs.length;
    svg.dataset.links = drawn;
  }

  // --- line charts -------------------------------------------------------------------------
  function drawLines(id, field, legendId, unit) {
    const svg = document.getElementById(id);
    clear(svg);
    const W = +svg.viewBox.baseVal.width, H = +svg.viewBox.baseVal.height;
    const L = 60, R = 10, T = 10, B = 24;
    const tNow = Date.now() / 1000;
    let max = 0, points = 0;
    for (const pts of series.values()) for (const p of pts) max = Math.max(max, p[field]);
    const top = max > 0 ? max * 1.1 : 1;
    const x = (t) => L + ((t - (tNow - HISTORY_S)) / HISTORY_S) * (W - L - R);
    const y = (v) => H - B - (v / top) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      el("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid"}, svg);
      el("text", {x: L - 6, y: y(v) + 4, "text-anchor": "end"}, svg, v >= 100 ? v.toFixed(0) : v.toFixed(1));
    }
    for (let s = 0; s <= HISTORY_S; s += 60)
      el("text", {x: x(tNow - HISTORY_S + s), y: H - 6, "text-anchor": "middle"}, svg,
         s === HISTORY_S ? "now" : `-${(HISTORY_S - s) / 60} min`);
    el("line", {x1: L, x2: L, y1: T, y2: H - B, class: "axis"}, svg);
    el("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis"}, svg);
    const legend = document.getElementById(legendId);
    legend.innerHTML = "";
    for (const [k, pts] of [...series.entries()].sort()) {
      if (pts.length === 0) continue;
      const d = pts.map((p, i) => `${i ? "L" : "M"}${x(p.t).toFixed(1)},${y(p[field]).toFixed(1)}`).join("");
      el("path", {d, fill: "none", stroke: colorOf(k), "stroke-width": 1.8, "data-link": k}, svg);
      points += pts.filter((p) => p[field] > 0).length;
      const span = document.createElement("span");
      const last = pts[pts.length - 1][field];
      span.innerHTML = `<i style="background:${colorOf(k)}"></i>`;
      span.appendChild(document.createTextNode(`${k.replace(">", " → ")}: ${last.toFixed(1)} ${unit}`));
      legend.appendChild(span);
    }
    svg.dataset.points = points;  // samples above zero: what the test counts
    svg.dataset.max = max;
  }

  // --- windows Gantt -----------------------------------------------------------------------
  function drawGantt(tick) {
    const svg = document.getElementById("gantt");
    clear(svg);
    const W = +svg.viewBox.baseVal.width;
    const windows = tick.windows || [];
    const links = [...new Set((lab ? lab.links : []).map(key))].sort();
    for (const w of windows) if (!links.includes(key(w))) links.push(key(w));
    const rowH = 22, L = 90, R = 10, T = 6;
    const H = Math.max(60, T + rowH * links.length + 24);
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    let now = 0;
    for (const w of windows) now = Math.max(now, w.end_s === null ? w.start_s : w.end_s, w.start_s);
    if (tick.windows_now_s) now = tick.windows_now_s;
    const x = (t) => L + ((t - (now - WINDOW_S)) / WINDOW_S) * (W - L - R);
    links.forEach((k, i) => el("text", {x: L - 6, y: T + rowH * i + 15, "text-anchor": "end"}, svg,
                               k.replace(">", " → ")));
    let bars = 0;
    for (const w of windows) {
      const row = links.indexOf(key(w));
      const end = w.end_s === null ? now : w.end_s;
      if (end < now - WINDOW_S) continue;
      const x0 = Math.max(L, x(w.start_s)), x1 = Math.max(x0 + 1, x(end));
      el("rect", {x: x0, y: T + rowH * row + 3, width: x1 - x0, height: rowH - 6,
                  fill: w.revoked ? "#bab0ac" : (KIND_COLORS[w.kind] || "#9c755f"), "fill-opacity": 0.7,
                  stroke: w.end_s === null ? "#222" : "none"}, svg);
      bars++;
    }
    for (let s = 0; s <= WINDOW_S; s += 10)
      el("text", {x: x(now - WINDOW_S + s), y: H - 6, "text-anchor": "middle"}, svg,
         s === WINDOW_S ? "now" : `-${WINDOW_S - s} s`);
    if (windows.length === 0)
      el("text", {x: W / 2, y: T + 20, "text-anchor": "middle"}, svg,
         "no windows: no run, or its policy has none (fair)");
    svg.dataset.bars = bars;
  }

  // --- run progress ------------------------------------------------------------------------
  function drawRun(run) {
    const box = document.getElementById("run");
    const svg = document.getElementById("gpus");
    clear(svg);
    if (!run) {
      box.textContent = "no run in progress";
      svg.dataset.workers = 0;
      return;
    }
    box.textContent = `${run.id}: ${run.phase}, ${run.iterations_done} of ${run.iterations} iterations` +
                      (run.iteration_s !== null ? `, last iteration ${run.iteration_s.toFixed(3)} s` : "");
    const workers = run.workers || [];
    const W = 600, cols = Math.min(32, Math.max(1, workers.length)), cell = (W - 20) / cols;
    const rows = Math.ceil(workers.length / cols);
    svg.setAttribute("viewBox", `0 0 ${W} ${Math.max(40, rows * cell + 20)}`);
    workers.forEach((w, i) => {
      const cx = 10 + (i % cols) * cell, cy = 10 + Math.floor(i / cols) * cell;
      const frac = run.iterations > 0 ? Math.max(0, w.iteration + 1) / run.iterations : 0;
      el("rect", {x: cx, y: cy, width: cell - 2, height: cell - 2, fill: "#eee"}, svg);
      el("rect", {x: cx, y: cy + (cell - 2) * (1 - frac), width: cell - 2, height: (cell - 2) * frac,
                  fill: COLORS[w.stage % COLORS.length]}, svg);
      el("title", {}, svg.lastChild, `worker ${w.worker} (${w.dc}, stage ${w.stage}): iteration ${w.iteration + 1}`);
    });
    svg.dataset.workers = workers.length;
  }

  function onTick(tick) {
    const status = document.getElementById("status");
    if (tick.error) {
      status.dataset.state = "error";
      status.textContent = "controller: " + tick.error;
      return;
    }
    status.dataset.state = "live";
    status.textContent = "live";
    const t = tick.t || Date.now() / 1000;
    for (const l of tick.links || []) {
      const k = key(l);
      if (!series.has(k)) series.set(k, []);
      const pts = series.get(k);
      pts.push({t, mbit: l.mbit_s, queue: l.queue_packets});
      while (pts.length && pts[0].t < t - HISTORY_S) pts.shift();
    }
    ticks++;
    const counter = document.getElementById("ticks");
    counter.dataset.ticks = ticks;
    counter.textContent = `${ticks} updates`;
    drawMap(tick);
    drawLines("throughput", "mbit", "throughput-legend", "Mbit/s");
    drawLines("queue", "queue", "queue-legend", "packets");
    drawGantt(tick);
    drawRun(tick.run);
  }

  fetch(withToken("api/lab")).then((r) => r.json()).then((s) => {
    lab = s;
    document.getElementById("lab-name").textContent = s.name || s.lab || "";
    drawMap(null);
  }).catch((e) => {
    document.getElementById("status").textContent = "cannot read the lab: " + e;
  });
  const events = new EventSource(withToken("events"));
  events.addEventListener("tick", (e) => onTick(JSON.parse(e.data)));
  events.onerror = () => {
    const status = document.getElementById("status");
    status.dataset.state = "error";
    status.textContent = "reconnecting…";
  };
})();
