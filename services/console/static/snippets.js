// What a try-it sent, as a curl command and as Python client code (triserve_client), and the answer's timings.
import { api, clear, el, errorText, fmt, getKey, kv } from "./util.js";

function quote(s) { return `'${String(s).replace(/'/g, "'\\''")}'`; }

function pyValue(v) {
  if (v === null || v === undefined) return "None";
  if (typeof v === "boolean") return v ? "True" : "False";
  if (typeof v === "number") return String(v);
  if (Array.isArray(v)) return `[${v.map(pyValue).join(", ")}]`;
  if (typeof v === "object") return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyValue(x)}`)
    .join(", ")}}`;
  return JSON.stringify(v);
}

const ORIGIN = () => location.origin;
const KEY_HEADER = () => (getKey("api") || getKey("admin") ? " \\\n  -H \"X-API-Key: $TRISERVE_KEY\"" : "");
const KEY_ARG = () => (getKey("api") || getKey("admin") ? ", api_key=os.environ[\"TRISERVE_KEY\"]" : "");

// options: the request's fields besides the images / texts / values, with null ones left out
function kwargs(options) {
  return Object.entries(options).filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => `${k}=${pyValue(v)}`);
}

export function imageSnippets(path, method, options, fileName) {
  const fields = Object.entries(options).filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => ` \\\n  -F ${quote(`${k}=${v}`)}`).join("");
  const curl = `curl -s -X POST ${ORIGIN()}${path}/upload${KEY_HEADER()} \\\n  -F images=@${quote(fileName)}${fields}`;
  const args = [JSON.stringify(fileName), ...kwargs(options), "upload=True"].join(", ");
  const python = `import os\nfrom triserve_client import TriserveClient\n\n` +
    `with TriserveClient(${JSON.stringify(ORIGIN())}${KEY_ARG()}) as ts:\n` +
    `    r = ts.${method}(${args})\n    print(r.model, r.timings.total_ms)\n    print(r.results[0])`;
  return { curl, python };
}

export function jsonSnippets(path, method, body, positional) {
  const curl = `curl -s -X POST ${ORIGIN()}${path}${KEY_HEADER()} \\\n  -H 'content-type: application/json' \\\n` +
    `  -d ${quote(JSON.stringify(body))}`;
  const rest = Object.fromEntries(Object.entries(body).filter(([k]) => k !== positional));
  const args = [pyValue(body[positional]), ...kwargs(rest)].join(", ");
  return { curl, python: pythonSnippet(`ts.${method}(${args})`) };
}

// a client call (`ts.method(...)`) in a runnable script
export function pythonSnippet(call) {
  return `import os\nfrom triserve_client import TriserveClient\n\n` +
    `with TriserveClient(${JSON.stringify(ORIGIN())}${KEY_ARG()}) as ts:\n` +
    `    r = ${call}\n    print(r.model, r.timings.total_ms)`;
}

export { pyValue };

export function codeView(snippets) {
  const block = (title, text, id) => el("details", { class: "code", open: id === "curl" },
    el("summary", { text: title }), el("pre", { "data-snippet": id }, el("code", { text })));
  return el("div", { class: "snippets" }, block("curl", snippets.curl, "curl"),
            block("Python client", snippets.python, "python"));
}

// a try-it's scaffold: a form of `fields` (labelled inputs) ending in its run button, its status line and its output
// box, with the ids `${prefix}-form`, `-status` and `-output` (`runId`: the button's, default `${prefix}-run`)
export function tryItForm(prefix, runText, fields, { runId = `${prefix}-run`, statusText } = {}) {
  const run = el("button", { id: runId, type: "submit", text: runText });
  const status = el("p", { id: `${prefix}-status`, class: "muted", text: statusText });
  const output = el("div", { id: `${prefix}-output` });
  const form = el("form", { class: "controls", id: `${prefix}-form` }, fields, run);
  return { status, output, form };
}

// a try-it's status line: its text and its state ("running", "error", "done"; the stylesheet and the tests read it)
export function setStatus(status, text, state) {
  status.textContent = text;
  status.dataset.state = state;
}

// a form's input as read by `read()`; when that throws, the status line says why and the answer is undefined
export function readInput(status, read) {
  try { return read(); } catch (err) {
    setStatus(status, String(err.message || err), "error");
    return undefined;
  }
}

// POST a try-it's request, the status line following it. A refusal is shown in `output` (the server's error as
// <p id=errorId>, the timings, the code snippets) and answers null; else {result, parts}: the answer, and the
// timings and snippet views for the page to show beside what it draws.
export async function sendTryIt(status, output, errorId, path, body, snippets) {
  setStatus(status, "running…", "running");
  const result = await api("POST", path, body);
  const parts = [timingsView(result), codeView(snippets)];
  if (!result.ok) {
    setStatus(status, errorText(result), "error");
    clear(output, el("p", { class: "bad", id: errorId, text: errorText(result) }), ...parts);
    return null;
  }
  setStatus(status, `answered in ${fmt(result.ms)} ms`, "done");
  return { result, parts };
}

export function timingsView(result) {
  const body = result.body || {};
  const t = body.timings || {};
  const served = body.model ? `${body.model.name} ${body.model.version}` : "–";
  return el("div", { class: "timings", "data-result": result.ok ? "ok" : "error" }, kv([
    ["status", `${result.status}${result.ok ? "" : " (error)"}`],
    ["deployment", body.deployment || "–"],
    ["served by", served],
    ["degraded", body.degraded ? `yes: ${body.degraded_reason || ""}` : "no"],
    ["request id", result.requestId || body.request_id || "–"],
    ["timings (ms)", ["preprocess", "queue", "infer", "postprocess", "total"]
      .map((k) => `${k} ${fmt(t[`${k}_ms`])}`).join(" · ")],
    ["round trip (ms)", fmt(result.ms)],
  ]));
}

// the deployments of a family, default first, as <option>s (server strings as text)
export function deploymentOptions(models, family) {
  const deps = (models.deployments || []).filter((d) => d.family === family)
    .sort((a, b) => Number(b.default) - Number(a.default));
  return deps.map((d) => el("option", { value: d.name, text: d.default ? `${d.name} (default)` : d.name }));
}

// fill a try-it's deployment <select> from /v1/models, again when a key is typed (app.js sends "keyschange" to every
// [data-keyed] element); a refusal (the inference key required and missing or wrong) shows as the server's answer
export function listDeployments(select, family, status) {
  const initial = status.textContent;
  select.dataset.keyed = "";
  const load = async () => {
    const models = await api("GET", "/v1/models");
    if (!models.ok) {
      status.textContent = `could not list the deployments: ${errorText(models)}`;
      status.dataset.state = "refused";
      return;
    }
    clear(select, deploymentOptions(models.body, family));
    if (status.dataset.state === "refused") {
      status.textContent = initial;
      delete status.dataset.state;
    }
    if (!select.options.length) status.textContent = `no ${family} deployment is served here`;
  };
  select.addEventListener("keyschange", load);
  load();
}
