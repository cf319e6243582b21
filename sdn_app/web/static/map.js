// tsdn live map: draws the snapshot, then follows the controller's server-sent events.
// Self-contained (no frameworks, nothing fetched from elsewhere).
//
// sdn_app/web/layout.py places each switch in a pane: the show floor's ring or the WAN's area.
// Here the panes are fitted to the window by the same rules (layout.pane_rects, ring_frame,
// area_point), in screen pixels, so labels keep their size at any window size. Links between the
// same two switches are bowed apart and a link that would pass over a switch is bent around it,
// so each can be hovered on its own; every label goes where it covers no other label and no
// switch, or is hidden (the map then says how many, and hovering still names everything).
// Domains: the neighbouring domains' remote sites are points of the WAN's area ("remote:NAME" in
// state.pos), each joined to the switch of its interdomain port by a dashed edge that is not
// tsdn's; a reservation with a remote end draws that part of its route dotted, named by its NSI
// connection.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#ff6ad5", "#5ec8ff", "#ffb347", "#b388ff", "#4dd0b1", "#ff7a7a", "#f4f17a", "#7ab8ff",
                 "#c6ff7a", "#ff9fd2", "#9ef0ff", "#ffc98a"];
const HISTORY_SECONDS = 300;
const RADIUS = { hub: 12, booth: 10, wan: 8, free: 7, remote: 9 };  // a switch's circle, by its role in the layout
const PARALLEL_SPACING = 22;  // px between the middles of two links that join the same two switches
const CLEARANCE = 14;  // px a link keeps from the edge of a switch it does not end at
const LABEL_PAD = 3;  // px kept clear around every label

const state = { topo: null, pos: {}, radius: {}, geom: {}, links: {}, reservations: {}, colors: {}, nextColor: 0,
                history: [], size: [0, 0], track: {}, order: [], obstacles: null, soft: null, edges: [] };

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

function fmtCapacity(bps) {  // 1T, 400G, 100G, 2.5G: as topology files write them
  for (const [u, f] of [["T", 1e12], ["G", 1e9], ["M", 1e6]]) {
    if (bps >= f) return (Number.isInteger(bps / f) ? bps / f : (bps / f).toFixed(1)) + u;
  }
  return String(bps);
}

function loadColor(fraction) {
  if (fraction === null || fraction === undefined) return "#3a4a6c";
  const f = Math.max(0, Math.min(1, fraction));
  return `hsl(${Math.round(120 * (1 - f))}, 88%, ${50 + 4 * Math.sin(Math.PI * f)}%)`;
}

function colorFor(id) {
  if (!(id in state.colors)) state.colors[id] = PALETTE[state.nextColor++ % PALETTE.length];
  return state.colors[id];
}

// -- domains: remote sites and the interdomain edges to them -------------------------------------

function remoteKey(name) { return `remote:${name}`; }

function interdomainEdges(topo) {  // each interdomain port: an edge from its switch to each remote site beyond it
  const out = [];
  for (const port of topo.interdomain || []) {
    const sites = (topo.remote_sites || []).filter((s) => s.port === port.name);
    sites.forEach((site, i) => out.push({
      name: sites.length > 1 ? `${port.name}#${i + 1}` : port.name, a: port.switch, b: remoteKey(site.name),
      capacity_ab: port.capacity, capacity_ba: port.capacity, kind: "interdomain", port, site }));
  }
  return out;
}

function allLinks() { return state.topo.links.concat(state.edges); }  // tsdn's links, then the interdomain edges

function edgeTip(edge) {
  const p = edge.port;
  return `${edge.name} [interdomain: not tsdn's, requested over NSI]\n${p.switch}:${p.port} ↔ ${edge.site.name} ` +
    `(${p.domain_name})\nneighbour NSA ${p.peer_nsa}, STP ${p.peer_stp}\n${fmtCapacity(p.capacity)}, VLANs ${p.vlans}` +
    (edge.site.dtns.length ? `\nremote DTNs: ${edge.site.dtns.join(", ")}` : "");
}

// -- fitting the layout's panes to the window (layout.py: pane_rects, ring_frame, area_point) ----

function paneRects(rules, W, H) {
  const names = rules.panes.map((p) => p.name);
  if (names.join() !== "floor,wan") {
    const rects = {};
    for (const name of names) rects[name] = [0, 0, W, H];
    return { rects, toward: "right" };
  }
  const gap = rules.pane_gap;
  if (W >= H) {
    const wf = Math.min(rules.floor_share * W, rules.floor_aspect_max * H);
    if (rules.floor_side === "left") {
      return { rects: { floor: [0, 0, wf, H], wan: [wf + gap, 0, W - wf - gap, H] }, toward: "right" };
    }
    return { rects: { floor: [W - wf, 0, wf, H], wan: [0, 0, W - wf - gap, H] }, toward: "left" };
  }
  const hf = Math.min(rules.floor_share * H, rules.floor_aspect_max * W);
  return { rects: { floor: [0, 0, W, hf], wan: [0, hf + gap, W, H - hf - gap] }, toward: "below" };
}

function ringFrame(rect, toward, rules) {
  const [x, y, w, h] = rect;
  const r = Math.max(30, Math.min(w / 2 - rules.ring_margin[0], h / 2 - rules.ring_margin[1]));
  return { cx: x + w / 2, cy: y + h / 2, r, toward };
}

function ringPoint(u, v, f) {
  if (f.toward === "left") u = -u;
  else if (f.toward === "below") [u, v] = [-v, u];
  return [f.cx + u * f.r, f.cy + v * f.r];
}

function areaPoint(u, v, rect, rules) {
  const [x, y, w, h] = rect, [mx, my] = rules.area_margin;
  return [x + mx + u * Math.max(1, w - 2 * mx), y + my + v * Math.max(1, h - 2 * my)];
}

