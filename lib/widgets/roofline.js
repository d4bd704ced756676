// A live roofline, the twin of lib/roofline.py (the tests require analyze() here and there to agree on a
// grid of inputs). attainable = min(peak, intensity × bandwidth); the ridge point is peak / bandwidth.

export const ROOFS = ["fp32", "tf32", "fp16"];
const ROOF_LABELS = { fp32: "FP32 SIMT", tf32: "TF32 tensor", fp16: "FP16 tensor" };
const ROOF_COLORS = { fp32: "#3b7dd8", tf32: "#9467bd", fp16: "#2ca02c" };
const CHAPTER_COLORS = ["#e07b39", "#d62728", "#17becf", "#bcbd22", "#8c564b", "#e377c2", "#7f7f7f", "#1f77b4"];

export function intensity(flops, bytes) {
  if (!(bytes > 0) || flops < 0) throw new Error(`need flops >= 0 and bytes > 0, got ${flops} and ${bytes}`);
  return flops / bytes;
}

export function attainableTflops(flopsPerByte, peak, bandwidthGbs) {
  return Math.min(peak, (flopsPerByte * bandwidthGbs) / 1e3);
}

export function ridgePoint(peak, bandwidthGbs) {
  return (peak * 1e12) / (bandwidthGbs * 1e9);
}

export function analyze(spec, flops, bytes) {
  const ai = intensity(flops, bytes);
  const out = { intensity: ai };
  for (const roof of ROOFS) {
    const peak = spec[`${roof}_tflops`];
    const none = peak === null || peak === undefined;
    out[`ridge_${roof}`] = none ? null : ridgePoint(peak, spec.bandwidth_gbs);
    out[`attainable_${roof}`] = none ? null : attainableTflops(ai, peak, spec.bandwidth_gbs);
  }
  out.bound = ai < out.ridge_fp32 ? "memory" : "compute";
  out.floor_ms = Math.max(flops / (spec.fp32_tflops * 1e12), bytes / (spec.bandwidth_gbs * 1e9)) * 1e3;
  return out;
}

// --- drawing ----------------------------------------------------------------------------------------
const SVG = "http://www.w3.org/2000/svg";
const W = 640, H = 400, PAD = { left: 64, right: 16, top: 16, bottom: 48 };
const X_RANGE = [-2, 4];   // log10 FLOPs per byte
const Y_RANGE = [-2, 3];   // log10 TFLOP/s

