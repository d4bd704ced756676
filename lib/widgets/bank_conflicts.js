// Shared-memory bank conflicts, live in the browser: the twin of lib/widgets/bank_conflicts.py (the tests
// require both to give equal answers on a grid of inputs). 32 banks of 4 bytes; a warp's request takes as
// many wavefronts as its busiest bank has distinct words; 8- and 16-byte accesses are split into half- and
// quarter-warps first, each served on its own.

export const BANKS = 32;
export const BANK_BYTES = 4;
export const WARP = 32;
export const WAVEFRONT_BYTES = BANKS * BANK_BYTES;
export const TILE = 32;
export const PATTERNS = ["strided", "tile column", "tile row"];

export function laneGroups(accessBytes) {
  if (![4, 8, 16].includes(accessBytes)) throw new Error(`access_bytes must be 4, 8 or 16, got ${accessBytes}`);
  return Math.max(1, (WARP * accessBytes) / WAVEFRONT_BYTES);
}

export function conflictReport(byteAddresses, accessBytes = 4) {
  const groups = laneGroups(accessBytes);
  const wordsPerAccess = accessBytes / BANK_BYTES;
  const lanesPerGroup = WARP / groups;
  let wavefronts = 0, ideal = 0, degree = 0;
  for (let g = 0; g < groups; g++) {
    const wordsInBank = new Map();
    for (let lane = g * lanesPerGroup; lane < (g + 1) * lanesPerGroup; lane++) {
      const address = byteAddresses[lane];
      if (address === null || address === undefined) continue;
      for (let k = 0; k < wordsPerAccess; k++) {
        const word = Math.floor(address / BANK_BYTES) + k;
        const bank = word % BANKS;
        if (!wordsInBank.has(bank)) wordsInBank.set(bank, new Set());
        wordsInBank.get(bank).add(word);
      }
    }
    if (wordsInBank.size) {
      let busiest = 0;
      for (const words of wordsInBank.values()) busiest = Math.max(busiest, words.size);
      wavefronts += busiest;
      ideal += 1;
      degree = Math.max(degree, busiest);
    }
  }
  return { wavefronts, ideal, conflicts: wavefronts - ideal, degree };
}

export function elementIndices(pattern, stride, offset, pad, swizzle) {
  if (!PATTERNS.includes(pattern)) throw new Error(`unknown pattern ${pattern}`);
  const pitch = TILE + pad;
  const lanes = [...Array(WARP).keys()];
  if (pattern === "strided") return lanes.map((lane) => offset + lane * stride);
  const fixed = offset % TILE;
  if (pattern === "tile column") return lanes.map((lane) => lane * pitch + (swizzle ? fixed ^ lane : fixed));
  return lanes.map((lane) => fixed * pitch + (swizzle ? lane ^ fixed : lane));
}

export function analyze({ pattern = "strided", stride = 1, offset = 0, element_bytes = 4, pad = 0, swizzle = false }) {
  const addresses = elementIndices(pattern, stride, offset, pad, swizzle).map((i) => i * element_bytes);
  const report = conflictReport(addresses, element_bytes);
  return {
    addresses,
    banks: addresses.map((a) => Math.floor(a / BANK_BYTES) % BANKS),
    rows: addresses.map((a) => Math.floor(Math.floor(a / BANK_BYTES) / BANKS)),
    ...report,
  };
}

