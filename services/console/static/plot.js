// The forecast plot as SVG: history, forecast, and the 50%/90% intervals as bands (server strings as SVG text).
import { el, fmt } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";
export function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

export function plot(history, forecast, id = "forecast-plot") {
  const W = 800, H = 320, PAD = 40;
  const n = history.length, total = n + forecast.length;
  const ys = [...history.filter((v) => v !== null), ...forecast.flatMap((p) => [p.point, p.lower_90, p.upper_90]
    .filter((v) => v !== null && v !== undefined))];
  let lo = Math.min(...ys), hi = Math.max(...ys);
  if (hi === lo) { hi += 1; lo -= 1; }
  const x = (i) => PAD + (W - 2 * PAD) * (total > 1 ? i / (total - 1) : 0);
  const y = (v) => H - PAD - (H - 2 * PAD) * ((v - lo) / (hi - lo));
  const line = (pts) => pts.map(([i, v], k) => `${k ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const band = (low, high) => {
    const pts = forecast.map((p, k) => [n + k, p[low], p[high]]).filter(([, a, b]) => a !== null && b !== null);
    if (!pts.length) return "";
    return `${line(pts.map(([i, a]) => [i, a]))} ${pts.reverse().map(([i, , b]) =>
      `L${x(i).toFixed(1)},${y(b).toFixed(1)}`).join(" ")} Z`;
  };
  const root = svg("svg", { id, viewBox: `0 0 ${W} ${H}`, role: "img",
                           "aria-label": "history, forecast and intervals" });
  root.append(svg("path", { "data-part": "band-90", class: "band-90", d: band("lower_90", "upper_90") }),
              svg("path", { "data-part": "band-50", class: "band-50", d: band("lower_50", "upper_50") }),
              svg("path", { "data-part": "history", class: "history",
                            d: line(history.map((v, i) => [i, v]).filter(([, v]) => v !== null)) }),
              svg("path", { "data-part": "forecast", class: "forecast",
                            d: line([...(history.length && history[n - 1] !== null ? [[n - 1, history[n - 1]]] : []),
                                     ...forecast.map((p, k) => [n + k, p.point])]) }),
              svg("line", { class: "axis", x1: PAD, y1: H - PAD, x2: W - PAD, y2: H - PAD }),
              svg("line", { class: "divider", x1: x(n - 0.5), y1: PAD / 2, x2: x(n - 0.5), y2: H - PAD }),
              svg("text", { x: PAD, y: PAD - 8, class: "tick" }, fmt(hi, 2)),
              svg("text", { x: PAD, y: H - PAD + 16, class: "tick" }, fmt(lo, 2)),
              svg("text", { x: x(n - 0.5) - 4, y: PAD / 2 + 10, class: "tick end" },
                  forecast.length ? `forecast from ${forecast[0].timestamp}` : ""),
              svg("text", { x: W - PAD, y: H - PAD + 16, class: "tick end" },
                  forecast.length ? forecast[forecast.length - 1].timestamp : ""));
  return el("figure", { class: "plot" }, root, el("figcaption", { class: "legend" },
    el("span", { class: "key history", text: "history" }), el("span", { class: "key forecast", text: "forecast" }),
    el("span", { class: "key band-50", text: "50% interval" }), el("span", { class: "key band-90",
                                                                              text: "90% interval" })));
}
