// Try-it for text classification: one text per line to /v1/classify, each answer's top-k as bars, with the
// truncation (tokens used, characters received).
import { clear, el, section } from "./util.js";
import { jsonSnippets, listDeployments, sendTryIt, tryItForm } from "./snippets.js";

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
  const { status, output, form } = tryItForm("tryit", "Classify", [
    el("label", {}, "deployment ", deployment), el("label", {}, "model ", model), el("label", {}, "top k ", topK),
    el("label", { class: "wide" }, "texts ", texts)], { runId: "run" });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const lines = texts.value.split("\n").filter((t) => t.trim());
    const body = { texts: lines, top_k: Number(topK.value) || 3, model: model.value };
    if (deployment.value) body.deployment = deployment.value;
    const sent = await sendTryIt(status, output, "tryit-error", "/v1/classify", body,
                                 jsonSnippets("/v1/classify", "classify", body, "texts"));
    if (!sent) return;
    clear(output, el("div", { id: "tryit-results" }, sent.result.body.results.map(bars)), ...sent.parts);
  });
  main.append(section("Try text classification", form, status, output));
  listDeployments(deployment, "text", status);
}
