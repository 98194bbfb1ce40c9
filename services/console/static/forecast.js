// Try-it for forecasting: pasted values or CSV (timestamp,value lines; timestamps optional) to /v1/forecast, the
// history, forecast and 50%/90% intervals plotted as SVG, and how the server forecast (method, weights, backtest).
import { api, clear, el, errorText, fmt, kv, section } from "./util.js";
import { codeView, deploymentOptions, jsonSnippets, timingsView } from "./snippets.js";

const SVG = "http://www.w3.org/2000/svg";
const FREQUENCIES = ["", "YS", "QS", "MS", "W", "D", "h", "30min", "15min", "min"];

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

function number(s) {
  const t = s.trim();
  if (t === "" || /^(null|nan|na)$/i.test(t)) return null;
  const v = Number(t);
  if (!Number.isFinite(v)) throw new Error(`not a number: ${t.slice(0, 40)}`);
  return v;
}

// "1, 2, 3" or one value per line, or CSV lines "timestamp,value" (a header line is skipped)
export function parseSeries(text) {
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  const csv = lines.filter((l) => l.split(",").length === 2 && Number.isNaN(Number(l.split(",")[0].trim())));
  if (csv.length && csv.length >= lines.length - 1) {
    const rows = csv.filter((l) => !Number.isNaN(Date.parse(l.split(",")[0].trim())));
    if (!rows.length) throw new Error("no line holds a timestamp and a value");
    return { timestamps: rows.map((l) => l.split(",")[0].trim()), values: rows.map((l) => number(l.split(",")[1])) };
  }
  return { timestamps: null, values: text.split(/[\s,;]+/).filter((t) => t !== "").map(number) };
}