function placeSwitches(topo, W, H) {
  const rules = topo.layout;
  const { rects, toward } = paneRects(rules, W, H);
  const panes = {};
  for (const p of rules.panes) {
    panes[p.name] = { ...p, rect: rects[p.name], ring: p.kind === "ring" ? ringFrame(rects[p.name], toward, rules) : null };
  }
  const pos = {};
  const nodes = topo.switches.concat((topo.remote_sites || []).map((s) => ({ ...s, name: remoteKey(s.name) })));
  for (const s of nodes) {
    const pane = panes[s.pane];
    const [x, y] = pane.ring ? ringPoint(s.u, s.v, pane.ring) : areaPoint(s.u, s.v, pane.rect, rules);
    pos[s.name] = [x + s.dx, y + s.dy];
  }
  // a window smaller than the layout's picture: part switches that came too close (area panes only)
  const loose = nodes.filter((s) => !panes[s.pane].ring);
  for (let round = 0; round < 40; round++) {
    let moved = false;
    for (let i = 0; i < loose.length; i++) {
      for (let j = i + 1; j < loose.length; j++) {
        const a = pos[loose[i].name], b = pos[loose[j].name];
        const want = state.radius[loose[i].name] + state.radius[loose[j].name] + 12;
        let dx = b[0] - a[0], dy = b[1] - a[1];
        const d = Math.hypot(dx, dy);
        if (d >= want) continue;
        if (d < 1e-6) { dx = Math.cos(i + j); dy = Math.sin(i + j); } else { dx /= d; dy /= d; }
        const push = (want - d) / 2;
        a[0] -= dx * push; a[1] -= dy * push; b[0] += dx * push; b[1] += dy * push;
        moved = true;
      }
    }
    if (!moved) break;
  }
  for (const s of loose) {
    const [x, y, w, h] = panes[s.pane].rect, r = state.radius[s.name] + 2;
    pos[s.name] = [Math.min(x + w - r, Math.max(x + r, pos[s.name][0])), Math.min(y + h - r, Math.max(y + r, pos[s.name][1]))];
  }
  return { pos, panes };
}

// -- link geometry: chains of quadratic curves ----------------------------------------------
// A link's shape is { segs: [{ p0, c, p1 }, ...] } from its a to its b: one curve, or several for a
// long lane. A link between two booths that are not neighbours on the show floor's ring follows a
// lane inside the ring (its middle on a circle a little inside the booths'), so it passes no booth.

function rightNormal(p, q) {  // facing from p to q, the unit vector to the right (screen: y down)
  const dx = q[0] - p[0], dy = q[1] - p[1], len = Math.hypot(dx, dy) || 1;
  return [-dy / len, dx / len];
}

function segPoint(g, t) {
  const s = 1 - t;
  return [s * s * g.p0[0] + 2 * s * t * g.c[0] + t * t * g.p1[0], s * s * g.p0[1] + 2 * s * t * g.c[1] + t * t * g.p1[1]];
}

function segNormal(g, t) {  // to the right of travel from p0 to p1
  const s = 1 - t;
  let tx = 2 * s * (g.c[0] - g.p0[0]) + 2 * t * (g.p1[0] - g.c[0]);
  let ty = 2 * s * (g.c[1] - g.p0[1]) + 2 * t * (g.p1[1] - g.c[1]);
  if (Math.hypot(tx, ty) < 1e-6) { tx = g.p1[0] - g.p0[0]; ty = g.p1[1] - g.p0[1]; }
  const len = Math.hypot(tx, ty) || 1;
  return [-ty / len, tx / len];
}

function offsetSeg(g, o) {  // moved o px to the right of travel (a miter at the control point)
  const flat = Math.hypot(g.c[0] - (g.p0[0] + g.p1[0]) / 2, g.c[1] - (g.p0[1] + g.p1[1]) / 2) < 0.5;
  const n0 = flat ? rightNormal(g.p0, g.p1) : rightNormal(g.p0, g.c);
  const n1 = flat ? n0 : rightNormal(g.c, g.p1);
  const k = o / Math.max(0.3, 1 + n0[0] * n1[0] + n0[1] * n1[1]);
  return { p0: [g.p0[0] + o * n0[0], g.p0[1] + o * n0[1]], c: [g.c[0] + k * (n0[0] + n1[0]), g.c[1] + k * (n0[1] + n1[1])],
           p1: [g.p1[0] + o * n1[0], g.p1[1] + o * n1[1]] };
}

function curve(p0, c, p1) { return { segs: [{ p0, c, p1 }] }; }
function reversed(g) { return { segs: g.segs.slice().reverse().map((s) => ({ p0: s.p1, c: s.c, p1: s.p0 })) }; }
function offsetCurve(g, o) { return { segs: g.segs.map((s) => offsetSeg(s, o)) }; }

function curvePoint(g, t) {
  const n = g.segs.length, k = Math.min(n - 1, Math.floor(t * n));
  return segPoint(g.segs[k], t * n - k);
}

function curveNormal(g, t) {
  const n = g.segs.length, k = Math.min(n - 1, Math.floor(t * n));
  return segNormal(g.segs[k], t * n - k);
}

function curveLength(g) {
  return g.segs.reduce((total, s) => total + Math.hypot(s.c[0] - s.p0[0], s.c[1] - s.p0[1]) +
                                      Math.hypot(s.p1[0] - s.c[0], s.p1[1] - s.c[1]), 0);
}

function leaving(g) {  // the direction in which the curve leaves its start
  const s = g.segs[0];
  const to = Math.hypot(s.c[0] - s.p0[0], s.c[1] - s.p0[1]) > 0.5 ? s.c : s.p1;
  return Math.atan2(to[1] - s.p0[1], to[0] - s.p0[0]);
}

const fmtPt = (p) => `${p[0].toFixed(1)},${p[1].toFixed(1)}`;

function curvePath(g) {
  const parts = [];
  let last = null;
  for (const s of g.segs) {
    if (last === null) parts.push(`M${fmtPt(s.p0)}`);
    else if (Math.hypot(s.p0[0] - last[0], s.p0[1] - last[1]) > 0.5) parts.push(`L${fmtPt(s.p0)}`);
    parts.push(`Q${fmtPt(s.c)} ${fmtPt(s.p1)}`);
    last = s.p1;
  }
  return parts.join(" ");
}

