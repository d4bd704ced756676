// The swizzle and descriptor explorer: where each element of a K-major wgmma operand tile lands in shared
// memory (byte address, bank, 16-byte chunk) for each swizzle mode, what the descriptor's LBO and SBO say,
// the descriptor's 64 bits, the bytes one wgmma reads through it, and which thread of the warpgroup owns
// each element of an m64nN accumulator. The maths is the JavaScript twin of lib/hw/wgmma_layout.py
// (tests/test_swizzle_widget.py runs both and compares); no Python kernel is needed on the page.

export const MODES = ["none", "32B", "64B", "128B"];
export const MODE_BITS = { none: 0, "128B": 1, "64B": 2, "32B": 3 };   // the descriptor's bits 62-63
export const SPAN = { none: 0, "128B": 128, "64B": 64, "32B": 32 };    // bytes per swizzled row
const MASK = { none: 0, "128B": 7, "64B": 3, "32B": 1 };
export const WARPGROUP = 128;
export const N_SIZES = [8, 16, 32, 64, 128, 256];
export const ROWS = [8, 16, 32, 64];
export const ITEMSIZES = [2, 4];
export const STARTS = [0, 1024, 4096, 8192];
const KBYTES_NONE = [16, 32, 64, 128];   // K bytes per row offered in the no-swizzle layout

function checkMode(mode) {
  if (!(mode in SPAN)) throw new Error(`swizzle mode must be one of ${MODES.join(", ")}, got ${mode}`);
}

// The address a swizzled access touches: chunk bits [4, 7) XORed with bits [7, 10) / [7, 9) / bit 7.
export function swizzle(addr, mode) {
  checkMode(mode);
  if (mode === "none") return addr;
  return addr ^ (((addr >> 7) & MASK[mode]) << 4);
}

// K elements per row a tile may have: free (whole 16-byte chunks) without swizzle, one swizzle row otherwise.
export function kChoices(mode, itemsize) {
  checkMode(mode);
  return mode === "none" ? KBYTES_NONE.map((b) => b / itemsize) : [SPAN[mode] / itemsize];
}

// bytes[r][k]: the byte offset of element (r, k) of a rows × kelems K-major tile, with the descriptor's
// strides (lib.hw.wgmma_layout.kmajor_layout, in bytes rather than elements).
export function kmajorLayout(rows, kelems, itemsize, mode) {
  checkMode(mode);
  let lbo, sbo, at;
  if (mode === "none") {
    const perCore = 16 / itemsize;
    lbo = 128;
    sbo = 128 * Math.floor(kelems / perCore);
    at = (r, k) => (r % 8) * 16 + Math.floor(k / perCore) * lbo + Math.floor(r / 8) * sbo + (k % perCore) * itemsize;
  } else {
    const span = SPAN[mode];
    if (kelems * itemsize !== span)
      throw new Error(`a ${mode}-swizzled K-major tile holds ${span} bytes of K per row, not ${kelems * itemsize}`);
    lbo = 16;
    sbo = 8 * span;
    at = (r, k) => swizzle(r * span + k * itemsize, mode);
  }
  const bytes = Array.from({ length: rows }, (_, r) => Array.from({ length: kelems }, (_, k) => at(r, k)));
  return { bytes, lbo, sbo, kstep: 32 };
}

// The 64-bit descriptor (BigInt): start >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, mode in 62-63.
export function makeDescriptor(addr, lbo, sbo, mode) {
  checkMode(mode);
  return BigInt((addr & 0x3ffff) >> 4) | (BigInt((lbo >> 4) & 0x3fff) << 16n) |
    (BigInt((sbo >> 4) & 0x3fff) << 32n) | (BigInt(MODE_BITS[mode]) << 62n);
}

export function decodeDescriptor(desc) {
  const d = BigInt.asUintN(64, BigInt(desc));
  const byBits = Object.fromEntries(Object.entries(MODE_BITS).map(([k, v]) => [v, k]));
  return {
    start: Number(d & 0x3fffn) << 4, lbo: Number((d >> 16n) & 0x3fffn) << 4,
    sbo: Number((d >> 32n) & 0x3fffn) << 4, base_offset: Number((d >> 49n) & 7n), mode: byBits[Number(d >> 62n)],
  };
}