function plot(history, forecast) {
  const W = 800, H = 320, PAD = 40;
  const n = history.length, total = n + forecast.length;
  const ys = [...history.filter((v) => v !== null), ...forecast.flatMap((p) => [p.point, p.lower_90, p.upper_90]
    .filter((v) => v !== null && v !== undefined))];
  let lo = Math.min(...ys), hi = Math.max(...ys);
  if (hi === lo) { hi += 1; lo -= 1; }
  const x = (i) => PAD + (W - 2 * PAD) * (total > 1 ? i / (total - 1) : 0);
  const y = (v) => H - PAD - (H - 2 * PAD) * ((v - lo) / (hi - lo));
  const line = (pts) => pts.map(([i, v], k) => `${k ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const band = (low, high) => {
    const pts = forecast.map((p, k) => [n + k, p[low], p[high]]).filter(([, a, b]) => a !== null && b !== null);
    if (!pts.length) return "";
    return `${line(pts.map(([i, a]) => [i, a]))} ${pts.reverse().map(([i, , b]) =>
      `L${x(i).toFixed(1)},${y(b).toFixed(1)}`).join(" ")} Z`;
  };
  const root = svg("svg", { id: "forecast-plot", viewBox: `0 0 ${W} ${H}`, role: "img",
                           "aria-label": "history, forecast and intervals" });
  root.append(svg("path", { id: "band-90", class: "band-90", d: band("lower_90", "upper_90") }),
              svg("path", { id: "band-50", class: "band-50", d: band("lower_50", "upper_50") }),
              svg("path", { id: "history", class: "history",
                            d: line(history.map((v, i) => [i, v]).filter(([, v]) => v !== null)) }),
              svg("path", { id: "forecast", class: "forecast",
                            d: line([...(history.length && history[n - 1] !== null ? [[n - 1, history[n - 1]]] : []),
                                     ...forecast.map((p, k) => [n + k, p.point])]) }),
              svg("line", { class: "axis", x1: PAD, y1: H - PAD, x2: W - PAD, y2: H - PAD }),
              svg("line", { class: "divider", x1: x(n - 0.5), y1: PAD / 2, x2: x(n - 0.5), y2: H - PAD }),
              svg("text", { x: PAD, y: PAD - 8, class: "tick" }, fmt(hi, 2)),
              svg("text", { x: PAD, y: H - PAD + 16, class: "tick" }, fmt(lo, 2)),
              svg("text", { x: x(n - 0.5) - 4, y: PAD / 2 + 10, class: "tick end" },
                  forecast.length ? `forecast from ${forecast[0].timestamp}` : ""),
              svg("text", { x: W - PAD, y: H - PAD + 16, class: "tick end" },
                  forecast.length ? forecast[forecast.length - 1].timestamp : ""));
  return el("figure", { class: "plot" }, root, el("figcaption", { class: "legend" },
    el("span", { class: "key history", text: "history" }), el("span", { class: "key forecast", text: "forecast" }),
    el("span", { class: "key band-50", text: "50% interval" }), el("span", { class: "key band-90",
                                                                              text: "90% interval" })));
}

function report(input) {
  const weights = Object.entries(input.method_weights || {}).map(([m, w]) => `${m} ${fmt(w * 100)}%`).join(", ");
  return el("div", { id: "forecast-report" }, kv([
    ["method", el("code", { id: "forecast-method", text: input.method })],
    ["weights", weights || "–"],
    ["backtest MASE", `${fmt(input.backtest_mase, 3)} over ${input.backtest_origins} origins`],
    ["intervals", input.interval_calibration],
    ["frequency", `${input.frequency}${input.frequency_inferred ? " (inferred)" : ""}`],
    ["points", `${input.points} regular, ${input.used} read, ${input.imputed} imputed, ${input.padded} padded`],
  ]));
}

export function forecastPage(main) {
  const deployment = el("select", { id: "deployment" });
  const model = el("select", { id: "model" }, ["auto", "primary", "fallback"].map((m) => el("option",
    { value: m, text: m })));
  const values = el("textarea", { id: "values", rows: 5,
                                  placeholder: "values (comma, space or line separated) or CSV lines timestamp,value" });
  values.value = Array.from({ length: 48 }, (_, i) => (350 + 0.13 * i + 3 * Math.sin(i * Math.PI / 6)).toFixed(2))
    .join(", ");
  const start = el("input", { id: "start", type: "text", value: "2022-01-01T00:00:00" });
  const frequency = el("select", { id: "frequency" }, FREQUENCIES.map((f) => el("option",
    { value: f, text: f || "infer (timestamps)", selected: f === "MS" })));
  const horizon = el("input", { id: "horizon", type: "number", min: 1, value: 12, step: 1 });
  const run = el("button", { id: "run", type: "submit", text: "Forecast" });
  const status = el("p", { id: "tryit-status", class: "muted" });
  const output = el("div", { id: "tryit-output" });
  const form = el("form", { class: "controls", id: "tryit-form" },
    el("label", {}, "deployment ", deployment), el("label", {}, "model ", model),
    el("label", {}, "start ", start), el("label", {}, "frequency ", frequency), el("label", {}, "horizon ", horizon),
    el("label", { class: "wide" }, "values ", values), run);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    let series;
    try { series = parseSeries(values.value); } catch (err) {
      status.textContent = String(err.message || err);
      status.dataset.state = "error";
      return;
    }
    const body = { values: series.values, model: model.value };
    if (series.timestamps) body.timestamps = series.timestamps; else body.start = start.value.trim();
    if (frequency.value) body.frequency = frequency.value;
    if (horizon.value) body.horizon = Number(horizon.value);
    if (deployment.value) body.deployment = deployment.value;
    status.textContent = "running…";
    status.dataset.state = "running";
    const result = await api("POST", "/v1/forecast", body);
    const parts = [timingsView(result), codeView(jsonSnippets("/v1/forecast", "forecast", body, "values"))];
    if (!result.ok) {
      status.textContent = errorText(result);
      status.dataset.state = "error";
      clear(output, el("p", { class: "bad", id: "tryit-error", text: errorText(result) }), ...parts);
      return;
    }
    let history = series.values;
    if (series.timestamps) {  // the server sorts by time: plot in that order
      history = series.timestamps.map((t, i) => [Date.parse(t), series.values[i]]).sort((a, b) => a[0] - b[0])
        .map(([, v]) => v);
    }
    const fc = result.body.forecast;
    const table = el("details", {}, el("summary", { text: `${fc.length} forecast points` }),
      el("table", { class: "points" }, el("tr", {}, ["timestamp", "point", "50%", "90%"].map((h) => el("th",
        { text: h }))), fc.map((p) => el("tr", {}, el("td", { text: p.timestamp }), el("td", { text: fmt(p.point, 3) }),
        el("td", { text: `${fmt(p.lower_50, 3)} – ${fmt(p.upper_50, 3)}` }),
        el("td", { text: `${fmt(p.lower_90, 3)} – ${fmt(p.upper_90, 3)}` })))));
    status.textContent = `answered in ${fmt(result.ms)} ms`;
    status.dataset.state = "done";
    clear(output, plot(history, fc), report(result.body.input), table, ...parts);
  });
  main.append(section("Try forecasting", form, status, output));
  api("GET", "/v1/models").then((models) => {
    if (models.ok) clear(deployment, deploymentOptions(models.body, "forecast"));
  });
}
