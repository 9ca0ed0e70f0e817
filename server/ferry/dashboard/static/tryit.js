// "Try an image": send one image to a model's image endpoint (/classify, /detect, /embed, /recognize
// or /ocr) and show the answer (top-k table, boxes drawn over the image, the embedding's size, norm
// and plot, the recognised text, or the page's text lines drawn where they were read) with the
// request's round-trip latency.

import { api, AuthCancelled, jsonOrError } from "./api.js";
import { formatNumber, PALETTE } from "./charts.js";

const MAX_CANVAS_SIDE = 640;
const MIN_CANVAS_SIDE = 256;
const KEYPOINT_RADIUS = 4;
const PLOT_WIDTH = 420;
const PLOT_HEIGHT = 120;
/** What each task is called in the model list. */
const TASK_NAMES = { classify: "classification", detect: "detection", embed: "embedding",
                     recognize: "text recognition", ocr: "OCR" };

function element(tag, properties = {}, children = []) {
  const node = Object.assign(document.createElement(tag), properties);
  node.append(...children);
  return node;
}

function table(caption, headings, rows) {
  return element("table", { className: "result-table" }, [
    element("caption", { textContent: caption }),
    element("thead", {}, [element("tr", {}, headings.map((h) => element("th", { scope: "col", textContent: h })))]),
    element("tbody", {}, rows),
  ]);
}

function classificationView(result, imageUrl) {
  const preview = element("img", { src: imageUrl, alt: "the uploaded image", className: "preview" });
  const rows = result.classes.map((c, rank) => element("tr", {}, [
    element("td", { textContent: `${rank + 1}` }),
    element("td", { className: "label", textContent: c.label ?? `${c.index}` }),
    element("td", { className: "score" }, [
      element("meter", { min: 0, max: 1, value: c.score, title: c.score.toFixed(4) }),
      ` ${c.score.toFixed(4)}`,
    ]),
  ]));
  return [preview, table("Top classes", ["#", "label", "score"], rows)];
}

/** The uploaded image on a canvas (at most MAX_CANVAS_SIDE, at least MIN_CANVAS_SIDE on its longer
 * side), ready for drawing over it in image pixels times `scale` (kept in data-scale). */
async function imageCanvas(file, className) {
  const bitmap = await createImageBitmap(file);
  const side = Math.max(bitmap.width, bitmap.height);
  const scale = Math.min(MAX_CANVAS_SIDE, Math.max(MIN_CANVAS_SIDE, side)) / side;
  const canvas = element("canvas", { width: Math.round(bitmap.width * scale), height: Math.round(bitmap.height * scale),
                                     className });
  canvas.dataset.scale = String(scale);
  const context = canvas.getContext("2d");
  context.imageSmoothingEnabled = scale < 1;
  context.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  context.lineWidth = 3;
  context.font = "bold 14px system-ui, sans-serif";
  context.textBaseline = "top";
  return { canvas, context, scale };
}

/** `text` on a filled tag of `colour` whose top-left corner is near (x, y), above it where there is room. */
function tag(context, text, colour, x, y) {
  const width = context.measureText(text).width + 6;
  const top = y >= 18 ? y - 18 : y;
  context.fillStyle = colour;
  context.fillRect(x, top, width, 18);
  context.fillStyle = "#fff";
  context.fillText(text, x + 3, top + 2);
}