// addr[r][b]: the shared address of byte b of K of row r that one wgmma reads through `desc`.
export function operandAddresses(desc, rows, kbytes = 32) {
  const { start, lbo, sbo, base_offset, mode } = decodeDescriptor(desc);
  const span = SPAN[mode];
  if (mode !== "none" && (base_offset || start % (8 * span) >= span || (start % span) + kbytes > span))
    throw new Error(`wgmma descriptor starts at shared address 0x${start.toString(16)}, which is not in the first ` +
      `${span}-byte row of a ${8 * span}-byte ${mode} swizzle atom`);
  return Array.from({ length: rows }, (_, r) => Array.from({ length: kbytes }, (_, b) => mode === "none"
    ? start + (r % 8) * 16 + Math.floor(r / 8) * sbo + Math.floor(b / 16) * lbo + (b % 16)
    : swizzle(start + (r % 8) * span + Math.floor(r / 8) * sbo + b, mode)));
}

// The start address of the descriptor of wgmma K step s (32 bytes of K each): two core matrices (2 LBO)
// further without swizzle, 32 bytes further inside the swizzle row otherwise.
export function stepStart(start, lbo, mode, step) {
  return start + step * (mode === "none" ? 2 * lbo : 32);
}

// (row, col) in the m64nN accumulator of register i of warpgroup thread tid.
export function accElement(tid, i) {
  const w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  return [16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)];
}

export const bankOf = (addr) => (addr >> 2) & 31;          // 32 banks of 4 bytes
export const chunkOf = (addr) => (addr >> 4) & 7;          // 16-byte chunk within its 128-byte line

// --- the view ------------------------------------------------------------------------------------------
const ROW_COLOURS = ["#3b7dd8", "#e07b39", "#2a9d6f", "#b04fc4", "#c9a227", "#d1495b", "#4aa3b5", "#7a8b3c"];
const hex = (v, digits) => "0x" + v.toString(16).padStart(digits, "0");

function labelled(label, input) {
  const row = document.createElement("label");
  row.style.cssText = "margin-right:1em;white-space:nowrap;display:inline-block;margin-bottom:0.3em";
  row.append(`${label} `, input);
  return row;
}

function select(options, value, text = (o) => String(o)) {
  const s = document.createElement("select");
  for (const o of options) {
    const opt = document.createElement("option");
    opt.value = String(o);
    opt.textContent = text(o);
    s.append(opt);
  }
  s.value = String(value);
  return s;
}

function number(min, max, value) {
  const n = document.createElement("input");
  n.type = "number";
  n.min = String(min);
  n.max = String(max);
  n.value = String(value);
  n.style.width = "4.5em";
  return n;
}

function para(cls) {
  const p = document.createElement("div");
  p.className = cls;
  p.style.cssText = "margin:0.35em 0;line-height:1.45";
  return p;
}

function canvas(cls) {
  const c = document.createElement("canvas");
  c.className = cls;
  c.style.cssText = "display:block;width:100%;max-width:640px;margin:0.3em 0";
  return c;
}

