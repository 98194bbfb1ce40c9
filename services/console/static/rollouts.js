// Rollouts: per slot what serves (active, loaded, canary, shadow, promotions, split) and, with an admin key, canary,
// shadow, promote and rollback, and adding or removing a deployment; each change asks for a confirmation and shows
// the server's answer. Without an admin key the page is read-only (from /v1/models).
import { api, clear, el, errorText, fmt, getKey, kv, section } from "./util.js";

function answerView(result) {
  return el("div", { class: result.ok ? "answer good" : "answer bad", "data-status": result.status },
    el("strong", { text: result.ok ? `${result.status} OK` : errorText(result) }),
    el("pre", { text: JSON.stringify(result.body, null, 2) }));
}

// ask, call, show: every change goes through here
async function change(answer, question, method, path, body) {
  if (!window.confirm(question)) {
    clear(answer, el("p", { class: "muted", text: "cancelled" }));
    return null;
  }
  clear(answer, el("p", { class: "muted", text: "sent, waiting for the server…" }));
  const result = await api(method, path, body, { admin: true });
  clear(answer, answerView(result));
  answer.scrollIntoView({ block: "nearest" });
  return result;
}

function slotCard(slot, info, routing, admin, refresh, answer) {
  const r = routing || {};
  const canary = r.canary || info.canary;
  const split = r.split ? Object.entries(r.split.requests || {}).map(([v, n]) => `${v}: ${n}`).join(", ") +
    (r.split.canary_share === null || r.split.canary_share === undefined ? ""
      : ` (canary ${fmt(r.split.canary_share * 100)}%)`) : "–";
  const promotions = (r.promotions || []).slice(-3).map((p) => `${p.kind || "promote"} ${p.from || "?"} → ` +
    `${p.to || "?"}${p.by ? ` by ${p.by}` : ""}`).join("; ") || "–";
  const versions = el("datalist", { id: `versions-${slot}` },
    [...new Set([...(r.loaded || info.loaded_versions || []), info.version].filter(Boolean))]
      .map((v) => el("option", { value: v })));
  const input = (name, attrs = {}) => el("input", { name, list: versions.id, disabled: !admin, ...attrs });
  const button = (text, onclick) => el("button", { type: "button", disabled: !admin, text, onclick });
  const path = `/admin/models/${encodeURIComponent(slot)}`;
  const after = (res) => { if (res && res.ok) refresh(); };

  const canaryRef = input("canary-ref", { placeholder: "version" });
  const canaryWeight = el("input", { name: "canary-weight", type: "number", min: 0.01, max: 1, step: 0.01,
                                     value: 0.1, disabled: !admin });
  const shadowRef = input("shadow-ref", { placeholder: "version" });
  const promoteRef = input("promote-ref", { placeholder: "version or alias" });
  const alias = el("input", { name: "alias", value: "stable", disabled: !admin });

  return el("article", { class: "slot-card", "data-slot": slot },
    el("h3", {}, el("code", { text: slot }), " ", el("span", { class: "muted", text: info.name || "" })),
    kv([["active", el("span", { "data-field": "active", text: r.active || info.version || "–" })],
        ["loaded", (r.loaded || info.loaded_versions || []).join(", ") || "–"],
        ["canary", el("span", { "data-field": "canary",
                                text: canary ? `${canary.version} @ ${fmt(canary.weight * 100)}%` : "none" })],
        ["shadow", el("span", { "data-field": "shadow", text: r.shadow || info.shadow || "none" })],
        ["split", split], ["promotions", promotions]]),
    versions,
    el("div", { class: "actions" },
      el("div", { class: "action" }, el("span", { text: "canary" }), canaryRef, canaryWeight,
        button("Set canary", async () => after(await change(answer,
          `Send ${fmt(Number(canaryWeight.value) * 100)}% of ${slot} to ${canaryRef.value}?`, "POST",
          `${path}/canary`, { ref: canaryRef.value.trim(), weight: Number(canaryWeight.value) }))),
        button("Withdraw", async () => after(await change(answer, `Withdraw the canary of ${slot}?`, "DELETE",
          `${path}/canary`)))),
      el("div", { class: "action" }, el("span", { text: "shadow" }), shadowRef,
        button("Set shadow", async () => after(await change(answer, `Mirror ${slot}'s traffic to ${shadowRef.value}?`,
          "POST", `${path}/shadow`, { ref: shadowRef.value.trim() }))),
        button("Stop", async () => after(await change(answer, `Stop the shadow of ${slot}?`, "DELETE",
          `${path}/shadow`)))),
      el("div", { class: "action" }, el("span", { text: "promote" }), promoteRef, alias,
        button("Promote", async () => after(await change(answer,
          `Serve ${promoteRef.value} on ${slot} and move alias ${alias.value || "(none)"} to it?`, "POST",
          `${path}/promote`, { ref: promoteRef.value.trim(), alias: alias.value.trim() || null }))),
        button("Roll back", async () => after(await change(answer,
          `Return ${slot} to what served before its last promote?`, "POST", `${path}/rollback`,
          { alias: alias.value.trim() || "stable" }))))));
}