async function detectionView(result, file) {
  const { canvas, context, scale } = await imageCanvas(file, "detections");
  for (const d of result.detections) {
    const [x1, y1, x2, y2] = d.box.map((v) => v * scale);
    const colour = PALETTE[d.class_id % PALETTE.length];
    context.strokeStyle = colour;
    context.strokeRect(x1, y1, x2 - x1, y2 - y1);
    context.fillStyle = colour;
    for (const [x, y] of d.keypoints ?? []) {  // landmarks (a face's eyes, nose, ...), when the model has them
      context.beginPath();
      context.arc(x * scale, y * scale, KEYPOINT_RADIUS, 0, 2 * Math.PI);
      context.fill();
    }
    tag(context, `${d.label ?? d.class_id} ${d.score.toFixed(2)}`, colour, x1, y1);
  }
  const names = result.detections.map((d) => `${d.label ?? d.class_id} (${d.score.toFixed(2)}`
                                             + (d.keypoints ? `, ${d.keypoints.length} keypoints)` : ")"));
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", result.detections.length
    ? `the uploaded image with ${names.length} boxes: ${names.join(", ")}` : "the uploaded image; nothing detected");
  const rows = result.detections.map((d) => element("tr", {}, [
    element("td", { className: "label", textContent: d.label ?? `${d.class_id}` }),
    element("td", { className: "score", textContent: d.score.toFixed(3) }),
    element("td", { className: "box", textContent: d.box.map((v) => v.toFixed(1)).join(", ") }),
  ]));
  return [canvas, table(`${rows.length} detection${rows.length === 1 ? "" : "s"}`, ["label", "score", "box (x1, y1, x2, y2)"],
                        rows)];
}

function summary(entries) {
  return element("dl", { className: "result-summary" }, entries.flatMap(([term, value]) => [
    element("dt", { textContent: term }), element("dd", { textContent: value }),
  ]));
}

/** One bar per component, up for positive values and down for negative ones, around a zero line. */
function embeddingPlot(vector) {
  const canvas = element("canvas", { width: PLOT_WIDTH, height: PLOT_HEIGHT, className: "embedding-plot" });
  const context = canvas.getContext("2d");
  const largest = Math.max(...vector.map(Math.abs)) || 1;
  const middle = PLOT_HEIGHT / 2;
  const step = PLOT_WIDTH / vector.length;
  context.fillStyle = PALETTE[0];
  vector.forEach((value, i) => {
    const height = (value / largest) * (middle - 2);
    context.fillRect(i * step, Math.min(middle, middle - height), Math.max(1, step - 1), Math.abs(height));
  });
  context.fillStyle = "#888";
  context.fillRect(0, middle, PLOT_WIDTH, 1);
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", `bar plot of the ${vector.length} values, from ${formatNumber(Math.min(...vector), 3)} `
                                    + `to ${formatNumber(Math.max(...vector), 3)}`);
  return canvas;
}

function embeddingView(result, imageUrl) {
  const vector = result.embedding;
  const norm = Math.sqrt(vector.reduce((total, value) => total + value * value, 0));
  const preview = element("img", { src: imageUrl, alt: "the uploaded image", className: "preview" });
  const figure = element("figure", { className: "embedding" }, [
    summary([["dimension", `${vector.length}`], ["L2 norm", norm.toFixed(4)]]),
    embeddingPlot(vector),
    element("figcaption", { textContent: `Embedding: ${vector.length} values` }),
  ]);
  return [preview, figure];
}

function recognitionView(result, imageUrl) {
  const preview = element("img", { src: imageUrl, alt: "the uploaded text line", className: "preview" });
  return [preview, element("div", { className: "recognition" }, [
    element("p", { className: "recognised-text", textContent: result.text }),
    summary([["confidence", result.score.toFixed(4)]]),
  ])];
}

async function ocrView(result, file) {
  const { canvas, context, scale } = await imageCanvas(file, "ocr-lines");
  result.lines.forEach((line, index) => {
    const colour = PALETTE[index % PALETTE.length];
    const corners = line.box.map(([x, y]) => [x * scale, y * scale]);
    context.strokeStyle = colour;
    context.beginPath();
    corners.forEach(([x, y], i) => (i ? context.lineTo(x, y) : context.moveTo(x, y)));
    context.closePath();
    context.stroke();
    tag(context, line.text, colour, corners[0][0], corners[0][1]);
  });
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", result.lines.length
    ? `the uploaded page with ${result.lines.length} lines: ${result.lines.map((l) => l.text).join(" | ")}`
    : "the uploaded page; no text found");
  const rows = result.lines.map((line) => element("tr", {}, [
    element("td", { className: "text", textContent: line.text }),
    element("td", { className: "score", textContent: line.score.toFixed(3) }),
  ]));
  return [canvas, table(`${rows.length} line${rows.length === 1 ? "" : "s"} in reading order`, ["text", "confidence"],
                        rows)];
}