function el(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
const sx = (ai) => PAD.left + ((Math.log10(ai) - X_RANGE[0]) / (X_RANGE[1] - X_RANGE[0])) * (W - PAD.left - PAD.right);
const sy = (tf) => H - PAD.bottom - ((Math.log10(tf) - Y_RANGE[0]) / (Y_RANGE[1] - Y_RANGE[0])) * (H - PAD.top - PAD.bottom);
const clampY = (tf) => Math.min(Math.max(tf, 10 ** Y_RANGE[0]), 10 ** Y_RANGE[1]);
const fmt = (v, d = 3) => (v === null ? "n/a" : Number(v).toPrecision(d));

function plot(spec, result, points, measured = []) {
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", style: "max-width:680px;font:11px sans-serif" });
  const axis = "currentColor";
  for (let e = X_RANGE[0]; e <= X_RANGE[1]; e++) {
    svg.append(el("line", { x1: sx(10 ** e), x2: sx(10 ** e), y1: PAD.top, y2: H - PAD.bottom, stroke: "#8884" }));
    svg.append(el("text", { x: sx(10 ** e), y: H - PAD.bottom + 14, "text-anchor": "middle", fill: axis }, `${10 ** e}`));
  }
  for (let e = Y_RANGE[0]; e <= Y_RANGE[1]; e++) {
    svg.append(el("line", { x1: PAD.left, x2: W - PAD.right, y1: sy(10 ** e), y2: sy(10 ** e), stroke: "#8884" }));
    svg.append(el("text", { x: PAD.left - 6, y: sy(10 ** e) + 4, "text-anchor": "end", fill: axis }, `${10 ** e}`));
  }
  svg.append(el("text", { x: (W + PAD.left) / 2, y: H - 10, "text-anchor": "middle", fill: axis },
    "arithmetic intensity (FLOPs per byte of DRAM traffic)"));
  svg.append(el("text", { x: 14, y: (H - PAD.bottom) / 2, transform: `rotate(-90 14 ${(H - PAD.bottom) / 2})`,
    "text-anchor": "middle", fill: axis }, "TFLOP/s"));
  const xMin = 10 ** X_RANGE[0], xMax = 10 ** X_RANGE[1];
  for (const roof of ROOFS) {
    const peak = spec[`${roof}_tflops`];
    if (peak === null || peak === undefined) continue;
    const ridge = ridgePoint(peak, spec.bandwidth_gbs);
    const pts = [[xMin, attainableTflops(xMin, peak, spec.bandwidth_gbs)], [ridge, peak], [xMax, peak]]
      .map(([x, y]) => `${sx(x)},${sy(clampY(y))}`).join(" ");
    svg.append(el("polyline", { points: pts, fill: "none", stroke: ROOF_COLORS[roof], "stroke-width": 2 }));
    svg.append(el("text", { x: W - PAD.right - 4, y: sy(peak) - 4, "text-anchor": "end", fill: ROOF_COLORS[roof] },
      `${ROOF_LABELS[roof]} ${peak} TFLOP/s, ridge ${ridge.toFixed(1)} FLOP/B`));
  }
  for (const m of measured) {  // measured roofs (dashed): flat lines at what a kernel actually reached
    svg.append(el("line", { x1: PAD.left, x2: W - PAD.right, y1: sy(clampY(m.tflops)), y2: sy(clampY(m.tflops)),
      stroke: "#555", "stroke-dasharray": "6 4", "stroke-width": 1.5 }));
    svg.append(el("text", { x: PAD.left + 4, y: sy(clampY(m.tflops)) - 4, fill: "#555" },
      `${m.label} ${Number(m.tflops).toPrecision(3)} TFLOP/s`));
  }
  const chapters = [...new Set(points.map((p) => p.chapter))];
  for (const p of points) {
    const c = CHAPTER_COLORS[chapters.indexOf(p.chapter) % CHAPTER_COLORS.length];
    if (p.intensity < xMin || p.intensity > xMax) continue;
    const dot = el("circle", { cx: sx(p.intensity), cy: sy(clampY(p.tflops)), r: 4, fill: c, "fill-opacity": 0.8 });
    dot.append(el("title", {}, `${p.chapter}: ${p.kernel} (${p.size}) on ${p.device}: ` +
      `${p.intensity.toPrecision(3)} FLOP/B, ${p.tflops.toPrecision(3)} TFLOP/s`));
    svg.append(dot);
  }
  // The key sits in the bottom right corner, which no kernel reaches (high intensity at a tiny rate), so it
  // covers neither points nor the roofs' labels.
  chapters.forEach((ch, i) => {
    const y = H - PAD.bottom - 8 - 14 * (chapters.length - 1 - i), x = W - PAD.right - 150;
    svg.append(el("circle", { cx: x + 10, cy: y - 4, r: 4, fill: CHAPTER_COLORS[i % CHAPTER_COLORS.length] }));
    svg.append(el("text", { x: x + 18, y, fill: axis }, `recorded: ${ch}`));
  });
  if (result.intensity >= xMin && result.intensity <= xMax) {
    const x = sx(result.intensity);
    svg.append(el("line", { x1: x, x2: x, y1: PAD.top, y2: H - PAD.bottom, stroke: "#e07b39", "stroke-dasharray": "4 3" }));
    svg.append(el("rect", { x: x - 6, y: sy(clampY(result.attainable_fp32)) - 6, width: 12, height: 12,
      fill: "none", stroke: "#e07b39", "stroke-width": 2.5 }));
  }
  return svg;
}

function slider(model, name, label, min, max) {
  const input = Object.assign(document.createElement("input"), { type: "range", min, max, step: 0.1 });
  const shown = document.createElement("code");
  const sync = () => { input.value = model.get(name); shown.textContent = `10^${Number(model.get(name)).toFixed(1)}`; };
  input.addEventListener("input", () => { model.set(name, Number(input.value)); model.save_changes(); });
  model.on(`change:${name}`, sync);
  sync();
  const wrap = document.createElement("label");
  wrap.style.cssText = "display:inline-flex;align-items:center;gap:0.4em;margin:0 1.2em 0.4em 0;";
  wrap.append(label, input, shown);
  return wrap;
}

function render({ model, el: host }) {
  const root = document.createElement("div");
  root.style.cssText = "font-family:sans-serif;font-size:14px;";
  const pick = document.createElement("select");
  for (const [key, s] of Object.entries(model.get("specs"))) {
    pick.append(Object.assign(document.createElement("option"), { value: key, textContent: s.name }));
  }
  pick.addEventListener("change", () => { model.set("gpu", pick.value); model.save_changes(); });
  const gpuLabel = document.createElement("label");
  gpuLabel.style.cssText = "margin-right:1.2em;";
  gpuLabel.append("GPU ", pick);
  const controls = document.createElement("div");
  controls.append(gpuLabel, slider(model, "log10_flops", "FLOPs", 6, 15), slider(model, "log10_bytes", "bytes", 3, 12));
  const summary = document.createElement("div");
  summary.style.cssText = "margin:0.3em 0;";
  const figure = document.createElement("div");
  const update = () => {
    pick.value = model.get("gpu");
    const spec = model.get("specs")[model.get("gpu")];
    const flops = 10 ** model.get("log10_flops"), bytes = 10 ** model.get("log10_bytes");
    const r = analyze(spec, flops, bytes);
    summary.innerHTML = `<b>${fmt(r.intensity)} FLOP/B</b>: ${r.bound}-bound on FP32 (ridge ${fmt(r.ridge_fp32)}); ` +
      `attainable ${fmt(r.attainable_fp32)} TFLOP/s FP32, ${fmt(r.attainable_tf32)} TF32, ${fmt(r.attainable_fp16)} FP16; ` +
      `no faster than ${fmt(r.floor_ms)} ms on ${spec.name}.`;
    const points = model.get("points");
    const note = document.createElement("div");
    note.style.cssText = "font-size:0.85em;opacity:0.8;";
    note.textContent = `${points.length} recorded kernel run(s) shown (hover for names)` +
      (model.get("unplaced") ? `; ${model.get("unplaced")} without a FLOP count (copies) cannot be placed.` : ".");
    const measured = (model.get("measured_roofs") || []).filter((m) => m.gpu === model.get("gpu"));
    figure.replaceChildren(plot(spec, r, points, measured), note);
  };
  for (const k of ["gpu", "log10_flops", "log10_bytes", "points", "specs", "measured_roofs"]) model.on(`change:${k}`, update);
  update();
  root.append(controls, summary, figure);
  host.replaceChildren(root);
}

export default { render };