// In from a booth, along a circle of radius `lane` around the ring's centre, out to the other booth.
function laneCurve(ring, p0, p1, viaAngle, lane) {
  const a0 = Math.atan2(p0[1] - ring.cy, p0[0] - ring.cx), a1 = Math.atan2(p1[1] - ring.cy, p1[0] - ring.cx);
  const wrap = (a) => ((a % (2 * Math.PI)) + 3 * Math.PI) % (2 * Math.PI) - Math.PI;  // to (-pi, pi]
  const sign = Math.sign(wrap(viaAngle - a0)) || 1;  // the way round that passes the booths in between
  let sweep = sign * wrap(a1 - a0);
  if (sweep <= 0) sweep += 2 * Math.PI;
  const at = (a, r) => [ring.cx + r * Math.cos(a), ring.cy + r * Math.sin(a)];
  const turn = Math.min(Math.PI / 18, sweep / 4);
  const segs = [{ p0, c: at(a0, lane), p1: at(a0 + sign * turn, lane) }];
  const parts = Math.max(1, Math.ceil((sweep - 2 * turn) / (Math.PI / 6)));
  const step = (sweep - 2 * turn) / parts;
  for (let i = 0; i < parts; i++) {
    const from = a0 + sign * (turn + i * step), mid = from + sign * step / 2;
    segs.push({ p0: at(from, lane), c: at(mid, lane / Math.cos(step / 2)), p1: at(from + sign * step, lane) });
  }
  segs.push({ p0: at(a1 - sign * turn, lane), c: at(a1, lane), p1 });
  return { segs };
}

// Links between booths that are not neighbours on the ring: a lane each, inner lanes for the
// links that span others (so lanes never cross one another), each lane a bit deeper.
function ringLanes(topo, ring) {
  const slot = {}, bySlot = {};
  for (const s of topo.switches) if (s.pane === "floor" && s.slot !== null) { slot[s.name] = s.slot; bySlot[s.slot] = s.name; }
  const n = Object.keys(slot).length, circular = topo.layout.ring_circular;
  const spans = [];
  for (const link of topo.links) {
    if (!(link.a in slot) || !(link.b in slot) || link.a === link.b) continue;
    let [from, to] = slot[link.a] < slot[link.b] ? [link.a, link.b] : [link.b, link.a];
    let length = slot[to] - slot[from];
    if (circular && n - length < length) { [from, to] = [to, from]; length = n - length; }
    if (length >= 2) spans.push({ link, from, to, start: slot[from], length });
  }
  spans.sort((x, y) => x.length - y.length || (x.link.name < y.link.name ? -1 : 1));
  const lanes = {};
  spans.forEach((span, i) => {
    let lane = 1;
    for (const inner of spans.slice(0, i)) {
      const offset = ((inner.start - span.start) % n + n) % n;
      if (offset + inner.length <= span.length) lane = Math.max(lane, lanes[inner.link.name].lane + 1);
    }
    const via = bySlot[(span.start + 1) % n];
    lanes[span.link.name] = { lane, from: span.from, to: span.to, via };
  });
  const out = {};
  for (const [name, info] of Object.entries(lanes)) {
    const radius = ring.r * Math.max(0.5, 1 - 0.15 * info.lane);
    const p = state.pos[info.via], p0 = state.pos[info.from], p1 = state.pos[info.to];
    const via = Math.atan2(p[1] - ring.cy, p[0] - ring.cx);
    const a0 = Math.atan2(p0[1] - ring.cy, p0[0] - ring.cx), a1 = Math.atan2(p1[1] - ring.cy, p1[0] - ring.cx);
    const span = angleGap(a0, a1);
    let g;
    if (span <= (5 * Math.PI) / 6) {  // one curve whose middle lies on the lane, by the booths in between
      let mid = (a0 + a1) / 2;
      if (angleGap(via, mid) >= Math.PI / 2) mid += Math.PI;
      const m = [ring.cx + radius * Math.cos(mid), ring.cy + radius * Math.sin(mid)];
      g = curve(p0, [2 * m[0] - (p0[0] + p1[0]) / 2, 2 * m[1] - (p0[1] + p1[1]) / 2], p1);
    } else {  // most of the way round: in to the lane, along it, out again
      g = laneCurve(ring, p0, p1, via, radius);
    }
    const link = topo.links.find((l) => l.name === name);
    out[name] = link.a === info.from ? g : reversed(g);
  }
  return out;
}

