// Try-it for the image families: an uploaded image (or a sample drawn here) sent to /v1/detect, /v1/pose,
// /v1/segment or /v1/classify-image, and the answer drawn over it: boxes with labels and scores, keypoints with the
// skeleton, RLE masks; a classifier's top-1 on a banner and its top-k as bars.
import { api, clear, el, errorText, fmt, section } from "./util.js";
import { color, drawBanner, drawBox, drawMask, drawPose } from "./draw.js";
import { codeView, imageSnippets, listDeployments, timingsView } from "./snippets.js";

const FAMILIES = {
  detection: { path: "/v1/detect", method: "detect", title: "Detection", items: (r) => r.detections },
  pose: { path: "/v1/pose", method: "pose", title: "Pose", items: (r) => r.people },
  segmentation: { path: "/v1/segment", method: "segment", title: "Segmentation", items: (r) => r.instances },
  classification: { path: "/v1/classify-image", method: "classify_image", title: "Image classification",
    items: (r) => r.top_k },
};

function topKBars(result) {
  const rows = result.top_k.map((ls) => {
    const bar = el("span", { class: "bar" });
    bar.style.width = `${Math.max(0.5, ls.score * 100)}%`;  // CSSOM: allowed by the CSP
    return el("div", { class: "bar-row" }, el("span", { class: "label", text: ls.label }),
              el("span", { class: "bar-track" }, bar), el("span", { class: "score", text: ls.score.toFixed(3) }));
  });
  return el("div", {},
    el("p", { class: "muted", text: `${result.width}×${result.height} → ${result.label}` }),
    el("div", { class: "bars", id: "tryit-results" }, rows));
}

// a sample image: coloured shapes on a light background (what the tiny test models were trained on)
function sampleImage() {
  const canvas = document.createElement("canvas");
  canvas.width = 320; canvas.height = 240;
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  ctx.fillStyle = "#f0f0f0"; ctx.fillRect(0, 0, 320, 240);
  ctx.fillStyle = "#c81e1e"; ctx.fillRect(30, 40, 100, 100);
  ctx.fillStyle = "#1e1ec8"; ctx.beginPath(); ctx.arc(225, 115, 55, 0, 2 * Math.PI); ctx.fill();
  ctx.fillStyle = "#1ea01e"; ctx.beginPath(); ctx.moveTo(150, 220); ctx.lineTo(200, 150); ctx.lineTo(250, 220);
  ctx.fill();
  return canvas.toDataURL("image/png");
}

function readFile(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

function loadImage(src) {
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = () => reject(new Error("the browser could not decode this image"));
    img.src = src;
  });
}

function resultList(family, response) {
  const result = response.results[0];
  if (family === "classification") return topKBars(result);
  const items = FAMILIES[family].items(result) || [];
  const rows = items.map((item, i) => {
    let detail = `box ${item.box.map((v) => fmt(v)).join(", ")}`;
    if (family === "pose") detail += ` · ${item.keypoints.filter((k) => k.visible).length} visible keypoints`;
    if (family === "segmentation") detail += item.mask_skipped ? " · mask skipped" : ` · ${item.area} px`;
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = color(i);  // CSSOM, not a style attribute: allowed by the page's CSP
    return el("li", { "data-index": i }, swatch,
              el("strong", { class: "label", text: item.label }), ` ${item.score.toFixed(3)} · ${detail}`);
  });
  return el("div", {},
    el("p", { class: "muted", text: `${items.length} found in ${result.width}×${result.height} ` +
                                    `(${result.candidates} candidates above the threshold before NMS)` }),
    rows.length ? el("ol", { class: "results", id: "tryit-results" }, rows)
      : el("p", { id: "tryit-results", text: "nothing above the threshold: lower it and run again" }));
}

