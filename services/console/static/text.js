// Try-it for text classification: one text per line to /v1/classify, each answer's top-k as bars, with the
// truncation (tokens used, characters received).
import { api, clear, el, errorText, fmt, section } from "./util.js";
import { codeView, jsonSnippets, listDeployments, timingsView } from "./snippets.js";

function bars(result, i) {
  const rows = result.top_k.map((ls) => {
    const bar = el("span", { class: "bar" });
    bar.style.width = `${Math.max(0.5, ls.score * 100)}%`;  // CSSOM: allowed by the CSP
    return el("div", { class: "bar-row" }, el("span", { class: "label", text: ls.label }),
              el("span", { class: "bar-track" }, bar), el("span", { class: "score", text: ls.score.toFixed(3) }));
  });
  const note = `${result.tokens} tokens · ${result.chars} characters` +
    (result.truncated ? " · truncated: the end of the text was not read" : "");
  return el("article", { class: "text-result", "data-index": i },
    el("h4", {}, "→ ", el("span", { class: "label", text: result.label })),
    el("div", { class: "bars" }, rows), el("p", { class: result.truncated ? "warn" : "muted", text: note }));
}

export function textPage(main) {
  const deployment = el("select", { id: "deployment" });
  const model = el("select", { id: "model" }, ["auto", "primary", "fallback"].map((m) => el("option",
    { value: m, text: m })));
  const topK = el("input", { id: "top-k", type: "number", min: 1, value: 3, step: 1 });
  const texts = el("textarea", { id: "texts", rows: 4, placeholder: "one text per line" });
  texts.value = "what is my account balance\nbook a flight to paris";
  const run = el("button", { id: "run", type: "submit", text: "Classify" });
  const status = el("p", { id: "tryit-status", class: "muted" });
  const output = el("div", { id: "tryit-output" });
  const form = el("form", { class: "controls", id: "tryit-form" },
    el("label", {}, "deployment ", deployment), el("label", {}, "model ", model), el("label", {}, "top k ", topK),
    el("label", { class: "wide" }, "texts ", texts), run);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const lines = texts.value.split("\n").filter((t) => t.trim());
    const body = { texts: lines, top_k: Number(topK.value) || 3, model: model.value };
    if (deployment.value) body.deployment = deployment.value;
    status.textContent = "running…";
    status.dataset.state = "running";
    const result = await api("POST", "/v1/classify", body);
    const parts = [timingsView(result), codeView(jsonSnippets("/v1/classify", "classify", body, "texts"))];
    if (!result.ok) {
      status.textContent = errorText(result);
      status.dataset.state = "error";
      clear(output, el("p", { class: "bad", id: "tryit-error", text: errorText(result) }), ...parts);
      return;
    }
    status.textContent = `answered in ${fmt(result.ms)} ms`;
    status.dataset.state = "done";
    clear(output, el("div", { id: "tryit-results" }, result.body.results.map(bars)), ...parts);
  });
  main.append(section("Try text classification", form, status, output));
  listDeployments(deployment, "text", status);
}
