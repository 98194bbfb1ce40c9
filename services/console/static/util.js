// Shared helpers: DOM building (text only: every server-provided string goes through textContent, never markup),
// API calls with the keys typed into the page, and number formatting.

const KEYS = { api: "triserve.apiKey", admin: "triserve.adminKey" };

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = String(v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

export function getKey(kind) { return sessionStorage.getItem(KEYS[kind]) || ""; }

export function setKey(kind, value) {
  if (value) sessionStorage.setItem(KEYS[kind], value);
  else sessionStorage.removeItem(KEYS[kind]);
}

// fetch JSON from the API; the admin key for admin routes, else the inference key. Resolves to
// {ok, status, body, ms, requestId}; never throws on an HTTP error (the page shows the error model's message).
export async function api(method, path, body = undefined, { admin = false } = {}) {
  const headers = { Accept: "application/json" };
  const key = admin ? getKey("admin") : getKey("api") || getKey("admin");
  if (key) headers["X-API-Key"] = key;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const started = performance.now();
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
                                   credentials: "omit", cache: "no-store" });
  } catch (err) {
    return { ok: false, status: 0, body: { error: { code: "unreachable", message: String(err) } },
             ms: performance.now() - started, requestId: null };
  }
  const text = await response.text();
  let parsed;
  try { parsed = text ? JSON.parse(text) : null; } catch { parsed = { error: { code: "not_json", message: text } }; }
  return { ok: response.ok, status: response.status, body: parsed, ms: performance.now() - started,
           requestId: response.headers.get("x-request-id") };
}

export function errorText(result) {
  const err = result.body && result.body.error;
  if (err && typeof err === "object") return `${result.status} ${err.code}: ${err.message}`;
  if (err) return `${result.status} ${err}`;
  return `HTTP ${result.status}`;
}

export function fmt(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (typeof value !== "number") return String(value);
  if (Math.abs(value) >= 1e6) return value.toExponential(2);
  return value.toFixed(digits).replace(/\.0+$/, "");
}

export function bytes(n) {
  if (!n && n !== 0) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// Prometheus' histogram_quantile over cumulative [[upper bound | "+Inf", count], ...] (as services/console/summary.py)
export function quantile(q, buckets) {
  if (!buckets.length || buckets[buckets.length - 1][1] <= 0) return null;
  const rank = q * buckets[buckets.length - 1][1];
  let lowerBound = 0, lowerCount = 0;
  for (const [b, count] of buckets) {
    const bound = b === "+Inf" ? Infinity : b;
    if (count >= rank) {
      if (bound === Infinity) return lowerBound;
      if (count === lowerCount) return bound;
      return lowerBound + (bound - lowerBound) * (rank - lowerCount) / (count - lowerCount);
    }
    lowerBound = bound; lowerCount = count;
  }
  return lowerBound;
}

export function section(title, ...children) {
  return el("section", { class: "card" }, el("h2", { text: title }), ...children);
}

export function kv(pairs) {
  return el("dl", { class: "kv" }, pairs.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]));
}