export function imagePage(main, family) {
  const spec = FAMILIES[family];
  const deployment = el("select", { id: "deployment", name: "deployment" });
  const model = el("select", { id: "model", name: "model" },
    ["auto", "primary", "fallback"].map((m) => el("option", { value: m, text: m })));
  const conf = el("input", { id: "conf", type: "number", min: 0, max: 1, step: "any", placeholder: "server default" });
  const maxDet = el("input", { id: "max-detections", type: "number", min: 1, step: 1, placeholder: "server default" });
  const topK = el("input", { id: "top-k", type: "number", min: 1, step: 1, value: 5 });
  const classifier = family === "classification";
  const file = el("input", { id: "image-file", type: "file", accept: "image/*" });
  const run = el("button", { id: "run", type: "submit", disabled: true, text: "Run" });
  const sample = el("button", { id: "sample", type: "button", text: "Use the sample image" });
  const status = el("p", { id: "tryit-status", class: "muted", text: "choose an image" });
  const canvas = el("canvas", { id: "tryit-canvas", width: 320, height: 240 });
  const output = el("div", { id: "tryit-output" });
  let image = null, dataUrl = null, fileName = "photo.jpg";

  async function show(src, name) {
    try {
      image = await loadImage(src);
    } catch (err) {
      status.textContent = String(err.message || err);
      return;
    }
    dataUrl = src; fileName = name;
    canvas.width = image.naturalWidth; canvas.height = image.naturalHeight;
    canvas.getContext("2d", { willReadFrequently: true }).drawImage(image, 0, 0);
    run.disabled = false;
    status.textContent = `${name}: ${image.naturalWidth}×${image.naturalHeight}, ready to run`;
  }

  file.addEventListener("change", async () => {
    if (file.files.length) show(await readFile(file.files[0]), file.files[0].name);
  });
  sample.addEventListener("click", () => show(sampleImage(), "sample.png"));

  const form = el("form", { class: "controls", id: "tryit-form" },
    el("label", {}, "deployment ", deployment), el("label", {}, "model ", model),
    classifier ? el("label", {}, "top k ", topK) : [el("label", {}, "score threshold ", conf),
                                                    el("label", {}, "max results ", maxDet)],
    el("label", {}, "image ", file), sample, run);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!dataUrl) return;
    const options = classifier ? { deployment: deployment.value || null, model: model.value,
                                   top_k: Number(topK.value) || 5 }
      : { deployment: deployment.value || null, model: model.value,
          conf_threshold: conf.value === "" ? null : Number(conf.value),
          max_detections: maxDet.value === "" ? null : Number(maxDet.value) };
    if (family === "segmentation") options.mask_format = "rle";
    const body = { images: [{ data: dataUrl }], ...Object.fromEntries(
      Object.entries(options).filter(([, v]) => v !== null)) };
    run.disabled = true;
    status.textContent = "running…";
    status.dataset.state = "running";
    const result = await api("POST", spec.path, body);
    run.disabled = false;
    const ctx = canvas.getContext("2d", { willReadFrequently: true });
    ctx.drawImage(image, 0, 0);
    const parts = [timingsView(result), codeView(imageSnippets(spec.path, spec.method, options, fileName))];
    if (!result.ok) {
      status.textContent = errorText(result);
      status.dataset.state = "error";
      clear(output, el("p", { class: "bad", id: "tryit-error", text: errorText(result) }), ...parts);
      return;
    }
    const res = result.body.results[0];
    if (classifier) drawBanner(ctx, res.label, res.score);
    else spec.items(res).forEach((item, i) => {
      if (family === "segmentation" && item.rle) drawMask(ctx, item.rle, i);
      if (family === "pose") drawPose(ctx, item, result.body.skeleton || [], i);
      drawBox(ctx, item.box, item.label, item.score, i);
    });
    status.textContent = `answered in ${fmt(result.ms)} ms`;
    status.dataset.state = "done";
    clear(output, resultList(family, result.body), ...parts);
  });

  main.append(section(`Try ${spec.title.toLowerCase()}`, form, status,
                      el("div", { class: "tryit" }, el("div", { class: "canvas-wrap" }, canvas), output)));
  listDeployments(deployment, family, status);
}
