"""The console's screenshots (scripts/console_screenshots.py) and the docs agree: every shot the one command takes
is shown in docs/console.md, every console image the docs show is one it takes (none stale, none missing), and the
committed PNGs are the small palette images it writes (at most 1280 wide). No browser needed."""
from __future__ import annotations

import re
from pathlib import Path

from PIL import Image

from scripts.console_screenshots import PAGES, SHOTS, compress

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "docs" / "assets" / "console"


def test_every_shot_is_in_the_docs_and_every_docs_image_is_a_shot():
    shots = {f"{name}.png" for name, *_ in SHOTS}
    assert {p for _, p, *_ in SHOTS} == set(PAGES)  # every page has its screenshot
    shown = set(re.findall(r"assets/console/([\w-]+\.png)", (ROOT / "docs" / "console.md").read_text()))
    assert shown == shots
    assert {p.name for p in ASSETS.glob("*.png")} == shots
    assert "docs/assets/console/repository.png" in (ROOT / "README.md").read_text().split("\n\n")[1]


def test_the_committed_pngs_are_small_palette_images():
    for path in ASSETS.glob("*.png"):
        with Image.open(path) as image:
            assert image.mode == "P" and image.width <= 1280, (path.name, image.mode, image.size)
        assert path.stat().st_size < 200_000, path.name


def test_compress_resizes_and_quantises(tmp_path):
    import io

    from PIL import ImageDraw

    image = Image.new("RGB", (2560, 400), (250, 250, 250))
    ImageDraw.Draw(image).rectangle([100, 100, 900, 300], fill=(40, 90, 200))
    raw = io.BytesIO()
    image.save(raw, format="PNG")
    compress(raw.getvalue(), tmp_path / "shot.png")
    with Image.open(tmp_path / "shot.png") as small:
        assert small.size == (1280, 200) and small.mode == "P"
        assert small.convert("RGB").getpixel((250, 100)) == (40, 90, 200)  # flat UI colours survive exactly