function deploymentsCard(deployments, admin, refresh, answer) {
  const name = el("input", { id: "deployment-name", placeholder: "name", disabled: !admin });
  const spec = el("textarea", { id: "deployment-spec", rows: 8, disabled: !admin });
  const template = deployments[0] ? Object.fromEntries(Object.entries(deployments[0]).filter(([k]) => k !== "name"))
    : { family: "text", model: { name: "", ref: "stable" } };
  spec.value = JSON.stringify(template, null, 2);
  const path = () => `/admin/deployments/${encodeURIComponent(name.value.trim())}`;
  const put = async () => {
    let body;
    try { body = JSON.parse(spec.value); } catch (err) {
      clear(answer, el("p", { class: "bad", text: `not JSON: ${err.message}` }));
      return;
    }
    const res = await change(answer, `Add or replace deployment ${name.value} (staged, verified, warmed, swapped)?`,
                             "PUT", path(), body);
    if (res && res.ok) refresh();
  };
  const remove = async () => {
    const res = await change(answer, `Remove deployment ${name.value}? Its models unload after in-flight requests.`,
                             "DELETE", path());
    if (res && res.ok) refresh();
  };
  return section("Deployments",
    el("p", { class: "muted", text: "A deployment from registry versions: its family, model and fallback " +
                                    "(name + version or alias), as PUT /admin/deployments/{name} takes it." }),
    el("div", { class: "controls" }, el("label", {}, "name ", name),
       el("label", { class: "wide" }, "deployment (JSON) ", spec),
       el("button", { type: "button", disabled: !admin, text: "Add / replace", onclick: put }),
       el("button", { type: "button", disabled: !admin, text: "Remove", onclick: remove })));
}

export function rolloutsPage(main) {
  const admin = Boolean(getKey("admin"));
  const status = el("p", { class: "muted", id: "rollouts-status", text: "loading…" });
  const grid = el("div", { class: "slot-grid", id: "slots" });
  const extra = el("div", {});
  // the server's answer to the last change (outside the cards, which a refresh rebuilds)
  const answer = el("div", { class: "answers", id: "rollout-answer" });
  const mode = el("p", { class: admin ? "muted" : "warn", id: "rollouts-mode",
    text: admin ? "Admin key set: changes ask for a confirmation, then show the server's answer."
      : "Read-only: type an admin key above to change rollouts." });
  main.append(section("Rollouts", mode, status, answer, grid), extra);

  async function refresh() {
    const models = await api("GET", "/v1/models");
    const routing = admin ? await api("GET", "/admin/models", undefined, { admin: true }) : null;
    if (!models.ok) { status.textContent = `could not read /v1/models: ${errorText(models)}`; return; }
    if (routing && !routing.ok) {  // the API refuses this key: so does the page
      status.textContent = `admin routes refused the key: ${errorText(routing)}`;
      mode.className = "warn";
      mode.textContent = "Read-only: the server refused the admin key.";
    } else status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    const table = routing && routing.ok ? routing.body : {};
    const cards = [];
    for (const dep of models.body.deployments) {
      for (const role of ["model", "fallback"]) {
        const info = dep[role];
        if (info) cards.push(slotCard(info.slot, info, table[info.slot], admin && routing.ok, refresh, answer));
      }
    }
    clear(grid, cards);
    if (admin && routing.ok) {
      const deps = await api("GET", "/admin/deployments", undefined, { admin: true });
      clear(extra, deps.ok ? deploymentsCard(deps.body.deployments || [], true, refresh, answer)
        : el("p", { class: "bad", text: errorText(deps) }));
    }
  }
  refresh();
}