function linkGeometry(topo, pos, panes) {
  const geom = panes.floor && panes.floor.ring ? ringLanes(topo, panes.floor.ring) : {};
  const groups = new Map();
  const links = allLinks();
  for (const link of links) {
    if (link.name in geom) continue;
    const key = link.a < link.b ? `${link.a}\u0000${link.b}` : `${link.b}\u0000${link.a}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(link);
  }
  const names = Object.keys(pos);
  const bowed = {};
  for (const list of groups.values()) {
    list.sort((x, y) => (x.name < y.name ? -1 : 1));
    const [a, b] = list[0].a < list[0].b ? [list[0].a, list[0].b] : [list[0].b, list[0].a];
    const p0 = pos[a], p1 = pos[b];
    const dx = p1[0] - p0[0], dy = p1[1] - p0[1], len2 = dx * dx + dy * dy || 1;
    const n = rightNormal(p0, p1);
    // a switch the straight line would pass over: bend away from the one that needs it most
    let bend = 0;
    for (const name of names) {
      if (name === a || name === b) continue;
      const q = pos[name];
      const t = ((q[0] - p0[0]) * dx + (q[1] - p0[1]) * dy) / len2;
      if (t <= 0.04 || t >= 0.96) continue;
      const side = (q[0] - p0[0]) * n[0] + (q[1] - p0[1]) * n[1];
      const need = (CLEARANCE + state.radius[name] - Math.abs(side)) / (4 * t * (1 - t));
      if (need > Math.abs(bend)) bend = -(Math.sign(side) || 1) * need;
    }
    bend = Math.max(-0.3 * Math.sqrt(len2), Math.min(0.3 * Math.sqrt(len2), bend));
    list.forEach((link, i) => {
      const m = bend + (i - (list.length - 1) / 2) * PARALLEL_SPACING;  // the curve's middle, off the straight line
      bowed[link.name] = { link, a, p0, p1, n, m };
    });
  }
  const bow = (b) => {
    const g = curve(b.p0, [(b.p0[0] + b.p1[0]) / 2 + 2 * b.m * b.n[0], (b.p0[1] + b.p1[1]) / 2 + 2 * b.m * b.n[1]], b.p1);
    return b.link.a === b.a ? g : reversed(g);  // oriented from the link's a to its b
  };
  for (const [name, b] of Object.entries(bowed)) geom[name] = bow(b);
  // Drawn longest first, so a short link lies on top of a long one it runs along. A link that
  // would still be covered from end to end (by links drawn over it, or switches) bows out more.
  const order = links.map((l) => l.name).sort((x, y) => curveLength(geom[y]) - curveLength(geom[x]) || (x < y ? -1 : 1));
  const above = new Grid();  // pieces of the links drawn over the one being bowed: {a, b, half}
  const nodes = new Grid();
  for (const [name, p] of Object.entries(pos)) {
    const r = state.radius[name] + 4;
    nodes.add([p[0] - r, p[1] - r, p[0] + r, p[1] + r], { p, r });
  }
  for (const name of [...order].reverse()) {  // the top one first: what lies over a link is settled before it
    const b = bowed[name];
    for (let attempt = 0; b && attempt < 8 && !exposed(geom[name], above, nodes); attempt++) {
      b.m += (attempt % 2 ? -1 : 1) * (attempt + 1) * 9;  // +9, then -9 from there, +27, ...
      geom[name] = bow(b);
    }
    const pts = sampleCurve(geom[name], 24), half = hitWidth(state.track[name]) / 2 + 4;
    for (let i = 0; i + 1 < pts.length; i++) {
      const [a, c] = [pts[i], pts[i + 1]];
      above.add([Math.min(a[0], c[0]) - half, Math.min(a[1], c[1]) - half, Math.max(a[0], c[0]) + half,
                 Math.max(a[1], c[1]) + half], { a, b: c, half });
    }
  }
  state.order = order;
  return geom;
}

function sampleCurve(g, n) {
  const out = [];
  for (let i = 0; i <= n; i++) out.push(curvePoint(g, i / n));
  return out;
}

function distanceToSegment(p, a, b) {
  const dx = b[0] - a[0], dy = b[1] - a[1], len2 = dx * dx + dy * dy;
  const t = len2 ? Math.max(0, Math.min(1, ((p[0] - a[0]) * dx + (p[1] - a[1]) * dy) / len2)) : 0;
  return Math.hypot(p[0] - a[0] - t * dx, p[1] - a[1] - t * dy);
}

// Whether some point of the curve is clear of every switch and of every link piece drawn over it.
function exposed(g, above, nodes) {
  for (let i = 1; i < 24; i++) {
    const p = curvePoint(g, i / 24), probe = [p[0], p[1], p[0], p[1]];
    let clear = true;
    for (const [, n] of nodes.near(probe)) if (Math.hypot(p[0] - n.p[0], p[1] - n.p[1]) < n.r) { clear = false; break; }
    if (clear) {
      for (const [, piece] of above.near(probe)) {
        if (distanceToSegment(p, piece.a, piece.b) < piece.half) { clear = false; break; }
      }
    }
    if (clear) return true;
  }
  return false;
}

function trackWidths(topo) {  // wider for bigger links: a typical link 6 px, ten times more 12 px
  const capacity = (l) => Math.max(l.capacity_ab, l.capacity_ba);
  const sorted = topo.links.map(capacity).filter((c) => c > 0).sort((x, y) => x - y);
  const typical = sorted.length ? sorted[Math.floor(sorted.length / 2)] : 1;
  const width = (l) => Math.max(3, Math.min(12, 6 + 6 * Math.log10(Math.max(1, capacity(l)) / typical)));
  return Object.fromEntries(topo.links.concat(state.edges).map((l) => [l.name, width(l)]));
}

function hitWidth(track) { return Math.max(10, track + 4); }

// -- labels: each where it covers no other label and no switch --------------------------------

class Grid {  // boxes [x0, y0, x1, y1] (or points) by 40 px cells, for quick overlap tests
  constructor() { this.cells = new Map(); }
  *keys(box) {
    for (let i = Math.floor(box[0] / 40); i <= Math.floor(box[2] / 40); i++) {
      for (let j = Math.floor(box[1] / 40); j <= Math.floor(box[3] / 40); j++) yield `${i},${j}`;
    }
  }
  add(box, item) {
    for (const key of this.keys(box)) {
      if (!this.cells.has(key)) this.cells.set(key, []);
      this.cells.get(key).push([box, item]);
    }
  }
  hits(box) {
    for (const key of this.keys(box)) {
      for (const [b] of this.cells.get(key) || []) {
        if (b[0] < box[2] && box[0] < b[2] && b[1] < box[3] && box[1] < b[3]) return true;
      }
    }
    return false;
  }
  *near(box) {  // what lies in the cells the box touches (some more than once)
    for (const key of this.keys(box)) yield* this.cells.get(key) || [];
  }
  count(box, skip) {  // points inside, not counting those of `skip`
    let n = 0;
    const seen = new Set();
    for (const key of this.keys(box)) {
      for (const entry of this.cells.get(key) || []) {
        const [b, item] = entry;
        if (item === skip || seen.has(entry)) continue;
        if (b[0] >= box[0] && b[0] <= box[2] && b[1] >= box[1] && b[1] <= box[3]) { n++; seen.add(entry); }
      }
    }
    return n;
  }
}

function angleGap(a, b) { const d = Math.abs(a - b) % (2 * Math.PI); return Math.min(d, 2 * Math.PI - d); }

function freeDirection(name, fallback) {  // the middle of the widest gap between the links leaving a switch
  const angles = [];
  for (const link of allLinks()) {
    const g = state.geom[link.name];
    if (link.a === name) angles.push(leaving(g));
    else if (link.b === name) angles.push(leaving(reversed(g)));
  }
  if (!angles.length) return fallback;
  angles.sort((x, y) => x - y);
  let best = fallback, widest = -1;
  angles.forEach((a, i) => {
    const next = i + 1 < angles.length ? angles[i + 1] : angles[0] + 2 * Math.PI;
    // among equal gaps, the one nearer the fallback (outward) direction
    const gap = next - a - 0.3 * angleGap((a + next) / 2, fallback) / Math.PI;
    if (gap > widest) { widest = gap; best = (a + next) / 2; }
  });
  return best;
}

function aroundPoint(p, distances, prefer, w, h) {  // label boxes around p, the preferred direction first
  const out = [];
  const angles = [];
  for (let k = 0; k < 16; k++) angles.push(k * Math.PI / 8);
  angles.sort((x, y) => angleGap(x, prefer) - angleGap(y, prefer));
  distances.forEach((dist, di) => angles.forEach((a, ai) => {
    const cx = Math.cos(a), cy = Math.sin(a), m = Math.max(Math.abs(cx), Math.abs(cy));
    const ax = p[0] + dist * cx, ay = p[1] + dist * cy;
    out.push({ x0: ax - w / 2 + (cx / m) * w / 2, y0: ay - h / 2 + (cy / m) * h / 2, dirx: cx, cost: ai * 0.5 + di * 3 });
  }));
  return out;
}

function alongCurve(g, half, w, h) {  // label boxes beside a link's curve, its middle first
  const out = [];
  [0.5, 0.42, 0.58, 0.34, 0.66, 0.26, 0.74].forEach((t, ti) => {
    const p = curvePoint(g, t), n = curveNormal(g, t);
    [half + 3, half + 10].forEach((dist, di) => [1, -1].forEach((side) => {
      const [c] = aroundPoint(p, [dist], Math.atan2(side * n[1], side * n[0]), w, h);  // straight out from the curve
      out.push({ ...c, cost: ti * 0.8 + di * 2 + (side < 0 ? 0.2 : 0) });
    }));
  });
  return out;
}

function inside(box, rect) {
  return box[0] >= rect[0] && box[1] >= rect[1] && box[2] <= rect[0] + rect[2] && box[3] <= rect[1] + rect[3];
}

function squash(text) { return text.toLowerCase().replace(/[^a-z0-9]/g, ""); }

// What to label, the most important first: the show floor, the widest links, then the rest by degree.
function labelSpecs(topo, panes) {
  const specs = [];
  const degree = {};
  for (const link of topo.links) for (const end of [link.a, link.b]) degree[end] = (degree[end] || 0) + 1;
  const bySwitch = Object.fromEntries(topo.switches.map((s) => [s.name, s]));
  const rank = (s) => (s.pane === "floor" ? (s.role === "hub" ? 0 : 1) : 3);
  const outward = (p, pane) => {  // away from the middle of the ring (or of the pane)
    const f = pane.ring || { cx: pane.rect[0] + pane.rect[2] / 2, cy: pane.rect[1] + pane.rect[3] / 2 };
    return Math.hypot(p[0] - f.cx, p[1] - f.cy) < 1 ? -Math.PI / 4 : Math.atan2(p[1] - f.cy, p[0] - f.cx);
  };
  const beside = (key, kind, lines, name, order) => {  // a label next to one switch, where its links leave room
    const s = bySwitch[name], p = state.pos[name], pane = panes[s.pane], r = state.radius[name];
    const prefer = freeDirection(name, outward(p, pane));
    specs.push({ key, kind, lines, order, degree: degree[name] || 0, rect: pane.rect,
                 candidates: (w, h) => aroundPoint(p, [r + 3, r + 10, r + 20, r + 32], prefer, w, h) });
  };
  const labelled = new Set();
  for (const site of topo.sites) {
    const members = site.switches.filter((n) => n in state.pos);
    if (members.length === 1) {  // one label: the site, and its switch's name below when it says more
      const name = members[0];
      beside(`site:${site.name}`, "site", same(site.name, name) ? [site.name] : [site.name, name], name, rank(bySwitch[name]));
    } else if (members.length > 1) {  // the site's name by the middle of its switches, each switch's name by it
      const pts = members.map((n) => state.pos[n]), pane = panes[bySwitch[members[0]].pane];
      const centre = [pts.reduce((t, p) => t + p[0], 0) / pts.length, pts.reduce((t, p) => t + p[1], 0) / pts.length];
      const extent = Math.max(...pts.map((p) => Math.hypot(p[0] - centre[0], p[1] - centre[1])));
      specs.push({ key: `site:${site.name}`, kind: "site", lines: [site.name], order: rank(bySwitch[members[0]]) + 0.5,
                   degree: 99, rect: pane.rect,
                   candidates: (w, h) => aroundPoint(centre, [14, extent + 14, extent + 24], outward(centre, pane), w, h) });
      for (const name of members) beside(`switch:${name}`, "switch", [name], name, rank(bySwitch[name]));
    }
    for (const name of members) labelled.add(name);
  }
  for (const s of topo.switches) if (!labelled.has(s.name)) beside(`switch:${s.name}`, "switch", [s.name], s.name, rank(s) + 1);
  // the widest links by name, when they are few and wider than most: SC16's two 1 Tbit/s links
  const capacities = topo.links.map((l) => Math.max(l.capacity_ab, l.capacity_ba)).sort((x, y) => x - y);
  const widest = capacities[capacities.length - 1], median = capacities[Math.floor(capacities.length / 2)];
  const few = capacities.filter((c) => c === widest).length <= Math.min(6, Math.max(2, capacities.length / 10));
  if (capacities.length > 1 && widest > median && few) {
    for (const link of topo.links) {
      if (Math.max(link.capacity_ab, link.capacity_ba) !== widest) continue;
      const g = state.geom[link.name], half = state.track[link.name] / 2;
      specs.push({ key: `link:${link.name}`, kind: "link", lines: [`${link.name} · ${fmtCapacity(widest)}`], order: 2,
                   degree: 0, rect: [0, 0, state.size[0], state.size[1]], skip: link.name,
                   candidates: (w, h) => alongCurve(g, half, w, h) });
    }
  }
  // the neighbouring domains: each remote site by its point, each interdomain edge by its neighbour's name
  for (const site of topo.remote_sites || []) {
    const key = remoteKey(site.name), p = state.pos[key], pane = panes[site.pane], r = state.radius[key];
    specs.push({ key: `remote:${site.name}`, kind: "remote", lines: [site.name, `${site.domain_name} · over NSI`], order: 3,
                 degree: 1, rect: pane.rect,
                 candidates: (w, h) => aroundPoint(p, [r + 3, r + 10, r + 20, r + 32], freeDirection(key, outward(p, pane)), w, h) });
  }
  for (const edge of state.edges) {
    const g = state.geom[edge.name], half = state.track[edge.name] / 2;
    specs.push({ key: `domain:${edge.name}`, kind: "domain", lines: [edge.port.domain_name], order: 2.5, degree: 0,
                 rect: [0, 0, state.size[0], state.size[1]], skip: edge.name,
                 candidates: (w, h) => alongCurve(g, half, w, h) });
  }
  specs.sort((x, y) => x.order - y.order || y.degree - x.degree || (x.key < y.key ? -1 : 1));
  return specs;
}

function same(site, switchName) { return squash(site) === squash(switchName); }

function measure(text) {  // its size, and where its box starts with each text-anchor (text at x = 0)
  const out = {};
  for (const node of [text, ...text.querySelectorAll("tspan")]) node.setAttribute("x", 0);
  text.setAttribute("y", 0);
  for (const anchor of ["start", "middle", "end"]) {
    text.setAttribute("text-anchor", anchor);
    const b = text.getBBox();
    Object.assign(out, { w: b.width, h: b.height, oy: b.y, [anchor]: b.x });
  }
  return out;
}

function writeLines(text, lines) {
  text.replaceChildren();
  lines.forEach((line, i) => {
    const span = el("tspan", { x: 0, dy: i ? "1.15em" : "0" }, text);
    if (i) span.setAttribute("class", "sub");
    span.textContent = line;
  });
}

// Put `text` (measured by `measure`) in the cheapest free candidate box; null when none is free.
function placeText(text, m, candidates, rect, skip, extra) {
  let best = null;
  for (const c of candidates) {
    const box = [c.x0, c.y0, c.x0 + m.w, c.y0 + m.h];
    if (!inside(box, rect)) continue;
    const padded = [box[0] - LABEL_PAD, box[1] - LABEL_PAD, box[2] + LABEL_PAD, box[3] + LABEL_PAD];
    if (state.obstacles.hits(padded) || (extra && extra.hits(padded))) continue;
    const cost = c.cost + 1.5 * state.soft.count(box, skip);
    if (!best || cost < best.cost) best = { ...c, cost, box, padded };
  }
  if (!best) return null;
  // right of its point: aligned on the left; left of it: on the right; above or below: centred
  const anchor = best.dirx > 0.3 ? "start" : best.dirx < -0.3 ? "end" : "middle";
  const x = (best.x0 - m[anchor]).toFixed(1);
  text.setAttribute("text-anchor", anchor);
  text.setAttribute("x", x);
  text.setAttribute("y", (best.y0 - m.oy).toFixed(1));
  for (const span of text.querySelectorAll("tspan")) span.setAttribute("x", x);
  return best;
}

function placeLabels(topo, panes) {
  const layer = document.getElementById("labels");
  layer.replaceChildren();
  state.obstacles = new Grid();
  state.soft = new Grid();
  for (const [name, p] of Object.entries(state.pos)) {
    const r = state.radius[name] + 1;
    state.obstacles.add([p[0] - r, p[1] - r, p[0] + r, p[1] + r], name);
  }
  for (const title of document.querySelectorAll("#panes text")) {
    const b = title.getBBox();
    state.obstacles.add([b.x - 4, b.y - 4, b.x + b.width + 4, b.y + b.height + 4], "title");
  }
  for (const link of allLinks()) {
    const g = state.geom[link.name];
    const steps = Math.max(4, Math.ceil(curveLength(g) / 6));
    for (let i = 1; i < steps; i++) {
      const p = curvePoint(g, i / steps);
      state.soft.add([p[0], p[1], p[0], p[1]], link.name);
    }
  }
  let hidden = 0;
  const specs = labelSpecs(topo, panes);
  for (const spec of specs) {
    const text = el("text", { class: `label ${spec.kind}-label`, "data-label": spec.key }, layer);
    writeLines(text, spec.lines);
    const m = measure(text);
    const placed = placeText(text, m, spec.candidates(m.w, m.h), spec.rect, spec.skip);
    if (!placed) {
      text.setAttribute("display", "none");
      hidden++;
      continue;
    }
    state.obstacles.add(placed.padded, spec.key);
  }
  const note = document.getElementById("map-note");
  note.textContent = hidden ? `${hidden} of ${specs.length} labels hidden: too many for this window, hover for names` : "";
  note.hidden = !hidden;
  document.getElementById("map").setAttribute("data-labels-hidden", hidden);
}

// -- drawing the topology ---------------------------------------------------------------

function drawTopology(topo) {
  state.topo = topo;
  document.getElementById("topo-name").textContent = topo.name;
  document.title = "tsdn live map: " + topo.name;
  const map = document.getElementById("map");
  const W = Math.max(240, Math.floor(map.clientWidth)), H = Math.max(180, Math.floor(map.clientHeight));
  state.size = [W, H];
  map.setAttribute("viewBox", `0 0 ${W} ${H}`);
  map.setAttribute("data-draws", Number(map.getAttribute("data-draws") || 0) + 1);  // a new window size draws again
  for (const id of ["panes", "sites", "links", "routes", "switches", "labels", "route-labels"]) {
    document.getElementById(id).replaceChildren();
  }
  state.radius = {};
  for (const s of topo.switches) state.radius[s.name] = RADIUS[s.role] || RADIUS.wan;
  for (const s of topo.remote_sites || []) state.radius[remoteKey(s.name)] = RADIUS.remote;
  state.edges = interdomainEdges(topo);
  for (const key of document.querySelectorAll(".domain-key")) key.hidden = !state.edges.length;
  const { pos, panes } = placeSwitches(topo, W, H);
  state.pos = pos;
  state.track = trackWidths(topo);
  state.geom = linkGeometry(topo, pos, panes);

  const paneLayer = document.getElementById("panes");
  for (const pane of Object.values(panes)) {
    if (Object.keys(panes).length < 2 && !pane.title) continue;
    const [x, y, w, h] = pane.rect;
    if (pane.kind === "ring") {
      el("rect", { class: "pane floor", x: x + 2, y: y + 2, width: w - 4, height: h - 4, rx: 14 }, paneLayer);
    }
    if (pane.title) {
      const title = el("text", { class: "pane-title", x: x + 12, y: y + 18 }, paneLayer);
      title.textContent = pane.title;
    }
  }
  const sites = document.getElementById("sites");
  for (const site of topo.sites) {
    const members = site.switches.filter((n) => n in pos);
    if (members.length < 2) continue;
    el("polyline", { class: "site-group", "data-site": site.name, points: members.map((n) => fmtPt(pos[n])).join(" ") }, sites);
  }
  const links = document.getElementById("links");
  const byName = Object.fromEntries(allLinks().map((l) => [l.name, l]));
  for (const link of state.order.map((name) => byName[name])) {
    const g = state.geom[link.name];
    const width = state.track[link.name];
    if (link.kind === "interdomain") {  // not tsdn's: no load measured, dashed
      const group = el("g", { class: "link interdomain", "data-link": link.name, "data-port": link.port.name,
                              "data-domain": link.port.peer_nsa, "data-a": link.a, "data-b": link.b,
                              "data-tip": edgeTip(link) }, links);
      el("path", { class: "base", d: curvePath(g), "stroke-width": (width / 2).toFixed(1) }, group);
      el("path", { class: "hit", d: curvePath(g), "stroke-width": hitWidth(width).toFixed(1) }, group);
      continue;
    }
    const group = el("g", { class: "link", "data-link": link.name, "data-state": "up", "data-a": link.a, "data-b": link.b,
                            "data-tip": linkTip(link, null) }, links);
    el("path", { class: "base", d: curvePath(g), "stroke-width": width.toFixed(1) }, group);
    // one line per direction, side by side: each on the right of its direction of travel
    el("path", { class: "dir", "data-dir": "ab", d: curvePath(offsetCurve(g, width / 4)), stroke: loadColor(null),
                 "stroke-width": 1.5 }, group);
    el("path", { class: "dir", "data-dir": "ba", d: curvePath(offsetCurve(reversed(g), width / 4)), stroke: loadColor(null),
                 "stroke-width": 1.5 }, group);
    el("path", { class: "hit", d: curvePath(g), "stroke-width": hitWidth(width).toFixed(1) }, group);
    // the congested directions' load, shown only while the controller judges one congested
    el("text", { class: "congestion-label" }, group);
  }
  const switches = document.getElementById("switches");
  const siteOf = Object.fromEntries(topo.switches.map((s) => [s.name, s.site]));
  for (const s of topo.switches) {
    const [x, y] = pos[s.name];
    el("circle", { class: `switch ${s.role}`, cx: x.toFixed(1), cy: y.toFixed(1), r: state.radius[s.name], "data-switch": s.name,
                   "data-tip": `${s.name} (dpid ${s.dpid})${s.description ? ": " + s.description : ""}` +
                               (siteOf[s.name] ? `\nsite: ${siteOf[s.name]}` : "") }, switches);
  }
  for (const site of topo.remote_sites || []) {
    const [x, y] = pos[remoteKey(site.name)];
    el("circle", { class: "remote-site", cx: x.toFixed(1), cy: y.toFixed(1), r: RADIUS.remote, "data-remote-site": site.name,
                   "data-tip": `${site.name} [${site.domain_name}: not tsdn's]\nbeyond ${site.port} on ${site.switch}, ` +
                               `reached over NSI from ${site.domain}` + (site.dtns.length ? `\nremote DTNs: ${site.dtns.join(", ")}` : "") },
       switches);
  }
  placeLabels(topo, panes);
}

