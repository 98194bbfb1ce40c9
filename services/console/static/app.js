// The console's entry: hash routes (#/repository, #/try/<family>, #/rollouts), the key fields, page lifecycle.
import { clear, el, getKey, setKey } from "./util.js";
import { repositoryPage } from "./repository.js";
import { imagePage } from "./images.js";
import { textPage } from "./text.js";
import { forecastPage } from "./forecast.js";
import { rolloutsPage } from "./rollouts.js";

const PAGES = {
  "repository": repositoryPage,
  "try/detection": (main) => imagePage(main, "detection"),
  "try/pose": (main) => imagePage(main, "pose"),
  "try/segmentation": (main) => imagePage(main, "segmentation"),
  "try/classification": (main) => imagePage(main, "classification"),
  "try/text": textPage,
  "try/forecast": forecastPage,
  "rollouts": rolloutsPage,
};

let stopCurrent = null;  // a page may return a function that stops its timers

function route() {
  const name = location.hash.replace(/^#\/?/, "") || "repository";
  const page = PAGES[name] || PAGES.repository;
  if (stopCurrent) stopCurrent();
  stopCurrent = null;
  const main = document.getElementById("main");
  clear(main);
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.page === (PAGES[name] ? name : "repository"));
  }
  document.body.dataset.page = PAGES[name] ? name : "repository";
  const stop = page(main);
  if (typeof stop === "function") stopCurrent = stop;
}

function keys() {
  const apiInput = document.getElementById("api-key");
  const adminInput = document.getElementById("admin-key");
  apiInput.value = getKey("api");
  adminInput.value = getKey("admin");
  const inferenceKey = () => getKey("api") || getKey("admin");  // what util.api sends to the public API
  const changed = () => {
    const [hadAdmin, hadKey] = [getKey("admin"), inferenceKey()];
    setKey("api", apiInput.value.trim());
    setKey("admin", adminInput.value.trim());
    // the rollouts page reads the admin key once: it turns editable / read-only; the try-its list the deployments
    // again (a refusal for want of a key goes away) without losing what was typed or uploaded
    if (hadAdmin !== getKey("admin") && document.body.dataset.page === "rollouts") route();
    if (hadKey !== inferenceKey()) {
      for (const node of document.querySelectorAll("[data-keyed]")) node.dispatchEvent(new Event("keyschange"));
    }
  };
  apiInput.addEventListener("change", changed);
  adminInput.addEventListener("change", changed);
  document.getElementById("keys").addEventListener("submit", (e) => { e.preventDefault(); changed(); });
  document.getElementById("forget-keys").addEventListener("click", () => {
    apiInput.value = ""; adminInput.value = ""; changed();
  });
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  keys();
  route();
  document.body.append(el("span", { id: "console-ready", hidden: true }));
});
