// tsdn live map: draws the snapshot, then follows the controller's server-sent events.
// Self-contained (no frameworks, nothing fetched from elsewhere).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#ff6ad5", "#5ec8ff", "#ffb347", "#b388ff", "#4dd0b1", "#ff7a7a", "#f4f17a", "#7ab8ff",
                 "#c6ff7a", "#ff9fd2", "#9ef0ff", "#ffc98a"];
const HISTORY_SECONDS = 300;

const state = { topo: null, pos: {}, links: {}, reservations: {}, colors: {}, nextColor: 0, history: [] };

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function fmtBps(bps) {
  if (bps === null || bps === undefined) return "–";
  const units = [["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]];
  for (const [u, f] of units) if (Math.abs(bps) >= f) return (bps / f).toFixed(bps / f >= 100 ? 0 : 1) + " " + u + "b/s";
  return Math.round(bps) + " b/s";
}

function loadColor(fraction) {
  if (fraction === null || fraction === undefined) return "#3a4a6c";
  const f = Math.max(0, Math.min(1, fraction));
  return `hsl(${Math.round(120 * (1 - f))}, 88%, ${50 + 4 * Math.sin(Math.PI * f)}%)`;
}

function loadWidth(fraction) {
  return 2 + 10 * Math.max(0, Math.min(1, fraction || 0));
}

function colorFor(id) {
  if (!(id in state.colors)) state.colors[id] = PALETTE[state.nextColor++ % PALETTE.length];
  return state.colors[id];
}

// -- drawing the topology ---------------------------------------------------------------

function drawTopology(topo) {
  state.topo = topo;
  document.getElementById("topo-name").textContent = topo.name;
  document.title = "tsdn live map: " + topo.name;
  const map = document.getElementById("map");
  map.setAttribute("viewBox", `0 0 ${topo.width} ${topo.height}`);
  for (const id of ["sites", "links", "routes", "switches"]) document.getElementById(id).replaceChildren();
  state.pos = {};
  for (const s of topo.switches) state.pos[s.name] = [s.x, s.y];
  const sites = document.getElementById("sites");
  for (const site of topo.sites) {
    const r = site.switches.length > 1 ? 30 : 18;
    el("circle", { class: "site-dot", cx: site.x, cy: site.y, r }, sites);
    const label = el("text", { class: "site-label", x: site.x, y: site.y + r + 12, "text-anchor": "middle",
                               "data-site": site.name }, sites);
    label.textContent = site.name;
  }
  const links = document.getElementById("links");
  for (const link of topo.links) {
    const [x1, y1] = state.pos[link.a], [x2, y2] = state.pos[link.b];
    const g = el("g", { class: "link", "data-link": link.name, "data-state": "up", "data-a": link.a,
                        "data-b": link.b }, links);
    const title = el("title", {}, g);
    title.textContent = link.name;
    el("line", { class: "base", x1, y1, x2, y2, "stroke-width": 14 }, g);
    // one line per direction, side by side (a->b on the right of the a->b vector)
    const len = Math.hypot(x2 - x1, y2 - y1) || 1;
    const nx = -(y2 - y1) / len * 3.2, ny = (x2 - x1) / len * 3.2;
    el("line", { class: "dir", "data-dir": "ab", x1: x1 - nx, y1: y1 - ny, x2: x2 - nx, y2: y2 - ny,
                 stroke: loadColor(null), "stroke-width": 2 }, g);
    el("line", { class: "dir", "data-dir": "ba", x1: x1 + nx, y1: y1 + ny, x2: x2 + nx, y2: y2 + ny,
                 stroke: loadColor(null), "stroke-width": 2 }, g);
    // the congested directions' load, shown only while the controller judges one congested
    el("text", { class: "congestion-label", x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 12, "text-anchor": "middle" }, g);
  }
  const switches = document.getElementById("switches");
  for (const s of topo.switches) {
    const c = el("circle", { class: "switch", cx: s.x, cy: s.y, r: 8, "data-switch": s.name }, switches);
    const t = el("title", {}, c);
    t.textContent = `${s.name} (dpid ${s.dpid})${s.description ? ": " + s.description : ""}`;
    const label = el("text", { class: "switch-label", x: s.x + 10, y: s.y - 9 }, switches);
    label.textContent = s.name;
  }
}

function updateLinks(links) {
  for (const link of links) {
    state.links[link.name] = link;
    const g = document.querySelector(`g.link[data-link="${CSS.escape(link.name)}"]`);
    if (!g) continue;
    g.setAttribute("data-state", link.state);
    g.setAttribute("data-fraction", link.fraction);
    g.setAttribute("data-congested", link.congested ? "1" : "0");
    const label = g.querySelector("text.congestion-label");
    if (label) label.textContent = link.congested ? link.congestion : "";
    const parts = [];
    for (const d of link.directions) {
      const which = d.src === link.a ? "ab" : "ba";
      const line = g.querySelector(`line.dir[data-dir="${which}"]`);
      if (line) {
        line.setAttribute("stroke", loadColor(d.fraction));
        line.setAttribute("stroke-width", loadWidth(d.fraction));
        line.setAttribute("data-direction", d.id);
        line.setAttribute("data-congested", d.congested ? "1" : "0");
      }
      parts.push(`${d.src}→${d.dst}: ${fmtBps(d.nominal_bps)} of ${fmtBps(d.capacity_bps)}` +
                 (d.fraction === null ? "" : ` (${(100 * d.fraction).toFixed(1)}%)`) +
                 (d.congested ? `, CONGESTED: ${d.congestion.text}` : ""));
    }
    g.querySelector("title").textContent = `${link.name} [${link.state}]${link.reason ? " " + link.reason : ""}\n` +
      parts.join("\n");
  }
}

function routePoints(r, offset) {
  const pts = r.switches.map((s) => state.pos[s]).filter(Boolean);
  if (pts.length === 1) return `${pts[0][0]},${pts[0][1]}`;
  // shift each segment sideways so that several routes over one link stay visible
  const out = [];
  for (let i = 0; i < pts.length; i++) {
    const a = pts[Math.max(0, i - 1)], b = pts[Math.min(pts.length - 1, i + 1)];
    const len = Math.hypot(b[0] - a[0], b[1] - a[1]) || 1;
    const nx = -(b[1] - a[1]) / len * offset, ny = (b[0] - a[0]) / len * offset;
    out.push(`${(pts[i][0] + nx).toFixed(1)},${(pts[i][1] + ny).toFixed(1)}`);
  }
  return out.join(" ");
}

function drawReservations() {
  const layer = document.getElementById("routes");
  const legend = document.getElementById("legend");
  const list = Object.values(state.reservations).sort((a, b) => (a.id < b.id ? -1 : 1));
  const keep = new Set(list.map((r) => r.id));
  for (const node of [...layer.children]) if (!keep.has(node.getAttribute("data-reservation"))) node.remove();
  legend.replaceChildren();
  let reserved = 0;
  list.forEach((r, i) => {
    const color = colorFor(r.id);
    let line = layer.querySelector(`polyline[data-reservation="${r.id}"]`);
    if (!line) line = el("polyline", { class: "route", "data-reservation": r.id, stroke: color }, layer);
    line.setAttribute("points", routePoints(r, 9 + 4 * (i % 4)));
    line.setAttribute("data-path", r.switches.join(" "));
    line.setAttribute("data-links", r.links.join(" "));
    line.setAttribute("data-state", r.state);
    const li = document.createElement("li");
    li.setAttribute("data-reservation", r.id);
    li.innerHTML = `<span class="swatch" style="background:${color}"></span>` +
      `<span class="who"></span><span class="state"></span><div class="terms"></div><div class="why"></div>`;
    li.querySelector(".who").textContent = `${r.src}→${r.dst} ${r.share} via ${r.switches.join("›")}`;
    li.querySelector(".terms").textContent = r.terms;  // priority, floor, ceiling and share now
    li.setAttribute("data-share-bps", r.share_bps);
    li.querySelector(".state").textContent = r.state;
    // why it is where it is: its last move's reason, and a rerouting verdict that keeps it there
    const why = [];
    if (r.last_move) {
      why.push(`moved ${new Date(r.last_move.time * 1000).toLocaleTimeString()} (${r.last_move.cause}): ` +
               r.last_move.reason);
      li.setAttribute("data-move-cause", r.last_move.cause);
    }
    li.setAttribute("data-verdict", r.verdict || "");  // the typed decision of its last change
    if (r.verdict && r.verdict !== "moved" && r.reason !== (r.last_move && r.last_move.reason)) {
      why.push(`${r.verdict === "rearranged" ? "rearranging" : "not moved (" + r.verdict + ")"}: ${r.reason}`);
    }
    li.querySelector(".why").textContent = why.join("\n");
    li.title = r.reason || "";
    line.replaceChildren();
    el("title", {}, line).textContent = `${r.src}→${r.dst} ${r.bandwidth} [${r.state}]` +
      (why.length ? "\n" + why.join("\n") : r.reason ? "\n" + r.reason : "");
    legend.appendChild(li);
    if (["ACTIVE", "MOVING", "DEGRADED"].includes(r.state)) reserved += r.share_bps;
  });
  if (!list.length) legend.innerHTML = '<li class="empty">no live reservations</li>';
  document.getElementById("reserved").textContent = fmtBps(reserved);
}

// -- events feed ------------------------------------------------------------------------

function addEvent(ev) {
  const feed = document.getElementById("events");
  const li = document.createElement("li");
  li.className = ev.verb || ev.kind;
  li.setAttribute("data-kind", ev.kind);
  const t = document.createElement("time");
  t.textContent = new Date(ev.time * 1000).toLocaleTimeString();
  li.appendChild(t);
  li.appendChild(document.createTextNode(ev.text));
  feed.prepend(li);
  while (feed.children.length > 150) feed.lastChild.remove();
}

// -- throughput chart -------------------------------------------------------------------

function drawChart() {
  const w = 400, h = 170, top = 14, bottom = 16;
  const now = Date.now() / 1000;
  const pts = state.history.filter((p) => p.time >= now - HISTORY_SECONDS);
  state.history = pts;
  const peak = Math.max(1, ...pts.map((p) => Math.max(p.measured_bps, p.reserved_bps)));
  const x = (t) => ((t - (now - HISTORY_SECONDS)) / HISTORY_SECONDS) * w;
  const y = (v) => h - bottom - (v / peak) * (h - top - bottom);
  document.getElementById("chart-measured").setAttribute("points",
    pts.map((p) => `${x(p.time).toFixed(1)},${y(p.measured_bps).toFixed(1)}`).join(" "));
  document.getElementById("chart-reserved").setAttribute("points",
    pts.map((p) => `${x(p.time).toFixed(1)},${y(p.reserved_bps).toFixed(1)}`).join(" "));
  const grid = document.getElementById("chart-grid");
  grid.replaceChildren();
  for (const f of [0, 0.5, 1]) {
    el("line", { x1: 0, x2: w, y1: y(peak * f), y2: y(peak * f) }, grid);
    const label = el("text", { x: 4, y: y(peak * f) - 2 }, grid);
    label.textContent = fmtBps(peak * f);
  }
  const label = el("text", { x: w - 4, y: h - 3, "text-anchor": "end" }, grid);
  label.textContent = "now";
  const first = el("text", { x: 4, y: h - 3 }, grid);
  first.textContent = "−5 min";
}

function addThroughput(point) {
  state.history.push(point);
  document.getElementById("total").textContent = fmtBps(point.measured_bps);
  drawChart();
}

// -- the feed ---------------------------------------------------------------------------

function drawCongestion(list) {
  const ul = document.getElementById("congestion");
  ul.replaceChildren();
  for (const c of list || []) {
    const li = document.createElement("li");
    li.setAttribute("data-direction", c.id);
    li.textContent = `${c.id}: ${c.text}`;
    ul.appendChild(li);
  }
  if (!ul.children.length) ul.innerHTML = '<li class="empty">no congested link</li>';
}

function setReservations(list) {
  state.reservations = {};
  for (const r of list) state.reservations[r.id] = r;
  drawReservations();
}

function onSnapshot(snap) {
  drawTopology(snap.topology);
  updateLinks(snap.links);
  drawCongestion(snap.congested);
  setReservations(snap.reservations);
  document.getElementById("events").replaceChildren();
  for (const ev of snap.events) addEvent(ev);
  state.history = snap.throughput.slice();
  if (state.history.length) addThroughput(state.history.pop()); else drawChart();
  document.body.setAttribute("data-ready", "1");
}

function connect() {
  const status = document.getElementById("status");
  const source = new EventSource("/api/events");
  source.addEventListener("open", () => { status.textContent = "live"; status.className = "status live"; });
  source.addEventListener("error", () => { status.textContent = "reconnecting…"; status.className = "status connecting"; });
  source.addEventListener("snapshot", (e) => onSnapshot(JSON.parse(e.data)));
  source.addEventListener("tick", (e) => {
    const tick = JSON.parse(e.data);
    updateLinks(tick.links);
    drawCongestion(tick.congested);
    setReservations(tick.reservations);
    addThroughput(tick.throughput);
  });
  source.addEventListener("reservation", (e) => {
    const msg = JSON.parse(e.data);
    addEvent(msg.event);
    const r = msg.reservation;
    if (["RELEASED", "EXPIRED", "FAILED"].includes(r.state)) delete state.reservations[r.id];
    else state.reservations[r.id] = r;
    drawReservations();
  });
  source.addEventListener("link", (e) => {
    const ev = JSON.parse(e.data);
    addEvent(ev);
    const g = document.querySelector(`g.link[data-link="${CSS.escape(ev.link)}"]`);
    if (g) g.setAttribute("data-state", ev.up ? "up" : "down");
  });
}

connect();