// --- drawing ----------------------------------------------------------------------------------------
const laneColor = (lane) => `hsl(${(lane * 360) / WARP}, 70%, 50%)`;
// Black or white, whichever contrasts more with the lane's colour (yellows and greens are light).
function laneTextColor(lane) {
  const h = (lane * 360) / WARP / 30, a = 0.7 * 0.5;
  const channel = (n) => { const k = (n + h) % 12; return 0.5 - a * Math.max(-1, Math.min(k - 3, 9 - k, 1)); };
  const linear = (c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
  const luminance = 0.2126 * linear(channel(0)) + 0.7152 * linear(channel(8)) + 0.0722 * linear(channel(4));
  return luminance > 0.179 ? "#000" : "#fff";
}
const STATE = ["pattern", "stride", "offset", "element_bytes", "pad", "swizzle"];

function control(label, input) {
  const wrap = document.createElement("label");
  wrap.style.cssText = "display:inline-flex;align-items:center;gap:0.4em;margin:0 1.2em 0.4em 0;";
  wrap.append(label, input);
  return wrap;
}

function slider(model, name, min, max) {
  const input = Object.assign(document.createElement("input"), { type: "range", min, max, step: 1 });
  const shown = document.createElement("code");
  const sync = () => { input.value = model.get(name); shown.textContent = String(model.get(name)); };
  input.addEventListener("input", () => { model.set(name, Number(input.value)); model.save_changes(); });
  model.on(`change:${name}`, sync);
  sync();
  const wrap = control(name, input);
  wrap.append(shown);
  return wrap;
}

function select(model, name, options, cast) {
  const input = document.createElement("select");
  for (const o of options) input.append(Object.assign(document.createElement("option"), { value: o, textContent: o }));
  const sync = () => { input.value = String(model.get(name)); };
  input.addEventListener("change", () => { model.set(name, cast(input.value)); model.save_changes(); });
  model.on(`change:${name}`, sync);
  sync();
  return control(name === "element_bytes" ? "element bytes" : name, input);
}

function checkbox(model, name) {
  const input = Object.assign(document.createElement("input"), { type: "checkbox" });
  const sync = () => { input.checked = model.get(name); };
  input.addEventListener("change", () => { model.set(name, input.checked); model.save_changes(); });
  model.on(`change:${name}`, sync);
  sync();
  return control("XOR swizzle", input);
}

function drawGrid(result, elementBytes) {
  // One row per 128-byte row of shared memory that some lane touches; one column per bank.
  const wordsPerAccess = elementBytes / BANK_BYTES;
  const cells = new Map();  // word -> lanes touching it
  result.addresses.forEach((a, lane) => {
    for (let k = 0; k < wordsPerAccess; k++) {
      const word = Math.floor(a / BANK_BYTES) + k;
      if (!cells.has(word)) cells.set(word, []);
      cells.get(word).push(lane);
    }
  });
  const rows = [...new Set([...cells.keys()].map((w) => Math.floor(w / BANKS)))].sort((x, y) => x - y);
  const perBank = new Array(BANKS).fill(0);
  for (const word of cells.keys()) perBank[word % BANKS] += 1;
  const busiest = Math.max(...perBank);

  const table = document.createElement("table");
  table.style.cssText = "border-collapse:collapse;font:11px monospace;margin-top:0.4em;";
  const cellStyle = "width:22px;height:18px;text-align:center;border:1px solid #8884;padding:0;";
  const head = table.insertRow();
  head.insertCell().textContent = "row \\ bank";
  for (let b = 0; b < BANKS; b++) Object.assign(head.insertCell(), { textContent: b }).style.cssText = cellStyle;
  const shownRows = rows.slice(0, 40);
  for (const r of shownRows) {
    const tr = table.insertRow();
    tr.insertCell().textContent = r;
    for (let b = 0; b < BANKS; b++) {
      const td = tr.insertCell();
      td.style.cssText = cellStyle;
      const lanes = cells.get(r * BANKS + b);
      if (lanes) {
        td.style.background = laneColor(lanes[0]);
        td.style.color = laneTextColor(lanes[0]);
        td.textContent = lanes.length > 1 ? `${lanes[0]}+` : lanes[0];
        td.title = `word ${r * BANKS + b}, bank ${b}: lane${lanes.length > 1 ? "s" : ""} ${lanes.join(", ")}`;
      }
    }
  }
  const foot = table.insertRow();
  foot.insertCell().textContent = "words/bank";
  for (let b = 0; b < BANKS; b++) {
    const td = foot.insertCell();
    td.style.cssText = cellStyle + (perBank[b] === busiest && busiest > 1 ? "background:#d62728;color:#fff;" : "");
    td.textContent = perBank[b] || "";
  }
  const note = document.createElement("div");
  note.style.cssText = "font-size:0.85em;opacity:0.8;";
  note.textContent = (rows.length > shownRows.length ? `first ${shownRows.length} of ${rows.length} rows shown. ` : "")
    + "Cell = one 4-byte word, coloured by the first lane that reads it (n+ = several lanes: a broadcast).";
  const box = document.createElement("div");
  box.append(table, note);
  return box;
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.style.cssText = "font-family:sans-serif;font-size:14px;overflow-x:auto;";
  const controls = document.createElement("div");
  controls.append(
    select(model, "pattern", PATTERNS, String),
    slider(model, "stride", 0, 64),
    slider(model, "offset", 0, 31),
    select(model, "element_bytes", [4, 8], Number),
    slider(model, "pad", 0, 4),
    checkbox(model, "swizzle"),
  );
  const summary = document.createElement("div");
  summary.style.cssText = "margin:0.3em 0;font-weight:bold;";
  const grid = document.createElement("div");
  const update = () => {
    const state = Object.fromEntries(STATE.map((k) => [k, model.get(k)]));
    const r = analyze(state);
    const kind = r.degree === 1 ? "conflict-free" : `${r.degree}-way bank conflict`;
    const split = r.ideal > 1 ? ` (${r.ideal} lane groups of ${WARP / r.ideal})` : "";
    summary.textContent = `${kind}: ${r.wavefronts} wavefront${r.wavefronts > 1 ? "s" : ""} for an ideal `
      + `${r.ideal}${split}; Nsight Compute would count ${r.conflicts} bank conflict${r.conflicts === 1 ? "" : "s"}`;
    grid.replaceChildren(drawGrid(r, state.element_bytes));
  };
  for (const k of STATE) model.on(`change:${k}`, update);
  update();
  root.append(controls, summary, grid);
  el.replaceChildren(root);
}

export default { render };