/** The view of one image's result for `task`. */
function resultView(task, result, file, imageUrl) {
  switch (task) {
    case "detect": return detectionView(result, file);
    case "embed": return embeddingView(result, imageUrl);
    case "recognize": return recognitionView(result, imageUrl);
    case "ocr": return ocrView(result, file);
    default: return classificationView(result, imageUrl);
  }
}

export class TryIt {
  constructor() {
    this.select = document.getElementById("try-model");
    this.input = document.getElementById("try-file");
    this.zone = document.getElementById("drop-zone");
    this.again = document.getElementById("try-again");
    this.output = document.getElementById("try-result");
    this.file = null;
    this.imageUrl = null;
    this.input.addEventListener("change", () => this.input.files[0] && this.send(this.input.files[0]));
    this.again.addEventListener("click", () => this.file && this.send(this.file));
    this.zone.addEventListener("dragover", (event) => {
      event.preventDefault();
      this.zone.classList.add("dragging");
    });
    this.zone.addEventListener("dragleave", () => this.zone.classList.remove("dragging"));
    this.zone.addEventListener("drop", (event) => {
      event.preventDefault();
      this.zone.classList.remove("dragging");
      const file = event.dataTransfer?.files?.[0];
      if (file) this.send(file);
    });
  }

  /** Offer every READY version with an image endpoint; keep the current choice if it still exists. */
  setModels(models) {
    const choices = [];
    for (const model of models) {
      const ready = model.versions.filter((v) => v.state === "READY" && v.task);
      if (ready.length) choices.push({ name: model.name, task: ready[ready.length - 1].task });
    }
    const key = choices.map((c) => `${c.name}:${c.task}`).join(",");
    if (key === this.choicesKey) return;
    this.choicesKey = key;
    const previous = this.select.value;
    this.select.replaceChildren(...choices.map((c) => {
      const option = element("option", { value: c.name, textContent: `${c.name} (${TASK_NAMES[c.task] ?? c.task})` });
      option.dataset.task = c.task;
      return option;
    }));
    if (choices.some((c) => c.name === previous)) this.select.value = previous;
    const none = choices.length === 0;
    this.select.disabled = none;
    this.input.disabled = none;
    if (none) this.output.replaceChildren(element("p", { textContent: "No loaded model takes images." }));
  }

  async send(file) {
    const option = this.select.selectedOptions[0];
    if (!option) return;
    const model = option.value;
    const task = option.dataset.task;
    this.file = file;
    this.again.disabled = false;
    if (this.imageUrl) URL.revokeObjectURL(this.imageUrl);
    this.imageUrl = URL.createObjectURL(file);
    this.output.setAttribute("aria-busy", "true");
    this.output.replaceChildren(element("p", { textContent: `Sending ${file.name || "image"} to ${model}…` }));
    try {
      const started = performance.now();
      const response = await api(`v2/models/${encodeURIComponent(model)}/${task}`, {
        method: "POST", body: file, headers: { "Content-Type": file.type || "application/octet-stream" },
      });
      const body = await jsonOrError(response);
      const latency = performance.now() - started;
      const result = body.results[0];
      const view = await resultView(task, result, file, this.imageUrl);
      this.output.replaceChildren(
        element("p", { className: "latency", textContent:
          `${body.model_name} v${body.model_version} answered in ${formatNumber(latency, 1)} ms (round trip from this browser).` }),
        element("div", { className: "result-body" }, view),
      );
    } catch (error) {
      const message = error instanceof AuthCancelled ? "Not sent: the server needs a bearer token." : error.message;
      this.output.replaceChildren(element("p", { className: "error", role: "alert", textContent: message }));
    } finally {
      this.output.removeAttribute("aria-busy");
    }
  }
}
