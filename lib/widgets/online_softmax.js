// Step through online softmax (the logic; lib/widgets/online_softmax.py is its Python twin, and the
// tests check both give the same numbers). A row is fed tile by tile; the running state (m, l) is merged
// with each tile's state, and the old sum is rescaled by exp(m - m') when a larger maximum m' arrives.
// Masked entries are null (JSON has no -inf) and count as -inf.

const NEG_INF = -Infinity;
const IDENTITY = [NEG_INF, 0];

export function value(v) {
  return v === null || v === undefined ? NEG_INF : Number(v);
}

export function merge(a, b) {
  const m = Math.max(a[0], b[0]);
  if (m === NEG_INF) return IDENTITY;
  return [m, a[1] * Math.exp(a[0] - m) + b[1] * Math.exp(b[0] - m)];
}

export function tileState(tile) {
  const xs = tile.map(value);
  const m = xs.reduce((acc, x) => Math.max(acc, x), NEG_INF);
  if (m === NEG_INF) return IDENTITY;
  // Summed left to right, as Python's sum() does, so the twins agree to the last bits.
  let l = 0;
  for (const x of xs) l += Math.exp(x - m);
  return [m, l];
}

export function onlineSteps(row, tile) {
  if (!(tile >= 1)) throw new Error("tile must be at least 1");
  let state = IDENTITY;
  const steps = [];
  for (let start = 0; start < row.length; start += tile) {
    const t = tileState(row.slice(start, start + tile));
    const next = merge(state, t);
    const rescale = state[0] === NEG_INF ? null : Math.exp(state[0] - next[0]);
    steps.push({
      start, stop: Math.min(start + tile, row.length), tile_m: t[0], tile_l: t[1],
      m_before: state[0], l_before: state[1], m: next[0], l: next[1], rescale,
    });
    state = next;
  }
  return steps;
}

export function softmax(row) {
  const xs = row.map(value);
  const [m, l] = tileState(xs);
  if (l === 0) return xs.map(() => 0);
  return xs.map((x) => Math.exp(x - m) / l);
}

// --- rendering --------------------------------------------------------------------------------------
const BLUE = "#3b7dd8";
const ORANGE = "#e07b39";
const ORANGE_TEXT = "#b7501a";
const GREY = "#8c959f";
const SVG = "http://www.w3.org/2000/svg";

function fmt(x) {
  if (x === null) return "—";
  if (x === NEG_INF) return "−∞";
  if (x !== 0 && (Math.abs(x) < 1e-3 || Math.abs(x) >= 1e5)) return x.toExponential(3);
  return x.toFixed(4);
}

