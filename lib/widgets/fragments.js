// Which lane of a warp holds which element of an mma.sync operand: the layouts of lib/mma.py's LAYOUTS
// (tests/test_fragments_widget.py runs both and compares), and an anywidget view where hovering a lane shows
// its elements and hovering an element shows its lane. No Python kernel is needed.

export const WARP = 32;
export const SHAPES = ["m16n8k8.tf32", "m16n8k16.f16"];
export const OPERANDS = ["A", "B", "C"];

// (row, col) of element i of `lane`'s fragment; g = lane >> 2 is the lane's group, t = lane & 3 its place.
const ELEMENT = {
  "m16n8k8.tf32": {
    A: (g, t, i) => [g + 8 * (i & 1), t + 4 * (i >> 1)],
    B: (g, t, i) => [t + 4 * i, g],
  },
  "m16n8k16.f16": {
    A: (g, t, i) => [g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)],
    B: (g, t, i) => [2 * t + (i & 1) + 8 * (i >> 1), g],
  },
};
const C_ELEMENT = (g, t, i) => [g + 8 * (i >> 1), 2 * t + (i & 1)];
const SIZE = {
  "m16n8k8.tf32": { A: [16, 8, 4], B: [8, 8, 2], C: [16, 8, 4] },
  "m16n8k16.f16": { A: [16, 16, 8], B: [16, 8, 4], C: [16, 8, 4] },
};

export function layout(shape, operand) {
  if (!SIZE[shape] || !SIZE[shape][operand]) throw new Error(`no layout for ${shape} ${operand}`);
  const [rows, cols, perLane] = SIZE[shape][operand];
  const element = operand === "C" ? C_ELEMENT : ELEMENT[shape][operand];
  return { rows, cols, perLane, element: (lane, i) => element(lane >> 2, lane & 3, i) };
}

export function laneElements(shape, operand, lane) {
  const { perLane, element } = layout(shape, operand);
  return Array.from({ length: perLane }, (_, i) => element(lane, i));
}

// owners[row][col] = [lane, i]
export function owners(shape, operand) {
  const { rows, cols, perLane, element } = layout(shape, operand);
  const out = Array.from({ length: rows }, () => Array.from({ length: cols }, () => null));
  for (let lane = 0; lane < WARP; lane++)
    for (let i = 0; i < perLane; i++) {
      const [r, c] = element(lane, i);
      out[r][c] = [lane, i];
    }
  return out;
}

// --- the view ------------------------------------------------------------------------------------------
const GROUP_COLOURS = ["#3b7dd8", "#e07b39", "#2a9d6f", "#b04fc4", "#c9a227", "#d1495b", "#4aa3b5", "#7a8b3c"];
const REGISTER_NAME = { A: "a", B: "b", C: "c" };