const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, Number.isFinite(v) ? Math.trunc(v) : lo));

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "swizzle-explorer";
  root.style.cssText = "font-family:sans-serif;font-size:13px;max-width:680px;padding:0.5em 0";
  const mode = select(MODES, model.get("mode"));
  const itemsize = select(ITEMSIZES, model.get("itemsize"), (b) => (b === 2 ? "2 (FP16/BF16)" : "4 (TF32)"));
  const rows = select(ROWS, model.get("rows"));
  const kelems = select([model.get("kelems")], model.get("kelems"));
  const start = select(STARTS, model.get("start"), (a) => hex(a, 4));
  const step = select([0], 0);
  const row = number(0, 63, model.get("row"));
  const k = number(0, 63, model.get("k"));
  const n = select(N_SIZES, model.get("n"));
  const thread = number(0, WARPGROUP - 1, model.get("thread"));
  const controls = document.createElement("div");
  controls.append(labelled("swizzle", mode), labelled("element bytes", itemsize), labelled("rows", rows),
    labelled("K elements", kelems), labelled("tile start", start));
  const pick = document.createElement("div");
  pick.append(labelled("element row", row), labelled("element k", k), labelled("wgmma K step", step));
  const elementInfo = para("swizzle-element");
  const strides = para("swizzle-strides");
  const descInfo = para("swizzle-descriptor");
  const memory = canvas("swizzle-memory");
  const hover = para("swizzle-hover");
  hover.style.minHeight = "1.4em";
  const accHead = document.createElement("div");
  accHead.style.marginTop = "0.8em";
  accHead.append(labelled("accumulator N", n), labelled("thread", thread));
  const accInfo = para("swizzle-acc");
  const acc = canvas("swizzle-acc-grid");
  const accHover = para("swizzle-acc-hover");
  accHover.style.minHeight = "1.4em";
  root.append(controls, pick, elementInfo, strides, descInfo, memory, hover, accHead, accInfo, acc, accHover);
  el.append(root);

  let tile = null;   // the current layout, kept for hovering

  // The state as the model holds it, with K fitted to the mode (a swizzled row is exactly one span of K).
  function state() {
    const m = model.get("mode"), item = model.get("itemsize");
    const ks = kChoices(m, item);
    const want = model.get("kelems");
    const ke = ks.includes(want) ? want : ks[Math.min(1, ks.length - 1)];
    mode.value = m;
    itemsize.value = String(item);
    rows.value = String(model.get("rows"));
    start.value = String(model.get("start"));
    row.value = String(model.get("row"));
    k.value = String(model.get("k"));
    return { mode: m, itemsize: item, rows: model.get("rows"), kelems: ke, ks, start: model.get("start") };
  }

  function refillKelems(s) {
    kelems.innerHTML = "";
    for (const v of s.ks) {
      const opt = document.createElement("option");
      opt.value = opt.textContent = String(v);
      kelems.append(opt);
    }
    kelems.value = String(s.kelems);
    kelems.disabled = s.ks.length === 1;
  }

  function refillSteps(kbytes) {
    const steps = kbytes / 32 >= 1 ? kbytes / 32 : 0;
    const keep = Number(step.value);
    step.innerHTML = "";
    for (let s = 0; s < Math.max(steps, 1); s++) {
      const opt = document.createElement("option");
      opt.value = String(s);
      opt.textContent = steps ? String(s) : "— (K < 32 bytes)";
      step.append(opt);
    }
    step.value = String(keep < steps ? keep : 0);
    step.disabled = steps <= 1;
    return steps;
  }

  function draw() {
    const s = state();
    refillKelems(s);
    const lay = kmajorLayout(s.rows, s.kelems, s.itemsize, s.mode);
    const kbytes = s.kelems * s.itemsize;
    const steps = refillSteps(kbytes);
    const r = clamp(Number(row.value), 0, s.rows - 1), kk = clamp(Number(k.value), 0, s.kelems - 1);
    row.max = String(s.rows - 1);
    k.max = String(s.kelems - 1);
    if (String(r) !== row.value) row.value = String(r);
    if (String(kk) !== k.value) k.value = String(kk);
    const byte = s.start + lay.bytes[r][kk];
    elementInfo.textContent = `A[${r}][${kk}] → byte ${byte} (${hex(byte, 4)}), bank ${bankOf(byte)}, ` +
      `16-byte chunk ${chunkOf(byte)} of its 128-byte line (unswizzled it would be chunk ` +
      `${chunkOf(s.start + (s.mode === "none" ? lay.bytes[r][kk] : r * SPAN[s.mode] + kk * s.itemsize))}).`;
    if (s.mode === "none") {
      strides.textContent = `No swizzle: the tile is cut into core matrices of 8 rows × 16 bytes (${16 / s.itemsize} ` +
        `elements), each stored whole in 128 bytes. LBO = ${lay.lbo} B is the distance between core matrices ` +
        `that are neighbours along K; SBO = ${lay.sbo} B is the distance between 8-row groups (one group holds ` +
        `${kbytes / 16} core matrices along K).`;
    } else {
      strides.textContent = `${s.mode} swizzle: each row holds ${SPAN[s.mode]} bytes of K (${s.kelems} elements), ` +
        `8 rows form a ${8 * SPAN[s.mode]}-byte atom, and inside it chunk c of row r is stored at chunk c XOR ` +
        `(address bits 7 and up, masked to ${MASK[s.mode] + 1} values). SBO = ${lay.sbo} B is the distance between ` +
        `atoms; LBO (${lay.lbo}) is not used by a K-major swizzled operand. The tile must start on a ` +
        `${8 * SPAN[s.mode]}-byte boundary, as the XOR reads absolute address bits.`;
    }
    let read = new Set();
    if (steps) {
      const st = Number(step.value);
      const addr = stepStart(s.start, lay.lbo, s.mode, st);
      const desc = makeDescriptor(addr, lay.lbo, lay.sbo, s.mode);
      const d = decodeDescriptor(desc);
      descInfo.textContent = `descriptor of wgmma K step ${st}: start ${hex(d.start, 4)}, LBO ${d.lbo} B, ` +
        `SBO ${d.sbo} B, swizzle ${d.mode} (bits 62-63 = ${MODE_BITS[d.mode]}) = ${hex(desc, 16)}; the outlined ` +
        `chunks are the ${s.rows} × 32 bytes it reads.`;
      for (const line of operandAddresses(desc, s.rows)) for (const a of line) read.add(a >> 4);
    } else {
      descInfo.textContent = `a wgmma reads 32 bytes of K per row: this tile (${kbytes} bytes of K) is too narrow ` +
        `for one.`;
    }
    // shared memory as 128-byte lines of eight 16-byte chunks: which (row, chunk) of the tile each holds
    const lines = Math.ceil((s.rows * kbytes) / 128);
    const where = new Map();   // absolute chunk index -> [row, logical chunk]
    for (let rr = 0; rr < s.rows; rr++)
      for (let c = 0; c < kbytes / 16; c++) where.set((s.start + lay.bytes[rr][(c * 16) / s.itemsize]) >> 4, [rr, c]);
    tile = { s, lay, where, lines, kbytes };
    const cw = 76, ch = 18, left = 58, top = 18;
    memory.width = left + 8 * cw;
    memory.height = top + lines * ch + 2;
    const g = memory.getContext("2d");
    const fg = getComputedStyle(root).color;
    g.clearRect(0, 0, memory.width, memory.height);
    g.font = "11px sans-serif";
    g.textBaseline = "middle";
    g.fillStyle = fg;
    for (let c = 0; c < 8; c++) g.fillText(`banks ${4 * c}-${4 * c + 3}`, left + c * cw + 6, top / 2);
    const mine = (s.start + lay.bytes[r][kk]) >> 4;
    for (let line = 0; line < lines; line++) {
      g.fillStyle = fg;
      g.fillText(hex(s.start + 128 * line, 4), 2, top + line * ch + ch / 2);
      for (let c = 0; c < 8; c++) {
        const idx = (s.start >> 4) + 8 * line + c;
        const owner = where.get(idx);
        if (!owner) continue;
        g.fillStyle = ROW_COLOURS[owner[0] % 8];
        g.fillRect(left + c * cw + 1, top + line * ch + 1, cw - 2, ch - 2);
        g.fillStyle = "#fff";
        g.fillText(`r${owner[0]} c${owner[1]}`, left + c * cw + 6, top + line * ch + ch / 2);
        if (read.has(idx) || idx === mine) {
          g.strokeStyle = idx === mine ? "#000" : fg;
          g.lineWidth = idx === mine ? 3 : 1.5;
          g.strokeRect(left + c * cw + 2, top + line * ch + 2, cw - 4, ch - 4);
        }
      }
    }
    memory.onmousemove = (ev) => {
      const box = memory.getBoundingClientRect();
      const x = ((ev.clientX - box.left) * memory.width) / box.width, y = ((ev.clientY - box.top) * memory.height) / box.height;
      const c = Math.floor((x - left) / cw), line = Math.floor((y - top) / ch);
      const owner = c >= 0 && c < 8 && line >= 0 ? where.get((s.start >> 4) + 8 * line + c) : undefined;
      if (!owner) { hover.textContent = ""; return; }
      const addr = s.start + 128 * line + 16 * c, per = 16 / s.itemsize;
      hover.textContent = `bytes ${hex(addr, 4)}-${hex(addr + 15, 4)} (banks ${bankOf(addr)}-${bankOf(addr) + 3}) hold ` +
        `row ${owner[0]}, K elements ${owner[1] * per}-${owner[1] * per + per - 1} (its chunk ${owner[1]})`;
    };
    drawAcc();
  }

  function drawAcc() {
    const nn = model.get("n"), tid = clamp(model.get("thread"), 0, WARPGROUP - 1);
    n.value = String(nn);
    thread.value = String(tid);
    const regs = nn / 2, lane = tid & 31;
    const owned = Array.from({ length: regs }, (_, i) => accElement(tid, i));
    const shown = owned.slice(0, 8).map(([rr, cc], i) => `c${i} → C[${rr}][${cc}]`).join(", ");
    accInfo.textContent = `thread ${tid} (warp ${tid >> 5}, lane ${lane}: g ${lane >> 2}, t ${lane & 3}) holds ` +
      `${regs} of the 64 × ${nn} accumulator's float32: ${shown}${regs > 8 ? ", …" : ""}. Warp w owns rows ` +
      `16w to 16w + 15; the pattern of mma.sync's C fragment repeats every 8 columns.`;
    const cell = Math.max(2, Math.min(14, Math.floor(620 / nn)));
    acc.width = nn * cell + 2;
    acc.height = 64 * cell + 2;
    const g = acc.getContext("2d");
    g.clearRect(0, 0, acc.width, acc.height);
    for (let t = 0; t < WARPGROUP; t++)
      for (let i = 0; i < regs; i++) {
        const [rr, cc] = accElement(t, i);
        g.fillStyle = t === tid ? "#000" : ROW_COLOURS[(t >> 2) % 8];
        g.globalAlpha = t === tid ? 1 : 0.35 + 0.65 * ((t >> 5) % 2);
        g.fillRect(1 + cc * cell, 1 + rr * cell, cell - (cell > 4 ? 1 : 0), cell - (cell > 4 ? 1 : 0));
      }
    g.globalAlpha = 1;
    acc.onmousemove = (ev) => {
      const box = acc.getBoundingClientRect();
      const cc = Math.floor((((ev.clientX - box.left) * acc.width) / box.width - 1) / cell);
      const rr = Math.floor((((ev.clientY - box.top) * acc.height) / box.height - 1) / cell);
      if (rr < 0 || rr >= 64 || cc < 0 || cc >= nn) { accHover.textContent = ""; return; }
      const w = rr >> 4, gg = rr & 7, t = (cc & 7) >> 1;
      const owner = 32 * w + 4 * gg + t, i = 4 * (cc >> 3) + 2 * ((rr >> 3) & 1) + (cc & 1);
      accHover.textContent = `C[${rr}][${cc}] is register c${i} of thread ${owner} (warp ${w}, lane ${owner & 31})`;
    };
  }

  const sync = (name, value) => { model.set(name, value); model.save_changes(); };
  mode.addEventListener("change", () => sync("mode", mode.value));
  itemsize.addEventListener("change", () => sync("itemsize", Number(itemsize.value)));
  rows.addEventListener("change", () => sync("rows", Number(rows.value)));
  kelems.addEventListener("change", () => sync("kelems", Number(kelems.value)));
  start.addEventListener("change", () => sync("start", Number(start.value)));
  step.addEventListener("change", draw);
  for (const [input, name] of [[row, "row"], [k, "k"], [thread, "thread"]])
    input.addEventListener("input", () => sync(name, clamp(Number(input.value), 0, 255)));
  n.addEventListener("change", () => sync("n", Number(n.value)));
  for (const name of ["mode", "itemsize", "rows", "kelems", "start", "row", "k"]) model.on(`change:${name}`, draw);
  for (const name of ["n", "thread"]) model.on(`change:${name}`, drawAcc);
  draw();
}

export default { render };
