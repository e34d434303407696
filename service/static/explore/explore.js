// devplan explore page: plan a module, draw its placement, pin nodes, ask why.
// Plain JS, no build step; talks to POST /plan and POST /plan/picture.
"use strict";

const ROOT = document.body.dataset.root || "";
const state = {
  pins: [],      // [{node, device}]
  why: [],       // node ids asked about
  expand: [],    // node ids of expanded runs
  legend: {},    // device -> color (from the SVG legend)
  devices: [],   // device names offered for pins
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function setStatus(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.className = isError ? "error" : "";
}

function requestBody() {
  const devices = $("virtual-devices").value.split(",").map((s) => s.trim()).filter(Boolean);
  const body = {
    module: $("module").value,
    virtual_devices: devices,
    default_device: $("default-device").value.trim() || "cuda",
    host_device: $("host-device").value.trim() || "cpu",
    mode: $("mode").value,
    constraints: state.pins.map((p) => ({ select: { node: p.node }, device: p.device })),
  };
  return body;
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function post(path, body) {
  const res = await fetch(ROOT + path, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (!res.ok) {
    let detail = res.status + " " + res.statusText;
    try {
      const problem = await res.json();
      detail = (problem.title || detail) + (problem.detail ? "\n" + problem.detail : "");
    } catch (e) { /* not JSON */ }
    throw new Error(detail);
  }
  return res;
}

async function plan() {
  if (!$("module").value.trim()) { setStatus("Paste or upload a module first.", true); return; }
  setStatus("Planning...");
  const body = requestBody();
  const query = new URLSearchParams();
  for (const id of state.expand) query.append("expand", id);
  try {
    const [planRes, picRes] = await Promise.all([
      post("/plan", Object.assign({}, body, { why: state.why.map((n) => ({ node: n })) })),
      post("/plan/picture" + (state.expand.length ? "?" + query : ""), body),
    ]);
    const result = await planRes.json();
    const svg = await picRes.text();
    showPicture(svg);
    showSummary(result);
    showAnswers(result.why || []);
    showPins();
    setStatus("Planned: " + Object.entries(result.summary.expressions_by_device)
      .map(([d, n]) => n + " expressions on " + d).join(", ") + "; " + result.summary.device_copies.length + " cop"
      + (result.summary.device_copies.length === 1 ? "y" : "ies") + ".");
  } catch (err) {
    setStatus(err.message, true);
  }
}

function showPicture(svgText) {
  const pic = $("picture");
  pic.innerHTML = svgText.replace(/^<\?xml[^>]*>\s*(<!DOCTYPE[^>]*>\s*)?/, "");
  // cpu and cuda keep their colors across plans (as service/picture.py draws them).
  state.legend = { cpu: "#9ecae1", cuda: "#a1d99b" };
  for (const g of pic.querySelectorAll("g.legend-device")) {
    const name = g.querySelector("text") ? g.querySelector("text").textContent : "";
    const shape = g.querySelector("path, polygon");
    if (name && shape) state.legend[name] = shape.getAttribute("fill");
  }
  const fromRequest = $("virtual-devices").value.split(",").map((s) => s.trim()).filter(Boolean);
  state.devices = Array.from(new Set([...Object.keys(state.legend), ...fromRequest]));
  for (const g of pic.querySelectorAll("g.node")) {
    if (g.classList.contains("legend-entry")) continue;
    g.addEventListener("click", (ev) => { ev.stopPropagation(); nodeClicked(g, ev); });
  }
}

function nodeInfo(g) {
  const id = g.id || "";
  const title = g.querySelector("a") ? (g.querySelector("a").getAttribute("xlink:title")
    || g.querySelector("a").getAttribute("title") || "") : "";
  // Weights and constants folded into this node: "...; folded: %w #9, %b #12" in the tooltip.
  const folded = [];
  const at = title.indexOf("folded: ");
  if (at >= 0) {
    for (const m of title.slice(at + 8).matchAll(/(\S+) #(\d+)/g)) folded.push({ label: m[1], node: Number(m[2]) });
  }
  if (id.startsWith("g")) {
    const ids = (title.split(":")[1] || "").split(";")[0].trim().split(/\s+/).map(Number).filter((n) => !isNaN(n));
    return { collapsed: true, ids, folded };
  }
  const m = /^[nr](\d+)$/.exec(id);
  return m ? { collapsed: false, node: Number(m[1]), label: g.querySelector("text").textContent, folded } : null;
}

function nodeClicked(g, ev) {
  const info = nodeInfo(g);
  if (!info) return;
  if (info.collapsed) {
    state.expand.push(...info.ids);
    plan();
    return;
  }
  for (const s of document.querySelectorAll("#picture g.node.selected")) s.classList.remove("selected");
  g.classList.add("selected");
  const menu = $("menu");
  menu.innerHTML = "";
  menu.append(el("div", { class: "title" }, info.label + " #" + info.node));
  for (const d of state.devices) {
    const b = el("button", { "data-device": d, class: "pin" },
      el("span", { class: "swatch", style: "background:" + (state.legend[d] || "#fff") }), "pin to " + d);
    b.addEventListener("click", () => { hideMenu(); pin(info.node, d); });
    menu.append(b);
  }
  const why = el("button", { class: "why" }, "why this device?");
  why.addEventListener("click", () => { hideMenu(); ask(info.node); });
  menu.append(why);
  // Folded weights stay reachable: pin one of them, or ask why.
  if (info.folded.length) menu.append(el("div", { class: "folded-title" }, "folded in:"));
  for (const f of info.folded) {
    const row = el("div", { class: "folded", "data-node": String(f.node) }, el("span", {}, f.label + " #" + f.node));
    for (const d of state.devices) {
      const b = el("button", { "data-device": d, "data-node": String(f.node), class: "pin-folded small" }, d);
      b.addEventListener("click", () => { hideMenu(); pin(f.node, d); });
      row.append(b);
    }
    menu.append(row);
  }
  menu.hidden = false;
  const x = Math.min(ev.clientX + 8, window.innerWidth - 180);
  const y = Math.min(ev.clientY + 8, window.innerHeight - 40 * (state.devices.length + 2));
  menu.style.left = x + "px";
  menu.style.top = Math.max(0, y) + "px";
}

function hideMenu() { $("menu").hidden = true; }

function pin(node, device) {
  state.pins = state.pins.filter((p) => p.node !== node);
  state.pins.push({ node, device });
  plan();
}

function ask(node) {
  state.why = state.why.filter((n) => n !== node);
  state.why.unshift(node);
  plan();
}

function showPins() {
  const ul = $("pins");
  ul.innerHTML = "";
  if (!state.pins.length) { ul.append(el("li", { class: "muted" }, "Click a node in the picture to pin it.")); return; }
  for (const p of state.pins) {
    const rm = el("button", { class: "small" }, "remove");
    rm.addEventListener("click", () => { state.pins = state.pins.filter((q) => q !== p); plan(); });
    ul.append(el("li", {}, el("code", {}, "node " + p.node), " on " + p.device + " ", rm));
  }
}

function table(rows, head) {
  const t = el("table");
  if (head) t.append(el("tr", {}, ...head.map((h) => el("th", {}, h))));
  for (const r of rows) t.append(el("tr", {}, ...r.map((c) => el("td", {}, c))));
  return t;
}

// A copy's consumers as the placement record names them: `lv3 = R.add 10:17`, `nn.relu 5:3`.
function consumers(c) {
  const ends = (c.to || []).map((p) => (p.binding && p.binding !== p.name ? p.binding + " = " + p.name : p.name)
    + (p.line != null ? " " + p.line + ":" + p.column : " #" + p.node));
  if (!ends.length && c.into_result) ends.push("result of " + c.into_result);
  return ends.join(", ") || "?";
}

function showSummary(result) {
  const s = result.summary;
  const sum = $("summary");
  sum.className = "";
  sum.innerHTML = "";
  sum.append(table(Object.entries(s.expressions_by_device).map(([d, n]) =>
    [el("span", {}, el("span", { class: "swatch", style: "background:" + (state.legend[d] || "#fff") }), d),
      n + " expressions"])));
  for (const [name, f] of Object.entries(s.functions)) {
    sum.append(el("div", {}, el("code", {}, name.startsWith("@") ? name : "@" + name), " result on " + f.result));
  }
  const copies = $("copies");
  copies.className = s.device_copies.length ? "" : "muted";
  copies.innerHTML = "";
  if (!s.device_copies.length) copies.append("none");
  else copies.append(table(s.device_copies.map((c) =>
    [c.line != null ? c.line + ":" + c.column : "?", c.src + " \u2192 " + c.dst, consumers(c)]), ["at", "copy", "into"]));
  const costPanel = $("cost-panel");
  costPanel.hidden = !result.cost;
  if (result.cost) {
    const c = result.cost;
    const rows = [["predicted", c.predicted_ms.toFixed(3) + " ms"],
      ["TVM mode", c.tvm_mode_predicted_ms == null ? "n/a (" + (c.tvm_mode_reason || "") + ")"
        : c.tvm_mode_predicted_ms.toFixed(3) + " ms"],
      ["copies", c.copies + " (" + c.bytes_copied + " B)"], ["optimal", String(c.optimal)]];
    $("cost").innerHTML = "";
    $("cost").append(table(rows));
  }
}

function showAnswers(results) {
  const box = $("answers");
  box.innerHTML = "";
  box.className = results.length ? "" : "muted";
  if (!results.length) { box.append('Click a node, then "why this device?".'); return; }
  for (const r of results) {
    for (const a of r.answers) {
      const steps = el("ol");
      for (const s of a.chain) {
        steps.append(el("li", {}, el("code", {}, s.line != null ? s.line + ":" + s.column : "?"),
          " " + s.kind + ": " + s.message));
      }
      box.append(el("div", { class: "answer", "data-node": a.node },
        el("div", {}, el("b", {}, a.expression), " (#" + a.node + ") is on ", el("b", {}, a.device)),
        steps, el("div", { class: "decided" }, "decided by " + a.reason + ": " + a.message)));
    }
    if (r.truncated) box.append(el("div", { class: "muted" }, "(first 50 of " + r.matches + ")"));
  }
}

$("plan").addEventListener("click", () => { state.expand = []; plan(); });
$("clear-pins").addEventListener("click", () => { state.pins = []; plan(); });
$("clear-why").addEventListener("click", () => { state.why = []; plan(); });
$("upload").addEventListener("change", async (ev) => {
  const f = ev.target.files[0];
  if (f) { $("module").value = await f.text(); state.pins = []; state.why = []; state.expand = []; }
});
$("module").addEventListener("input", () => { state.pins = []; state.why = []; state.expand = []; });
document.addEventListener("click", (ev) => { if (!$("menu").contains(ev.target)) hideMenu(); });
window.explorerReady = true;
