// The occupancy calculator in the browser: the same maths as lib/occupancy.py (the tests run both on a grid
// of inputs and compare), and an anywidget view with sliders that needs no Python kernel.

const WARP_SIZE = 32;
const MAX_THREADS_PER_BLOCK = 1024;
const MAX_REGS_PER_THREAD = 255;
const REGS_PER_BLOCK = 65536;
const REG_ALLOCATION_UNIT = 256;
const SUBPARTITIONS = 4;
const DEFAULT_SMEM_PER_BLOCK = 48 * 1024;
const LIMITS = ["warps", "blocks", "registers", "shared memory"];

const ceilDiv = (x, unit) => Math.floor((x + unit - 1) / unit);
const roundUp = (x, unit) => ceilDiv(x, unit) * unit;

// Resident blocks per SM and the resources that limit them; `g` is lib.occupancy.limits_for(spec).
export function occupancy(g, threads, regsPerThread, smemPerBlock) {
  const maxWarps = Math.floor(g.max_threads_per_sm / WARP_SIZE);
  const warpsPerBlock = ceilDiv(threads, WARP_SIZE);
  const regsPerWarp = roundUp(regsPerThread * WARP_SIZE, REG_ALLOCATION_UNIT);
  const regsPerBlock = regsPerWarp * warpsPerBlock;
  const smemAllocated = roundUp(smemPerBlock + g.smem_reserved_per_block, g.smem_granularity);
  const smemLimit =
    (smemPerBlock <= DEFAULT_SMEM_PER_BLOCK ? DEFAULT_SMEM_PER_BLOCK : g.smem_per_block_optin) +
    g.smem_reserved_per_block;

  let error = "";
  if (!(threads >= 1 && threads <= MAX_THREADS_PER_BLOCK)) {
    error = `a block has 1 to ${MAX_THREADS_PER_BLOCK} threads`;
  } else if (!(regsPerThread >= 0 && regsPerThread <= MAX_REGS_PER_THREAD)) {
    error = `a thread has at most ${MAX_REGS_PER_THREAD} registers`;
  } else if (Math.max(regsPerBlock, regsPerWarp * roundUp(warpsPerBlock, SUBPARTITIONS)) > REGS_PER_BLOCK) {
    error = `the block needs more than the ${REGS_PER_BLOCK.toLocaleString("en-US")} registers one block may have`;
  } else if (smemPerBlock < 0 || smemAllocated > smemLimit) {
    error = `the block needs more than the ${Math.floor(g.smem_per_block_optin / 1024)} KB of shared memory one block may have`;
  }
  let limits;
  if (error) {
    limits = { warps: 0, blocks: 0, registers: 0, "shared memory": 0 };
  } else {
    const warpsByRegs = regsPerWarp
      ? Math.floor(Math.floor(g.regs_per_sm / SUBPARTITIONS) / regsPerWarp) * SUBPARTITIONS
      : null;
    limits = {
      warps: Math.floor(maxWarps / warpsPerBlock),
      blocks: g.max_blocks_per_sm,
      registers: warpsByRegs === null ? null : Math.floor(warpsByRegs / warpsPerBlock),
      "shared memory": smemAllocated ? Math.floor(g.smem_per_sm / smemAllocated) : null,
    };
  }
  const blocks = Math.min(...LIMITS.map((k) => limits[k]).filter((v) => v !== null));
  return {
    blocks,
    warps: blocks * warpsPerBlock,
    threads: blocks * threads,
    occupancy: (blocks * warpsPerBlock) / maxWarps,
    limits,
    limiting: error ? [] : LIMITS.filter((k) => limits[k] === blocks),
    regs_per_block: regsPerBlock,
    smem_per_block: smemAllocated,
    error,
  };
}

// --- the view ------------------------------------------------------------------------------------------
const BLOCK_COLOURS = ["#3b7dd8", "#e07b39", "#2a9d6f", "#b04fc4", "#c9a227", "#d1495b", "#4aa3b5", "#7a8b3c"];