function linkTip(link, live) {
  const head = `${link.name} [${live ? live.state : "up"}]${live && live.reason ? " " + live.reason : ""}`;
  const ends = `${link.a} ↔ ${link.b}, ${fmtCapacity(Math.max(link.capacity_ab, link.capacity_ba))}` +
    (link.kind ? ` (${link.kind})` : "");
  const parts = [];
  for (const d of (live && live.directions) || []) {
    parts.push(`${d.src}→${d.dst}: ${fmtBps(d.nominal_bps)} of ${fmtBps(d.capacity_bps)}` +
               (d.fraction === null ? "" : ` (${(100 * d.fraction).toFixed(1)}%)`) +
               (d.congested ? `, CONGESTED: ${d.congestion.text}` : ""));
  }
  return [head, ends, ...parts].join("\n");
}

function loadWidth(fraction, track) {  // a direction's line: thin when idle, half the track when full
  return 1.5 + (track / 2 - 1) * Math.max(0, Math.min(1, fraction || 0));
}

function updateLinks(links) {
  const congested = new Grid();
  const spec = Object.fromEntries((state.topo ? state.topo.links : []).map((l) => [l.name, l]));
  for (const link of links) {
    state.links[link.name] = link;
    const g = document.querySelector(`g.link[data-link="${CSS.escape(link.name)}"]`);
    if (!g) continue;
    g.setAttribute("data-state", link.state);
    g.setAttribute("data-fraction", link.fraction);
    g.setAttribute("data-congested", link.congested ? "1" : "0");
    const track = state.track[link.name] || 6;
    for (const d of link.directions) {
      const which = d.src === link.a ? "ab" : "ba";
      const line = g.querySelector(`.dir[data-dir="${which}"]`);
      if (line) {
        line.setAttribute("stroke", loadColor(d.fraction));
        line.setAttribute("stroke-width", loadWidth(d.fraction, track).toFixed(1));
        line.setAttribute("data-direction", d.id);
        line.setAttribute("data-congested", d.congested ? "1" : "0");
      }
    }
    if (spec[link.name]) g.setAttribute("data-tip", linkTip(spec[link.name], link));
    const label = g.querySelector("text.congestion-label");
    if (!label) continue;
    label.textContent = link.congested ? link.congestion : "";
    if (!link.congested || !state.obstacles) continue;
    // beside its link, clear of the other labels; over the link's middle when the map is too full
    const geom = state.geom[link.name];
    const m = measure(label);
    const placed = placeText(label, m, alongCurve(geom, track / 2, m.w, m.h),
                             [0, 0, state.size[0], state.size[1]], link.name, congested);
    if (placed) congested.add(placed.padded, link.name);
    else {
      const mid = curvePoint(geom, 0.5);
      label.setAttribute("text-anchor", "middle");
      label.setAttribute("x", mid[0].toFixed(1));
      label.setAttribute("y", (mid[1] - track).toFixed(1));
    }
  }
}

