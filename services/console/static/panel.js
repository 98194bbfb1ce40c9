// Try-it for a forecast panel: many series in one request to /v1/forecast/panel (one per line, "id: values"), each
// answer plotted with its intervals and method, in request order.
import { clear, el, fmt, section } from "./util.js";
import { jsonSnippets, pythonSnippet, pyValue, readInput, sendTryIt, tryItForm } from "./snippets.js";
import { plot } from "./plot.js";

const SHOWN = 12;  // series drawn; the rest are listed by id only

// "sku-1: 1, 2, 3" per line (the id is optional: series-<n>)
export function parsePanel(text) {
  return text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean).map((line, i) => {
    const at = line.indexOf(":");
    const id = at > 0 ? line.slice(0, at).trim() : `series-${i + 1}`;
    const values = line.slice(at + 1).split(/[\s,;]+/).filter((t) => t !== "").map((t) => {
      if (/^(null|nan|na)$/i.test(t)) return null;
      const v = Number(t);
      if (!Number.isFinite(v)) throw new Error(`${id}: not a number: ${t.slice(0, 40)}`);
      return v;
    });
    return { id, values };
  });
}

export function panelSection(deployment) {
  const series = el("textarea", { id: "panel-series", rows: 4, placeholder: "one series per line: id: v1, v2, …" });
  series.value = ["store-1: 12, 15, 14, 18, 20, 19, 23, 25, 24, 28, 30, 29, 33, 35",
                  "store-2: 50, 48, 52, 49, 51, 50, 53, 47, 52, 50, 49, 51, 50, 52"].join("\n");
  const start = el("input", { id: "panel-start", type: "text", value: "2026-01-01T00:00:00" });
  const frequency = el("select", { id: "panel-frequency" }, ["D", "W", "MS", "QS", "YS", "h", "30min", "15min", "min"]
    .map((f) => el("option", { value: f, text: f })));
  const horizon = el("input", { id: "panel-horizon", type: "number", min: 1, value: 7, step: 1 });
  const { status, output, form } = tryItForm("panel", "Forecast the panel", [
    el("label", {}, "start ", start), el("label", {}, "frequency ", frequency), el("label", {}, "horizon ", horizon),
    el("label", { class: "wide" }, "series ", series)]);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const parsed = readInput(status, () => parsePanel(series.value));
    if (!parsed) return;
    const body = { series: parsed.map((s) => ({ ...s, start: start.value.trim() })), frequency: frequency.value,
                   horizon: Number(horizon.value) || null };
    if (deployment.value) body.deployment = deployment.value;
    const snippets = jsonSnippets("/v1/forecast/panel", "forecast_panel", body, "series");
    // the client takes the panel as {id: values} with one start
    const mapping = `{${parsed.map((s) => `${JSON.stringify(s.id)}: ${pyValue(s.values)}`).join(", ")}}`;
    const kw = [["start", start.value.trim()], ["frequency", body.frequency], ["horizon", body.horizon],
                ["deployment", body.deployment]].filter(([, v]) => v).map(([k, v]) => `${k}=${pyValue(v)}`);
    snippets.python = pythonSnippet(`ts.forecast_panel(${[mapping, ...kw].join(", ")})`);
    const sent = await sendTryIt(status, output, "panel-error", "/v1/forecast/panel", body, snippets);
    if (!sent) return;
    const answers = sent.result.body.series;
    const figures = answers.slice(0, SHOWN).map((s, i) => el("div", { class: "panel-series", "data-series": s.id },
      el("h4", {}, el("span", { text: s.id }), " ", el("code", { text: s.input.method }),
         s.degraded ? el("span", { class: "badge warn", text: "degraded" }) : null),
      plot(parsed[i].values, s.forecast, `panel-plot-${i}`)));
    const rest = answers.length > SHOWN ? el("p", { class: "muted",
      text: `and ${answers.length - SHOWN} more: ${answers.slice(SHOWN).map((s) => s.id).join(", ")}` }) : null;
    status.textContent = `${answers.length} series in ${sent.result.body.runner_calls} runner call(s), ` +
      `${fmt(sent.result.ms)} ms`;
    clear(output, el("div", { class: "panel-grid" }, figures), rest, ...sent.parts);
  });
  return section("Try a forecast panel", form, status, output);
}