function slider(label, min, max, step, value, unit) {
  const row = document.createElement("label");
  row.style.cssText = "display:grid;grid-template-columns:13em 1fr 7em;align-items:center;gap:0.6em;margin:0.2em 0";
  const name = document.createElement("span");
  name.textContent = label;
  const input = document.createElement("input");
  Object.assign(input, { type: "range", min, max, step, value });
  const shown = document.createElement("code");
  row.append(name, input, shown);
  const show = () => (shown.textContent = `${Number(input.value).toLocaleString("en-US")} ${unit}`);
  show();
  input.addEventListener("input", show);
  return { row, input };
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.style.cssText = "font-family:sans-serif;font-size:14px;max-width:760px;padding:0.5em 0";
  const gpuRow = document.createElement("label");
  gpuRow.style.cssText = "display:block;margin-bottom:0.3em";
  gpuRow.textContent = "GPU ";
  const select = document.createElement("select");
  for (const name of Object.keys(model.get("gpus"))) {
    const opt = document.createElement("option");
    opt.value = opt.textContent = name;
    select.append(opt);
  }
  select.value = model.get("gpu");
  gpuRow.append(select);
  const threads = slider("threads per block", 32, 1024, 32, model.get("threads"), "");
  const regs = slider("registers per thread", 16, 255, 1, model.get("registers"), "");
  const smem = slider("shared memory per block", 0, 227 * 1024, 256, model.get("shared_bytes"), "B");
  const summary = document.createElement("div");
  summary.style.cssText = "margin:0.5em 0;font-size:15px";
  const table = document.createElement("table");
  table.style.cssText = "border-collapse:collapse;margin:0.3em 0";
  const slots = document.createElement("div");
  slots.style.cssText = "display:grid;grid-template-columns:repeat(16,1fr);gap:2px;max-width:560px";
  const caption = document.createElement("div");
  caption.style.cssText = "font-size:12px;opacity:0.8;margin-top:0.2em";
  root.append(gpuRow, threads.row, regs.row, smem.row, summary, table, slots, caption);
  el.append(root);

  function draw() {
    const g = model.get("gpus")[model.get("gpu")];
    const t = model.get("threads"), r = model.get("registers"), s = model.get("shared_bytes");
    const res = occupancy(g, t, r, s);
    summary.innerHTML = res.error
      ? `<b style="color:#cf222e">Does not launch:</b> ${res.error}.`
      : `<b>${res.blocks}</b> blocks &times; ${ceilDiv(t, WARP_SIZE)} warps = <b>${res.warps}</b> of ` +
        `${g.max_threads_per_sm / WARP_SIZE} warps per SM (<b>${Math.round(100 * res.occupancy)}%</b> occupancy), ` +
        `limited by <b>${res.limiting.join(" and ")}</b>.`;
    table.innerHTML =
      "<tr><th style='text-align:left;padding:0 1em 0 0'>resource</th><th style='text-align:right'>blocks it allows</th></tr>" +
      LIMITS.map((k) => {
        const v = res.limits[k] === null ? "no limit" : res.limits[k];
        const bold = res.limiting.includes(k) ? "font-weight:bold;color:#cf222e" : "";
        return `<tr style="${bold}"><td style="padding:0 1em 0 0">${k}</td><td style="text-align:right">${v}</td></tr>`;
      }).join("");
    slots.innerHTML = "";
    const maxWarps = g.max_threads_per_sm / WARP_SIZE;
    const perBlock = ceilDiv(t, WARP_SIZE);
    for (let w = 0; w < maxWarps; w++) {
      const cell = document.createElement("div");
      const used = w < res.warps;
      cell.style.cssText = `height:14px;border-radius:2px;border:1px solid #8888;background:${
        used ? BLOCK_COLOURS[Math.floor(w / perBlock) % BLOCK_COLOURS.length] : "transparent"}`;
      cell.title = used ? `warp ${w}: block ${Math.floor(w / perBlock)}` : `warp slot ${w}: empty`;
      slots.append(cell);
    }
    caption.textContent =
      `${maxWarps} warp slots of one SM, coloured by resident block. Allocated per block: ` +
      `${res.regs_per_block.toLocaleString("en-US")} registers, ${res.smem_per_block.toLocaleString("en-US")} B shared ` +
      `(incl. ${g.smem_reserved_per_block} B reserved).`;
  }

  select.addEventListener("change", () => { model.set("gpu", select.value); model.save_changes(); });
  threads.input.addEventListener("input", () => { model.set("threads", Number(threads.input.value)); model.save_changes(); });
  regs.input.addEventListener("input", () => { model.set("registers", Number(regs.input.value)); model.save_changes(); });
  smem.input.addEventListener("input", () => { model.set("shared_bytes", Number(smem.input.value)); model.save_changes(); });
  for (const name of ["gpu", "threads", "registers", "shared_bytes"]) model.on(`change:${name}`, draw);
  draw();
}

export default { render };