function routePath(r, offset) {
  // along each link of the route (its curve), `offset` px to the right of travel
  const parts = [];
  for (let i = 0; i + 1 < r.switches.length; i++) {
    const from = r.switches[i], to = r.switches[i + 1];
    const link = state.topo.links.find((l) => l.name === r.links[i]);
    if (!(from in state.pos) || !(to in state.pos)) continue;
    let g = link && state.geom[link.name];
    if (g && link.a !== from) g = reversed(g);
    if (!g) {
      const [p, q] = [state.pos[from], state.pos[to]];
      g = curve(p, [(p[0] + q[0]) / 2, (p[1] + q[1]) / 2], q);
    }
    parts.push(curvePath(offsetCurve(g, offset)));  // a piece per hop: no spike where a route turns sharply
  }
  if (!parts.length && r.switches.length && state.pos[r.switches[0]]) {
    const p = state.pos[r.switches[0]];
    return `M${fmtPt(p)} l0.1,0`;
  }
  return parts.join(" ");
}

function remotePath(r, offset) {
  // each remote part: along the interdomain edge, from the port's switch to the remote site (or back)
  const parts = [];
  for (const part of r.remote || []) {
    const edge = state.edges.find((e) => e.port.name === part.port && (part.site === null || e.site.name === part.site));
    if (!edge || !state.geom[edge.name]) continue;
    let g = state.geom[edge.name];  // from the switch to the remote site
    if (part.end === r.src) g = reversed(g);
    parts.push({ part, edge, g: offsetCurve(g, offset) });
  }
  return parts;
}

