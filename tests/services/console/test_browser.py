"""The console in a real headless Chromium against a real server (conftest.py): every page loads without a console
error at 1280x800 and at a phone width, the try-it pages draw what the API answered (canvas pixels checked where the
boxes and masks are), the forecast plot and report match the answer, labels and descriptions that are markup show as
text, and the repository page's totals match /metrics. Rollouts from the page: test_rollouts.py; the keys:
test_keys.py."""
from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scripts.console_screenshots import PAGES, XSS_DESCRIPTION, XSS_LABEL, run_page
from tests.services.console.helpers import api, deployments, until

pytestmark = pytest.mark.timeout(300)

# pixels of the try-it canvas that differ from the image as it was before the run, at the given points
CHANGED = """(points) => {
  const c = document.getElementById('tryit-canvas');
  const now = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const before = window.__before.data;
  return points.filter(([x, y]) => {
    const o = (y * c.width + x) * 4;
    return now[o] !== before[o] || now[o + 1] !== before[o + 1] || now[o + 2] !== before[o + 2];
  }).length;
}"""
KEEP_BEFORE = """() => { const c = document.getElementById('tryit-canvas');
  window.__before = c.getContext('2d').getImageData(0, 0, c.width, c.height); return [c.width, c.height]; }"""


def first_paint_ms(page) -> float | None:
    entries = page.evaluate("performance.getEntriesByName('first-contentful-paint').map(e => e.startTime)")
    return entries[0] if entries else None


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_every_page_loads_without_console_errors(tab, record_property, width, height):
    t = tab(width=width, height=height)
    paints = {}
    for name in PAGES:
        t.page.goto("about:blank")  # a fresh load of each page, so each has its own first paint
        run_page(t.page, name)
        paints[name] = first_paint_ms(t.page)
        assert t.errors == [], (name, t.errors)
        # nothing sticks out sideways: the page fits the viewport's width
        overflow = t.page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, (name, overflow)
    shown = {k: round(v or -1) for k, v in paints.items()}
    print(f"first contentful paint at {width}x{height} (ms):", shown)
    record_property(f"first_paint_ms_{width}x{height}", shown)  # in the JUnit XML; the goal is < 1000 ms
    # recorded, not timed: the bound only catches a page that paints nothing useful for seconds
    assert all(v is not None and v < 5000 for v in paints.values()), shown


