// Try-it for forecasting: pasted values or CSV (timestamp,value lines; timestamps optional) to /v1/forecast, the
// history, forecast and 50%/90% intervals plotted as SVG, and how the server forecast (method, weights, backtest);
// below it a backtest of the same series (backtest.js) and a panel (panel.js).
import { clear, el, fmt, kv, section } from "./util.js";
import { jsonSnippets, listDeployments, readInput, sendTryIt, tryItForm } from "./snippets.js";
import { backtestSection } from "./backtest.js";
import { panelSection } from "./panel.js";
import { plot } from "./plot.js";

const FREQUENCIES = ["", "YS", "QS", "MS", "W", "D", "h", "30min", "15min", "min"];

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
  const { status, output, form } = tryItForm("tryit", "Forecast", [
    el("label", {}, "deployment ", deployment), el("label", {}, "model ", model),
    el("label", {}, "start ", start), el("label", {}, "frequency ", frequency), el("label", {}, "horizon ", horizon),
    el("label", { class: "wide" }, "values ", values)], { runId: "run" });
  // the request the form describes (the backtest below sends the same series); throws on values it cannot read
  const seriesBody = (series = parseSeries(values.value)) => {
    const body = { values: series.values, model: model.value };
    if (series.timestamps) body.timestamps = series.timestamps; else body.start = start.value.trim();
    if (frequency.value) body.frequency = frequency.value;
    if (horizon.value) body.horizon = Number(horizon.value);
    if (deployment.value) body.deployment = deployment.value;
    return body;
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const series = readInput(status, () => parseSeries(values.value));
    if (!series) return;
    const body = seriesBody(series);
    const sent = await sendTryIt(status, output, "tryit-error", "/v1/forecast", body,
                                 jsonSnippets("/v1/forecast", "forecast", body, "values"));
    if (!sent) return;
    let history = series.values;
    if (series.timestamps) {  // the server sorts by time: plot in that order
      history = series.timestamps.map((t, i) => [Date.parse(t), series.values[i]]).sort((a, b) => a[0] - b[0])
        .map(([, v]) => v);
    }
    const fc = sent.result.body.forecast;
    const table = el("details", {}, el("summary", { text: `${fc.length} forecast points` }),
      el("table", { class: "points" }, el("tr", {}, ["timestamp", "point", "50%", "90%"].map((h) => el("th",
        { text: h }))), fc.map((p) => el("tr", {}, el("td", { text: p.timestamp }), el("td", { text: fmt(p.point, 3) }),
        el("td", { text: `${fmt(p.lower_50, 3)} – ${fmt(p.upper_50, 3)}` }),
        el("td", { text: `${fmt(p.lower_90, 3)} – ${fmt(p.upper_90, 3)}` })))));
    clear(output, plot(history, fc), report(sent.result.body.input), table, ...sent.parts);
  });
  main.append(section("Try forecasting", form, status, output), backtestSection(() => seriesBody()),
              panelSection(deployment));
  listDeployments(deployment, "forecast", status);
}