function drawReservations() {
  const layer = document.getElementById("routes");
  const legend = document.getElementById("legend");
  const list = Object.values(state.reservations).sort((a, b) => (a.id < b.id ? -1 : 1));
  const keep = new Set(list.map((r) => r.id));
  for (const node of [...layer.children]) if (!keep.has(node.getAttribute("data-reservation"))) node.remove();
  legend.replaceChildren();
  const routeLabels = document.getElementById("route-labels");
  routeLabels.replaceChildren();
  const placedRouteLabels = new Grid();
  let reserved = 0;
  list.forEach((r, i) => {
    const color = colorFor(r.id);
    let line = layer.querySelector(`path.route[data-reservation="${r.id}"]`);
    if (!line) line = el("path", { class: "route", "data-reservation": r.id, stroke: color }, layer);
    const offset = 9 + 4 * (i % 4);
    line.setAttribute("d", routePath(r, offset));
    // the part requested over NSI: dotted, along the interdomain edge to the remote site
    const remote = remotePath(r, offset);
    let far = layer.querySelector(`path.route-remote[data-reservation="${r.id}"]`);
    if (remote.length && !far) far = el("path", { class: "route-remote", "data-reservation": r.id, stroke: color }, layer);
    if (!remote.length && far) { far.remove(); far = null; }
    if (far) {
      far.setAttribute("d", remote.map((x) => curvePath(x.g)).join(" "));
      far.setAttribute("data-state", r.state);
      far.setAttribute("data-ports", remote.map((x) => x.part.port).join(" "));
      far.setAttribute("data-connection", (r.nsi && r.nsi.connection_id) || "");
      far.setAttribute("data-tip", `${r.src}→${r.dst} ${r.bandwidth} [${r.state}], the part not tsdn's:\n` +
        (r.nsi ? r.nsi.text : remote.map((x) => `${x.part.port} to ${x.part.site || x.part.end} (${x.part.domain_name})`).join("\n")));
      if (r.nsi && state.obstacles) {  // the connection's name beside its dotted part, where there is room
        const text = el("text", { class: "label route-label", "data-label": `nsi:${r.id}`, "data-reservation": r.id,
                                  fill: color }, routeLabels);
        writeLines(text, [r.nsi.text]);
        const m = measure(text), g = remote[0].g;
        const candidates = alongCurve(g, 4, m.w, m.h).concat(
          aroundPoint(curvePoint(g, 1), [14, 26, 40], Math.PI / 2, m.w, m.h).map((c) => ({ ...c, cost: c.cost + 8 })));
        const placed = placeText(text, m, candidates, [0, 0, state.size[0], state.size[1]], remote[0].edge.name,
                                 placedRouteLabels);
        if (placed) placedRouteLabels.add(placed.padded, r.id); else text.remove();
      }
    }
    line.setAttribute("data-path", r.switches.join(" "));
    line.setAttribute("data-links", r.links.join(" "));
    line.setAttribute("data-state", r.state);
    const li = document.createElement("li");
    li.setAttribute("data-reservation", r.id);
    li.innerHTML = `<span class="swatch" style="background:${color}"></span>` +
      `<span class="who"></span><span class="state"></span><div class="terms"></div><div class="nsi"></div>` +
      `<div class="why"></div>`;
    if (r.nsi) {  // what of it is NSI's: a segment tsdn requested, or a connection booked through tsdn
      li.querySelector(".nsi").textContent = r.nsi.text;
      li.setAttribute("data-nsi", r.nsi.kind);
      li.setAttribute("data-nsi-connection", r.nsi.connection_id || "");
    }
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
    line.setAttribute("data-tip", `${r.src}→${r.dst} ${r.bandwidth} [${r.state}]` + (r.nsi ? "\n" + r.nsi.text : "") +
      (why.length ? "\n" + why.join("\n") : r.reason ? "\n" + r.reason : ""));
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

// -- hovering: the tooltip names what is under the pointer ------------------------------------

function followPointer() {
  const map = document.getElementById("map"), tip = document.getElementById("tooltip");
  const panel = document.getElementById("map-panel");
  map.addEventListener("pointermove", (e) => {
    const target = e.target.closest ? e.target.closest("[data-tip]") : null;
    if (!target) { tip.hidden = true; return; }
    tip.textContent = target.getAttribute("data-tip");
    tip.setAttribute("data-for", target.getAttribute("data-link") || target.getAttribute("data-switch") ||
                                 target.getAttribute("data-reservation") || "");
    tip.hidden = false;
    const box = panel.getBoundingClientRect();
    const x = Math.min(e.clientX - box.left + 14, box.width - tip.offsetWidth - 4);
    const y = e.clientY - box.top + 16 + tip.offsetHeight > box.height ? e.clientY - box.top - tip.offsetHeight - 10
      : e.clientY - box.top + 16;
    tip.style.left = `${Math.max(4, x)}px`;
    tip.style.top = `${Math.max(4, y)}px`;
  });
  map.addEventListener("pointerleave", () => { tip.hidden = true; });
}

// -- a new window size: everything fitted again -------------------------------------------

function redraw() {
  if (!state.topo) return;
  drawTopology(state.topo);
  updateLinks(Object.values(state.links));
  drawReservations();
}

function followSize() {
  let pending = false;
  new ResizeObserver(() => {
    const map = document.getElementById("map");
    if (pending || (Math.floor(map.clientWidth) === state.size[0] && Math.floor(map.clientHeight) === state.size[1])) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; redraw(); });
  }).observe(document.getElementById("map"));
}

followPointer();
followSize();
connect();