function svgEl(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function control(label, input, readout) {
  const wrap = document.createElement("label");
  wrap.style.cssText = "margin-right:1.5em;white-space:nowrap";
  wrap.append(label + " ", input);
  if (readout) wrap.append(" ", readout);
  return wrap;
}

function barChart(values, colors, title, yLabel, lineAt) {
  const w = 640, h = 190, left = 52, bottom = 28, top = 24;
  const svg = svgEl("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img" });
  svg.style.maxWidth = "100%";
  const finite = values.filter((v) => Number.isFinite(v));
  const lo = Math.min(0, ...finite), hi = Math.max(1e-9, ...finite, lineAt ?? NEG_INF);
  const y = (v) => top + (h - top - bottom) * (1 - (v - lo) / (hi - lo || 1));
  const bw = (w - left - 8) / Math.max(values.length, 1);
  svg.append(svgEl("text", { x: left, y: 14, fill: "currentColor", "font-size": 13 }, title));
  svg.append(svgEl("line", { x1: left, x2: w - 4, y1: y(0), y2: y(0), stroke: GREY }));
  svg.append(svgEl("text", { x: 4, y: top + 10, fill: "currentColor", "font-size": 11 }, yLabel));
  svg.append(svgEl("text", { x: 4, y: y(hi) + 22, fill: "currentColor", "font-size": 11 }, fmt(hi)));
  values.forEach((v, i) => {
    const x = left + i * bw + 1;
    if (Number.isFinite(v)) {
      svg.append(svgEl("rect", { x, y: Math.min(y(v), y(0)), width: bw - 2,
        height: Math.abs(y(v) - y(0)), fill: colors[i] }));
    } else {
      svg.append(svgEl("text", { x: x + bw / 2 - 6, y: y(0) - 4, fill: GREY, "font-size": 12 }, "−∞"));
    }
    svg.append(svgEl("text", { x: x + bw / 2 - 4, y: h - 10, fill: "currentColor", "font-size": 10 }, i));
  });
  if (lineAt !== undefined && Number.isFinite(lineAt)) {
    svg.append(svgEl("line", { x1: left, x2: w - 4, y1: y(lineAt), y2: y(lineAt), stroke: ORANGE,
      "stroke-dasharray": "5 3", "stroke-width": 2 }));
    svg.append(svgEl("text", { x: w - 90, y: y(lineAt) - 4, fill: ORANGE, "font-size": 12 }, `m = ${fmt(lineAt)}`));
  }
  return svg;
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.style.cssText = "font-family:sans-serif;font-size:14px;line-height:1.4";
  el.appendChild(root);

  const presetSelect = document.createElement("select");
  const tileInput = Object.assign(document.createElement("input"), { type: "range", min: 1 });
  const stepInput = Object.assign(document.createElement("input"), { type: "range", min: 0 });
  const tileText = document.createElement("span");
  const stepText = document.createElement("span");
  const controls = document.createElement("div");
  controls.append(control("row", presetSelect), control("tile size", tileInput, tileText),
    control("tiles merged", stepInput, stepText));
  const charts = document.createElement("div");
  const note = document.createElement("p");
  const table = document.createElement("table");
  table.style.cssText = "border-collapse:collapse;font-variant-numeric:tabular-nums;margin-top:0.4em";
  root.append(controls, charts, note, table);

  presetSelect.addEventListener("change", () => {
    model.set("preset", presetSelect.value); model.set("step", 0); model.save_changes();
  });
  tileInput.addEventListener("input", () => {
    model.set("tile", Number(tileInput.value)); model.set("step", 0); model.save_changes();
  });
  stepInput.addEventListener("input", () => { model.set("step", Number(stepInput.value)); model.save_changes(); });

  function draw() {
    const presets = model.get("presets");
    const name = model.get("preset");
    const row = presets[name] ?? [];
    const tile = Math.max(1, Math.min(model.get("tile"), row.length || 1));
    const steps = onlineSteps(row, tile);
    const step = Math.max(0, Math.min(model.get("step"), steps.length));

    presetSelect.replaceChildren(...Object.keys(presets).map((k) =>
      Object.assign(document.createElement("option"), { value: k, textContent: k, selected: k === name })));
    tileInput.max = row.length; tileInput.value = tile; tileText.textContent = String(tile);
    stepInput.max = steps.length; stepInput.value = step;
    stepText.textContent = `${step} of ${steps.length}`;

    const xs = row.map(value);
    const current = step > 0 ? steps[step - 1] : null;
    const colors = xs.map((_, i) => {
      if (current && i >= current.start && i < current.stop) return ORANGE;
      return step > 0 && i < current.stop ? BLUE : GREY;
    });
    const charts_ = [barChart(xs, colors, "the row: merged tiles blue, the tile just merged orange", "x",
      current ? current.m : undefined)];
    if (step === steps.length && steps.length) {
      charts_.push(barChart(softmax(row), xs.map(() => BLUE), "finished: softmax = exp(x − m) / l", "p"));
    }
    charts.replaceChildren(...charts_);

    if (!current) {
      note.textContent = "State before any tile: (m, l) = (−∞, 0), the identity of the merge. Move the slider.";
    } else if (current.rescale === null) {
      note.textContent = `Tile ${step} starts the state: nothing earlier to rescale.`;
    } else if (current.rescale < 1) {
      note.textContent = `Tile ${step} raised the maximum from ${fmt(current.m_before)} to ${fmt(current.m)}: ` +
        `the old sum ${fmt(current.l_before)} is multiplied by exp(${fmt(current.m_before)} − ${fmt(current.m)}) = ` +
        `${fmt(current.rescale)} before the tile's share is added.`;
    } else {
      note.textContent = `Tile ${step} did not raise the maximum: the old sum keeps its scale (factor 1) and ` +
        "the tile's own sum is scaled down to the running maximum instead.";
    }

    const head = ["tile", "columns", "tile max", "tile sum", "m before → m", "rescale exp(m − m′)", "l"];
    const cell = (tag, text) => {
      const c = document.createElement(tag);
      c.textContent = text;
      c.style.cssText = "padding:2px 10px;border-bottom:1px solid " + GREY + ";text-align:right";
      return c;
    };
    const rows = [document.createElement("tr")];
    rows[0].append(...head.map((t) => cell("th", t)));
    steps.slice(0, step).forEach((s, i) => {
      const tr = document.createElement("tr");
      tr.append(cell("td", i + 1), cell("td", `${s.start}–${s.stop - 1}`), cell("td", fmt(s.tile_m)),
        cell("td", fmt(s.tile_l)), cell("td", `${fmt(s.m_before)} → ${fmt(s.m)}`), cell("td", fmt(s.rescale)),
        cell("td", fmt(s.l)));
      // widgets sit on a light card in both themes: a darker orange keeps this text at 5:1 contrast
      if (s.rescale !== null && s.rescale < 1) tr.style.color = ORANGE_TEXT;
      rows.push(tr);
    });
    table.replaceChildren(...rows);
  }

  for (const name of ["presets", "preset", "tile", "step"]) model.on(`change:${name}`, draw);
  draw();
}

export default { render };
