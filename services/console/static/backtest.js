// Try-it for a backtest: the forecast form's series to /v1/forecast/backtest; each origin's forecast (with its 90%
// band) drawn against what happened, the scores (MASE, RMSSE, interval coverage), per step and per origin with the
// method chosen there. Server strings (methods, timestamps) are set as text.
import { clear, el, fmt, kv, section } from "./util.js";
import { jsonSnippets, readInput, sendTryIt, tryItForm } from "./snippets.js";
import { svg } from "./plot.js";

// the backtested span as SVG: origin k's steps at x = k * horizon + step; data-lo/-hi and data-ylo/-yhi give the
// scale (a value's pixel y), so what is drawn can be read back
export function backtestPlot(answer) {
  const W = 800, H = 320, PAD = 40;
  const h = answer.horizon, origins = answer.origins;
  const total = origins.length * h;
  const known = (v) => v !== null && v !== undefined;
  const ys = origins.flatMap((o) => [...o.actual, ...o.forecast.flatMap((p) => [p.point, p.lower_90, p.upper_90])])
    .filter(known);
  let lo = Math.min(...ys), hi = Math.max(...ys);
  if (hi === lo) { hi += 1; lo -= 1; }
  const x = (i) => PAD + (W - 2 * PAD) * (total > 1 ? i / (total - 1) : 0);
  const y = (v) => H - PAD - (H - 2 * PAD) * ((v - lo) / (hi - lo));
  const line = (pts) => pts.map(([i, v], k) => `${k ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const root = svg("svg", { id: "backtest-plot", viewBox: `0 0 ${W} ${H}`, role: "img", "data-lo": lo, "data-hi": hi,
                            "data-ylo": y(lo), "data-yhi": y(hi), "aria-label": "backtest: forecasts and actuals" });
  origins.forEach((o, k) => {
    const pts = o.forecast.map((p, j) => [k * h + j, p.lower_90, p.upper_90])
      .filter(([, a, b]) => known(a) && known(b));
    if (pts.length) {
      root.append(svg("path", { class: "band-90", "data-part": "origin-band", "data-origin": k,
        d: `${line(pts.map(([i, a]) => [i, a]))} ${pts.reverse().map(([i, , b]) =>
          `L${x(i).toFixed(1)},${y(b).toFixed(1)}`).join(" ")} Z` }));
    }
    root.append(svg("path", { class: "forecast", "data-part": "origin-forecast", "data-origin": k,
                              d: line(o.forecast.map((p, j) => [k * h + j, p.point])) }),
                svg("line", { class: "divider", x1: x(k * h - 0.5), y1: PAD / 2, x2: x(k * h - 0.5), y2: H - PAD }),
                svg("text", { x: x(k * h), y: H - 6, class: "tick" }, o.origin));  // below the low tick
  });
  const actual = origins.flatMap((o, k) => o.actual.map((v, j) => [k * h + j, v]));
  root.append(svg("path", { class: "history", "data-part": "actual", d: line(actual) }),
              svg("line", { class: "axis", x1: PAD, y1: H - PAD, x2: W - PAD, y2: H - PAD }),
              svg("text", { x: PAD, y: PAD - 8, class: "tick" }, fmt(hi, 2)),
              svg("text", { x: PAD, y: H - PAD + 16, class: "tick" }, fmt(lo, 2)));
  return el("figure", { class: "plot" }, root, el("figcaption", { class: "legend" },
    el("span", { class: "key history", text: "actual" }), el("span", { class: "key forecast",
                                                                        text: "forecast per origin" }),
    el("span", { class: "key band-90", text: "90% interval" })));
}

function scores(answer) {
  const pct = (v) => (v === null || v === undefined ? "–" : `${fmt(v * 100)}%`);
  return el("div", { id: "backtest-scores" }, kv([
    ["MASE", el("code", { id: "backtest-mase", text: fmt(answer.mase, 3) })],
    ["RMSSE", el("code", { id: "backtest-rmsse", text: fmt(answer.rmsse, 3) })],
    ["coverage 50% (ideal 50%)", el("code", { id: "backtest-coverage-50", text: pct(answer.coverage_50) })],
    ["coverage 90% (ideal 90%)", el("code", { id: "backtest-coverage-90", text: pct(answer.coverage_90) })],
    ["origins × horizon", `${answer.origins.length} × ${answer.horizon} (${answer.frequency}), ` +
      `${answer.runner_calls} runner call(s)`],
  ]));
}

function tables(answer) {
  const row = (cells, tag = "td") => el("tr", {}, cells.map((c) => el(tag, typeof c === "string" ? { text: c } : {},
    typeof c === "string" ? null : c)));
  const byStep = el("table", { class: "points", id: "backtest-steps" },
    row(["step", "MASE", "RMSSE"], "th"),
    answer.mase_by_step.map((m, j) => row([String(j + 1), fmt(m, 3), fmt(answer.rmsse_by_step[j], 3)])));
  const byOrigin = el("table", { class: "points", id: "backtest-origins" },
    row(["origin", "method", "MASE", "RMSSE"], "th"),
    answer.origins.map((o) => row([o.origin, el("code", { text: o.method }), fmt(o.mase, 3), fmt(o.rmsse, 3)])));
  return [byOrigin, el("details", {}, el("summary", { text: "error per step ahead" }), byStep)];
}

// seriesBody(): the forecast form's request ({values, start|timestamps, frequency, horizon, model, deployment}),
// throwing on input it cannot read
export function backtestSection(seriesBody) {
  const origins = el("input", { id: "backtest-origins-count", type: "number", min: 1, max: 10, value: 3, step: 1 });
  const { status, output, form } = tryItForm("backtest", "Backtest", [el("label", {}, "origins ", origins)], {
    statusText: "the series, frequency and horizon of the form above, forecast from earlier origins and scored on "
      + "what followed" });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = readInput(status, () => ({ ...seriesBody(), origins: Number(origins.value) || null }));
    if (!body) return;
    const sent = await sendTryIt(status, output, "backtest-error", "/v1/forecast/backtest", body,
                                 jsonSnippets("/v1/forecast/backtest", "forecast_backtest", body, "values"));
    if (!sent) return;
    const answer = sent.result.body;
    clear(output, backtestPlot(answer), scores(answer), ...tables(answer), ...sent.parts);
  });
  return section("Backtest the series", form, status, output);
}