function picker(label, options, value) {
  const row = document.createElement("label");
  row.style.cssText = "margin-right:1.2em";
  row.append(`${label} `);
  const select = document.createElement("select");
  for (const o of options) {
    const opt = document.createElement("option");
    opt.value = opt.textContent = o;
    select.append(opt);
  }
  select.value = value;
  row.append(select);
  return { row, select };
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.style.cssText = "font-family:sans-serif;font-size:13px;max-width:680px;padding:0.5em 0";
  const shape = picker("shape", SHAPES, model.get("shape"));
  const operand = picker("operand", OPERANDS, model.get("operand"));
  const controls = document.createElement("div");
  controls.append(shape.row, operand.row);
  const lanes = document.createElement("div");
  lanes.className = "fragment-lanes";
  lanes.style.cssText = "display:grid;grid-template-columns:repeat(16,1fr);gap:2px;margin:0.6em 0;max-width:640px";
  const matrix = document.createElement("div");
  matrix.className = "fragment-matrix";
  const info = document.createElement("div");
  info.className = "fragment-info";
  info.style.cssText = "min-height:2.6em;margin-top:0.4em";
  root.append(controls, lanes, matrix, info);
  el.append(root);

  let laneCells = [], elementCells = [];

  function highlight(lane, element) {
    const s = model.get("shape"), op = model.get("operand");
    const mine = lane === null ? [] : laneElements(s, op, lane).map(([r, c]) => `${r},${c}`);
    for (const cell of elementCells) {
      const on = mine.includes(cell.dataset.rc) || cell.dataset.rc === element;
      cell.style.outline = on ? "3px solid #111" : "none";
      cell.style.opacity = lane === null || on ? "1" : "0.35";
    }
    for (const cell of laneCells) cell.style.outline = Number(cell.dataset.lane) === lane ? "3px solid #111" : "none";
    if (lane === null) {
      info.textContent = "Hover a lane to see the elements it holds, or an element to see its lane.";
      return;
    }
    const names = laneElements(s, op, lane).map(([r, c], i) => `${REGISTER_NAME[op]}${i} = ${op}[${r}][${c}]`);
    info.textContent = `lane ${lane} (group ${lane >> 2}, thread ${lane & 3} in group) holds ` + names.join(", ");
  }

  function draw() {
    const s = model.get("shape"), op = model.get("operand");
    const { rows, cols } = layout(s, op);
    const own = owners(s, op);
    lanes.innerHTML = "";
    laneCells = [];
    for (let lane = 0; lane < WARP; lane++) {
      const cell = document.createElement("div");
      cell.className = "fragment-lane";
      cell.dataset.lane = lane;
      cell.textContent = lane;
      cell.style.cssText = `text-align:center;border-radius:3px;color:white;cursor:default;padding:1px 0;` +
        `background:${GROUP_COLOURS[lane >> 2]}`;
      cell.addEventListener("mouseenter", () => highlight(lane, null));
      lanes.append(cell);
      laneCells.push(cell);
    }
    matrix.innerHTML = "";
    matrix.style.cssText = `display:grid;grid-template-columns:2.2em repeat(${cols},minmax(1.9em,2.6em));gap:1px`;
    elementCells = [];
    matrix.append(document.createElement("div"));
    for (let c = 0; c < cols; c++) {
      const head = document.createElement("div");
      head.textContent = c;
      head.style.cssText = "text-align:center;opacity:0.6";
      matrix.append(head);
    }
    for (let r = 0; r < rows; r++) {
      const head = document.createElement("div");
      head.textContent = r;
      head.style.cssText = "text-align:right;padding-right:0.3em;opacity:0.6";
      matrix.append(head);
      for (let c = 0; c < cols; c++) {
        const [lane, i] = own[r][c];
        const cell = document.createElement("div");
        cell.className = "fragment-element";
        cell.dataset.rc = `${r},${c}`;
        cell.dataset.lane = lane;
        cell.textContent = `T${lane}`;
        cell.title = `${op}[${r}][${c}]: ${REGISTER_NAME[op]}${i} of lane ${lane}`;
        cell.style.cssText = `text-align:center;font-size:11px;color:white;border-radius:2px;padding:2px 0;` +
          `background:${GROUP_COLOURS[lane >> 2]}`;
        cell.addEventListener("mouseenter", () => {
          highlight(lane, `${r},${c}`);
          info.textContent = `${op}[${r}][${c}] is ${REGISTER_NAME[op]}${i} of lane ${lane} ` +
            `(group ${lane >> 2}, thread ${lane & 3} in group)`;
        });
        matrix.append(cell);
        elementCells.push(cell);
      }
    }
    highlight(model.get("lane") >= 0 ? model.get("lane") : null, null);
  }

  shape.select.addEventListener("change", () => { model.set("shape", shape.select.value); model.save_changes(); });
  operand.select.addEventListener("change", () => { model.set("operand", operand.select.value); model.save_changes(); });
  for (const name of ["shape", "operand", "lane"]) model.on(`change:${name}`, draw);
  draw();
}

export default { render };
