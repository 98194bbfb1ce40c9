// Repository page: every deployment from /v1/models with its models, rollout state and live figures from
// /console/api/summary (the server's metrics over all workers), refreshed in place every REFRESH_MS.
import { api, bytes, clear, el, errorText, fmt, quantile, section } from "./util.js";

const REFRESH_MS = 2000;

function badge(text, kind = "") { return el("span", { class: `badge ${kind}`, text }); }

function slotView(role, slot, summarySlot) {
  if (!slot) return null;
  const state = slot.error ? `refused: ${slot.error}` : slot.state || "unknown";
  const memory = slot.memory ? bytes((slot.memory.resident_mb || 0) * 2 ** 20) : "–";
  const canary = slot.canary ? `${slot.canary.version} @ ${fmt(slot.canary.weight * 100)}%` : "none";
  const split = summarySlot ? Object.entries(summarySlot.versions || {}).map(
    ([v, roles]) => `${v}: ${Object.entries(roles).map(([r, n]) => `${r} ${fmt(n, 0)}`).join(", ")}`).join("; ") : "";
  return el("div", { class: "slot", "data-role": role },
    el("h4", {}, el("span", { text: role }), " ", el("code", { text: slot.slot })),
    el("dl", { class: "kv" },
      el("dt", { text: "model" }), el("dd", { "data-field": `${role}-name`, text: slot.name || "–" }),
      el("dt", { text: "version" }), el("dd", { "data-field": `${role}-version`, text: slot.version || "–" }),
      el("dt", { text: "state" }), el("dd", { "data-field": `${role}-state`, class: slot.error ? "bad" : "",
                                               text: state }),
      el("dt", { text: "licence" }), el("dd", { text: slot.license || "–" }),
      el("dt", { text: "provider" }), el("dd", { text: slot.provider || "–" }),
      el("dt", { text: "memory" }), el("dd", { text: memory }),
      el("dt", { text: "canary" }), el("dd", { "data-field": `${role}-canary`, text: canary }),
      split ? [el("dt", { text: "split" }), el("dd", { "data-field": `${role}-split`, text: split })] : null,
      el("dt", { text: "shadow" }), el("dd", { "data-field": `${role}-shadow`, text: slot.shadow || "none" }),
      el("dt", { text: "breaker" }), el("dd", { "data-field": `${role}-breaker`,
                                                 text: summarySlot ? summarySlot.breaker : "closed" }),
    ));
}

// live figures over the window between two summaries; cumulative when nothing happened in it
function figures(now, before, elapsedS) {
  const windowed = before && elapsedS > 0 && now.requests > before.requests;
  const delta = (k) => (windowed ? now[k] - before[k] : now[k]);
  let buckets = now.latency.buckets;
  if (windowed && before.latency.buckets.length === buckets.length) {
    buckets = buckets.map(([b, c], i) => [b, c - before.latency.buckets[i][1]]);
  }
  const ok = delta("ok");
  const p50 = quantile(0.5, buckets), p99 = quantile(0.99, buckets);
  return {
    scope: windowed ? `last ${fmt(elapsedS)} s` : "since start",
    throughput: windowed ? delta("requests") / elapsedS : 0,
    p50: p50 === null ? null : p50 * 1000,
    p99: p99 === null ? null : p99 * 1000,
    degraded: ok > 0 ? delta("degraded") / ok : null,
    errors: delta("requests") > 0 ? delta("server_errors") / delta("requests") : null,
  };
}

function statsView(name, now, before, elapsedS) {
  if (!now) return el("p", { class: "muted", "data-stat": "none", text: "no requests since the server started" });
  const f = figures(now, before, elapsedS);
  const stat = (key, label, value) => el("div", { class: "stat" },
    el("span", { class: "value", "data-stat": key, text: value }), el("span", { class: "label", text: label }));
  return el("div", { class: "stats" },
    stat("throughput", "req/s", fmt(f.throughput, 2)),
    stat("p50", "p50 ms", fmt(f.p50)),
    stat("p99", "p99 ms", fmt(f.p99)),
    stat("degraded", "degraded", f.degraded === null ? "–" : `${fmt(f.degraded * 100)}%`),
    stat("errors", "5xx", f.errors === null ? "–" : `${fmt(f.errors * 100)}%`),
    stat("requests", "requests", fmt(now.requests, 0)),
    stat("pending", "queued items", fmt(now.pending_items, 0)),
    el("span", { class: "scope muted", "data-stat": "scope", text: f.scope }));
}

function deploymentCard(dep, summary, previous, elapsedS) {
  const slots = (summary && summary.slots) || {};
  const state = dep.error ? badge(`refused: ${dep.error}`, "bad") : dep.ready ? badge("ready", "good")
    : badge("not ready", "warn");
  return el("article", { class: "deployment", "data-deployment": dep.name },
    el("header", {},
      el("h3", { text: dep.name }),
      badge(dep.family, "family"), dep.default ? badge("default") : null, badge(dep.residency || "always"), state),
    dep.description ? el("p", { class: "description", "data-field": "description", text: dep.description }) : null,
    statsView(dep.name, summary && summary.deployments[dep.name],
              previous && previous.deployments[dep.name], elapsedS),
    el("div", { class: "slots" }, slotView("model", dep.model, dep.model && slots[dep.model.slot]),
       slotView("fallback", dep.fallback, dep.fallback && slots[dep.fallback.slot])));
}

export function repositoryPage(main) {
  const status = el("p", { class: "muted", id: "repo-status", text: "loading…" });
  const grid = el("div", { class: "deployments", id: "deployments" });
  main.append(section("Model repository", status, grid));
  let previous = null;
  let timer = null;
  let stopped = false;

  async function refresh() {
    const [models, summary] = await Promise.all([api("GET", "/v1/models"), api("GET", "/console/api/summary")]);
    if (stopped) return;
    if (!models.ok) {
      status.textContent = `could not read /v1/models: ${errorText(models)}`;
      status.dataset.state = "refused";
    } else {
      delete status.dataset.state;
      const sum = summary.ok ? summary.body : null;
      const elapsed = previous && sum ? sum.time - previous.time : 0;
      clear(grid, models.body.deployments.map((d) => deploymentCard(d, sum, previous, elapsed)));
      const when = new Date().toLocaleTimeString();
      status.textContent = `${models.body.deployments.length} deployments · runner ${models.body.ready ? "ready"
        : "not ready"} · updated ${when}${summary.ok ? "" : ` · metrics: ${errorText(summary)}`}`;
      status.dataset.refreshes = String(Number(status.dataset.refreshes || 0) + 1);
      if (sum) previous = sum;
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }
  refresh();
  return () => { stopped = true; clearTimeout(timer); };
}