def box_edge_points(box, size):
    """Points on the left and bottom edges of a box as the page strokes it (inside the canvas)."""
    w, h = size
    x1, y1, x2, y2 = (round(v) for v in box)
    x1, x2 = min(max(x1, 0), w - 1), min(max(x2, 0), w - 1)
    y1, y2 = min(max(y1, 0), h - 1), min(max(y2, 0), h - 1)
    return [[x1, y] for y in range(y1 + (y2 - y1) // 2, y2)] + [[x, y2] for x in range(x1 + (x2 - x1) // 2, x2)]


@pytest.mark.parametrize("family,path", [("detection", "/v1/detect"), ("pose", "/v1/pose"),
                                         ("segmentation", "/v1/segment")])
def test_image_try_it_draws_what_the_api_answered(tab, console_server, family, path):
    if family == "pose" and not any(d["family"] == "pose" for d in deployments(console_server.url).values()):
        pytest.skip("no pose model: torch and ultralytics (the export extra) build it")
    t = tab()
    t.page.goto(f"/console/#/try/{family}")
    t.page.wait_for_selector("#deployment option", state="attached")
    t.page.click("#sample")
    t.page.wait_for_selector("#run:not([disabled])")
    size = t.page.evaluate(KEEP_BEFORE)
    t.page.fill("#conf", "0.001")
    t.page.fill("#max-detections", "3")
    with t.page.expect_response(lambda r: r.url.endswith(path)) as answer:
        t.page.click("#run")
    t.page.wait_for_selector("#tryit-status[data-state=done]")
    body = answer.value.json()
    items = body["results"][0]["detections" if family == "detection" else "people" if family == "pose"
                               else "instances"]
    assert items, body  # the threshold is low enough for the tiny models to find something
    labels = t.page.locator("#tryit-results .label").all_text_contents()
    assert labels == [i["label"] for i in items]
    for item in items:
        points = box_edge_points(item["box"], size)
        assert t.page.evaluate(CHANGED, points) > 0, item["box"]
    if family == "pose":  # every visible keypoint is drawn where the answer puts it
        w, h = size
        points = [[min(round(k["x"]), w - 1), min(round(k["y"]), h - 1)] for p in items for k in p["keypoints"]
                  if k["visible"]]
        assert t.page.evaluate(CHANGED, points) == len(points)
    if family == "segmentation":
        from triserve_client.masks import decode_rle

        for item in items:
            mask = decode_rle(item["rle"])
            ys, xs = mask.nonzero()
            step = max(1, len(xs) // 300)
            points = [[int(x), int(y)] for x, y in zip(xs[::step], ys[::step])]
            assert t.page.evaluate(CHANGED, points) >= 0.9 * len(points)  # the mask is painted where the RLE says
    snippets = t.page.locator("[data-snippet]").all_text_contents()
    assert f"{path}/upload" in snippets[0] and "images=@" in snippets[0]
    assert f"ts.{path.rsplit('/', 1)[1]}(" in snippets[1] and "upload=True" in snippets[1]
    assert body["timings"]["total_ms"] is not None and "total" in t.page.locator(".timings").text_content()
    assert t.errors == []


def test_image_classification_try_it_shows_the_top_k_and_draws_the_top_1(tab):
    t = tab()
    t.page.goto("/console/#/try/classification")
    t.page.wait_for_selector("#deployment option[value=classification]", state="attached")
    t.page.click("#sample")
    t.page.wait_for_selector("#run:not([disabled])")
    width, height = t.page.evaluate(KEEP_BEFORE)
    t.page.fill("#top-k", "3")
    with t.page.expect_response(lambda r: r.url.endswith("/v1/classify-image")) as answer:
        t.page.click("#run")
    t.page.wait_for_selector("#tryit-status[data-state=done]")
    result = answer.value.json()["results"][0]
    assert len(result["top_k"]) == 3 and result["top_k"][0]["label"] == result["label"]
    assert t.page.locator("#tryit-results .label").all_text_contents() == [c["label"] for c in result["top_k"]]
    assert t.page.locator("#tryit-results .score").all_text_contents() == [f"{c['score']:.3f}" for c in
                                                                           result["top_k"]]
    banner = [[x, 1] for x in range(0, width, 4)]  # the top-1 banner across the image's top edge
    assert t.page.evaluate(CHANGED, banner) >= 0.9 * len(banner)
    assert t.page.evaluate(CHANGED, [[width // 2, height - 2]]) == 0  # the rest of the image is left as it was
    snippets = t.page.locator("[data-snippet]").all_text_contents()
    assert "/v1/classify-image/upload" in snippets[0] and "-F 'top_k=3'" in snippets[0]
    assert ('ts.classify_image("sample.png", deployment="classification", model="auto", top_k=3, upload=True)'
            in snippets[1])
    assert t.errors == []


def test_forecast_plots_history_forecast_intervals_csv_and_panel(tab):
    t = tab()
    t.page.goto("/console/#/try/forecast")
    t.page.wait_for_selector("#deployment option", state="attached")
    t.page.fill("#horizon", "6")
    with t.page.expect_response(lambda r: r.url.endswith("/v1/forecast")) as answer:
        t.page.click("#run")
    t.page.wait_for_selector("#tryit-status[data-state=done]")
    body = answer.value.json()
    assert len(body["forecast"]) == 6
    plot = {p: t.page.get_attribute(f"#forecast-plot [data-part={p}]", "d") for p in ("history", "forecast", "band-50",
                                                                            "band-90")}
    assert plot["history"].count("L") == 47  # 48 points, one move and 47 lines
    assert plot["forecast"].count("L") == 6  # from the last observation through the 6 steps
    assert all(plot[b].endswith("Z") for b in ("band-50", "band-90"))
    assert t.page.text_content("#forecast-method") == body["input"]["method"]
    assert '"horizon":6' in t.page.locator("[data-snippet=curl]").first.text_content()

    # CSV with timestamps: the frequency is inferred by the server
    t.page.fill("#values", "\n".join(f"2026-03-{d:02d}T00:00:00Z,{10 + d % 3}" for d in range(1, 29)))
    t.page.select_option("#frequency", "")
    with t.page.expect_response(lambda r: r.url.endswith("/v1/forecast")) as answer:
        t.page.click("#run")
    t.page.wait_for_selector("#tryit-status[data-state=done]")
    assert answer.value.json()["input"]["frequency_inferred"] is True
    assert "D (inferred)" in t.page.text_content("#forecast-report")

    # a panel: one plot per series, in request order, with the method the server chose for each
    with t.page.expect_response(lambda r: r.url.endswith("/v1/forecast/panel")) as answer:
        t.page.click("#panel-run")
    t.page.wait_for_selector("#panel-status[data-state=done]")
    panel = answer.value.json()["series"]
    shown = t.page.locator("[data-series]")
    assert [shown.nth(i).get_attribute("data-series") for i in range(shown.count())] == ["store-1", "store-2"]
    assert [shown.nth(i).locator("code").text_content() for i in range(2)] == [s["input"]["method"] for s in panel]
    assert shown.nth(0).locator("[data-part=forecast]").get_attribute("d").count("L") == 7
    assert 'ts.forecast_panel({"store-1": [12, 15,' in t.page.locator("[data-snippet=python]").last.text_content()
    assert t.errors == []


def shown(value, digits: int = 3) -> str:
    """A number as the console's fmt() writes it."""
    return "–" if value is None else re.sub(r"\.0+$", "", f"{value:.{digits}f}")


def test_forecast_backtest_draws_and_shows_the_api_answer(tab):
    t = tab()
    t.page.goto("/console/#/try/forecast")
    t.page.wait_for_selector("#deployment option", state="attached")
    t.page.fill("#horizon", "4")
    t.page.fill("#backtest-origins-count", "3")
    with t.page.expect_response(lambda r: r.url.endswith("/v1/forecast/backtest")) as answer:
        t.page.click("#backtest-run")
    t.page.wait_for_selector("#backtest-status[data-state=done]")
    body = answer.value.json()
    assert body["horizon"] == 4 and len(body["origins"]) == 3
    figure = t.page.locator("#backtest-plot")
    lo, hi, ylo, yhi = (float(figure.get_attribute(f"data-{a}")) for a in ("lo", "hi", "ylo", "yhi"))

    def drawn(selector: str) -> list[float]:  # a path's vertices read back as values
        d = figure.locator(selector).get_attribute("d")
        return [lo + (ylo - float(y)) / (ylo - yhi) * (hi - lo) for y in re.findall(r"[ML][\d.]+,([\d.]+)", d)]

    for k, origin in enumerate(body["origins"]):
        assert drawn(f"[data-part=origin-forecast][data-origin='{k}']") == pytest.approx(
            [p["point"] for p in origin["forecast"]], abs=(hi - lo) * 1e-3)
    assert drawn("[data-part=actual]") == pytest.approx([v for o in body["origins"] for v in o["actual"]],
                                                        abs=(hi - lo) * 1e-3)
    assert figure.locator("[data-part=origin-band]").count() == 3
    assert t.page.text_content("#backtest-mase") == shown(body["mase"])
    assert t.page.text_content("#backtest-rmsse") == shown(body["rmsse"])
    for level in ("50", "90"):
        cov = body[f"coverage_{level}"]
        assert t.page.text_content(f"#backtest-coverage-{level}") == ("–" if cov is None else f"{shown(cov * 100, 1)}%")
    rows = t.page.locator("#backtest-origins tr")
    assert [rows.nth(i + 1).locator("td").all_text_contents() for i in range(3)] == [
        [o["origin"], o["method"], shown(o["mase"]), shown(o["rmsse"])] for o in body["origins"]]
    snippets = t.page.locator("#backtest-output [data-snippet]").all_text_contents()
    assert "/v1/forecast/backtest" in snippets[0] and '"origins":3' in snippets[0]
    assert "ts.forecast_backtest([" in snippets[1] and "horizon=4" in snippets[1] and "origins=3" in snippets[1]
    assert "total" in t.page.locator("#backtest-output .timings").text_content()
    assert t.errors == []


def test_markup_in_labels_and_descriptions_shows_as_text(tab):
    t = tab()
    run_page(t.page, "repository")
    card = t.page.locator("[data-deployment=markup]")
    assert card.locator("[data-field=description]").text_content() == XSS_DESCRIPTION
    t.page.goto("/console/#/try/text")
    t.page.wait_for_selector("#deployment option[value=markup]", state="attached")
    t.page.select_option("#deployment", "markup")
    t.page.click("#run")
    t.page.wait_for_selector("#tryit-status[data-state=done]")
    labels = t.page.locator("#tryit-results .label").all_text_contents()
    assert labels and all(label.startswith(XSS_LABEL) for label in labels)
    assert t.page.evaluate("document.querySelectorAll('main img').length") == 0
    assert t.page.evaluate("window.__xss") is None  # no onerror ran

    # an error answer that echoes what was sent shows as text too
    t.page.goto("/console/#/try/forecast")
    t.page.wait_for_selector("#deployment option", state="attached")
    t.page.fill("#start", "<img src=x onerror=window.__xss=3>")
    with t.page.expect_response(lambda r: r.url.endswith("/v1/forecast")) as answer:
        t.page.click("#run")
    t.page.wait_for_selector("#tryit-status[data-state=error]")
    error = answer.value.json()["error"]
    assert answer.value.status == 422
    assert t.page.text_content("#tryit-error") == f"422 {error['code']}: {error['message']}"
    assert t.page.evaluate("document.querySelectorAll('main img').length") == 0
    assert t.page.evaluate("window.__xss") is None
    # the browser logs the 422 itself ("Failed to load resource"); nothing else
    assert [e for e in t.errors if "status of 422" not in e] == []


def metric_total(url: str, name: str, **labels: str) -> float:
    text = api(url, "GET", "/metrics").text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_repository_figures_match_metrics_and_models(tab, console_server):
    for i in range(5):
        api(console_server.url, "POST", "/v1/classify", json={"texts": [f"book a flight {i}"]}).raise_for_status()
    t = tab()
    run_page(t.page, "repository")
    status = t.page.locator("#repo-status")
    seen = int(status.get_attribute("data-refreshes"))
    until(lambda: int(status.get_attribute("data-refreshes")) > seen, what="a refresh after the requests")
    card = t.page.locator("[data-deployment=text]")
    expected = metric_total(console_server.url, "triserve_requests_total", deployment="text")
    assert expected >= 5 and card.locator("[data-stat=requests]").text_content() == str(int(expected))
    models = deployments(console_server.url)
    for name, dep in models.items():
        shown = t.page.locator(f"[data-deployment={name}]")
        assert shown.locator("[data-field=model-version]").text_content() == dep["model"]["version"]
        assert shown.locator("[data-field=model-state]").text_content() == dep["model"]["state"]
    assert t.errors == []
