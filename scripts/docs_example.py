"""Draw the documentation's example image, docs/img/example_families.png, from the answers of a RUNNING server.

    make serve &                                           # the defaults: coco, people, plates
    .venv/bin/python -m scripts.docs_example --url http://127.0.0.1:3000

Three panels side by side, each the server's real answer drawn with PIL: COCO detection (deployment `coco`) and pose
(`people`) on ultralytics' bus.jpg (inside the installed ultralytics package), licence-plate segmentation (`plates`)
on the Bangkok motorcyclists photo of the gradio-yolov8-det wheel (the photo the plates import is checked on, fetched
and cached by models.importing.photos; or --plates-photo). Boxes with labels and scores, keypoints and the skeleton
the answer names, masks decoded from their COCO RLE by the client (triserve_client.masks) and laid over translucent.
The plates panel is cropped around the plates found (they are small in a 1024 px street photo). Every call goes
through triserve_client, as a user's would; the script prints what each answer held, for the README's comments.
"""
from __future__ import annotations

import argparse
import colorsys
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from scripts.common import PROJECT_ROOT
from triserve_client import TriserveClient
from triserve_client.masks import decode_rle
from triserve_client.models import DetectResponse, PoseResponse, SegmentResponse

BANGKOK = "gradio-yolov8-det/1024px-Motorcyclists_lane_splitting_in_Bangkok,_Thailand.jpg"
OUT = PROJECT_ROOT / "docs" / "img" / "example_families.png"
PANEL_HEIGHT = 540
MAX_BYTES = 400_000


def bus_photo() -> Path:
    import ultralytics  # the photo ships inside the package

    return Path(ultralytics.__file__).parent / "assets" / "bus.jpg"


def plates_photo(cache: Path) -> Path:
    from models.importing.photos import package_photos

    photos = {p.name: p.path for p in package_photos(cache).all()}
    if BANGKOK not in photos:
        sys.exit(f"the plates photo {BANGKOK} could not be had (cache {cache}); pass --plates-photo")
    return photos[BANGKOK]


def colour(i: int) -> tuple[int, int, int]:
    r, g, b = colorsys.hsv_to_rgb((i * 0.618034) % 1.0, 0.85, 1.0)
    return int(r * 255), int(g * 255), int(b * 255)


def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def label(draw: ImageDraw.ImageDraw, xy: tuple[float, float], text: str, fill: tuple[int, int, int],
          size: int) -> None:
    """`text` on a filled tag just above `xy` (inside the image when the box touches the top)."""
    f = font(size)
    x0, y0, x1, y1 = draw.textbbox((0, 0), text, font=f)
    w, h = x1 - x0 + 6, y1 - y0 + 6
    x, y = xy[0], max(0.0, xy[1] - h)
    draw.rectangle([x, y, x + w, y + h], fill=fill)
    draw.text((x + 3 - x0, y + 3 - y0), text, fill=(0, 0, 0), font=f)


def scaled(image: Image.Image, height: int) -> tuple[Image.Image, float]:
    s = height / image.height
    return image.resize((round(image.width * s), height), Image.Resampling.LANCZOS), s


def detection_panel(photo: Path, r: DetectResponse) -> Image.Image:
    img, s = scaled(Image.open(photo).convert("RGB"), PANEL_HEIGHT)
    draw = ImageDraw.Draw(img)
    for d in sorted(r.results[0].detections, key=lambda d: d.score):
        c = colour(d.class_id)
        x1, y1, x2, y2 = (v * s for v in d.box)
        draw.rectangle([x1, y1, x2, y2], outline=c, width=3)
        label(draw, (x1, y1), f"{d.label} {d.score:.2f}", c, 14)
    return img


def pose_panel(photo: Path, r: PoseResponse) -> Image.Image:
    img, s = scaled(Image.open(photo).convert("RGB"), PANEL_HEIGHT)
    draw = ImageDraw.Draw(img)
    for n, person in enumerate(r.results[0].people):
        c = colour(n + 3)
        x1, y1, x2, y2 = (v * s for v in person.box)
        draw.rectangle([x1, y1, x2, y2], outline=c, width=2)
        label(draw, (x1, y1), f"{person.label} {person.score:.2f}", c, 13)
        kp = person.keypoints
        for bone in r.skeleton:
            a, b = kp[bone.start], kp[bone.end]
            if a.visible and b.visible:
                draw.line([(a.x * s, a.y * s), (b.x * s, b.y * s)], fill=c, width=3)
        for k in kp:
            if k.visible:
                draw.ellipse([k.x * s - 4, k.y * s - 4, k.x * s + 4, k.y * s + 4], fill=(255, 255, 255),
                             outline=(0, 0, 0))
    return img


def segmentation_panel(photo: Path, r: SegmentResponse, alpha: float = 0.5) -> Image.Image:
    """Masks over the full-resolution photo, then cropped around the instances and scaled to the panel's height."""
    base = np.asarray(Image.open(photo).convert("RGB")).astype(np.float32)
    result = r.results[0]
    for n, inst in enumerate(result.instances):
        if inst.rle is not None:
            mask = decode_rle(inst.rle)
            base[mask] = (1 - alpha) * base[mask] + alpha * np.array(colour(n + 7), np.float32)
    img = Image.fromarray(base.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for n, inst in enumerate(result.instances):
        draw.rectangle(inst.box, outline=colour(n + 7), width=2)
    if result.instances:  # crop around the plates: half the photo's height, centred on them, kept in the photo
        boxes = np.array([i.box for i in result.instances])
        cx, cy = (boxes[:, 0].min() + boxes[:, 2].max()) / 2, (boxes[:, 1].min() + boxes[:, 3].max()) / 2
        h = max(img.height // 2, int(boxes[:, 3].max() - boxes[:, 1].min()) + 40)
        w = min(img.width, max(int(h * 1.2), int(boxes[:, 2].max() - boxes[:, 0].min()) + 40))
        x0 = int(min(max(cx - w / 2, 0), img.width - w))
        y0 = int(min(max(cy - h / 2, 0), img.height - h))
        img = img.crop((x0, y0, x0 + w, y0 + min(h, img.height)))
        offset = (x0, y0)
    else:
        offset = (0, 0)
    img, s = scaled(img, PANEL_HEIGHT)
    draw = ImageDraw.Draw(img)
    for n, inst in enumerate(result.instances):  # labels after scaling: readable at the panel's size
        label(draw, ((inst.box[0] - offset[0]) * s, (inst.box[1] - offset[1]) * s),
              f"{inst.label} {inst.score:.2f}", colour(n + 7), 13)
    return img


def compose(panels: list[tuple[str, Image.Image]], gap: int = 8, title_h: int = 30) -> Image.Image:
    width = sum(p.width for _, p in panels) + gap * (len(panels) - 1)
    out = Image.new("RGB", (width, PANEL_HEIGHT + title_h), (255, 255, 255))
    draw = ImageDraw.Draw(out)
    x = 0
    for title, panel in panels:
        draw.text((x + 6, 6), title, fill=(20, 20, 20), font=font(16))
        out.paste(panel, (x, title_h))
        x += panel.width + gap
    return out


def save(image: Image.Image, path: Path) -> int:
    """PNG, quantised to 256 colours when the full-colour file is over MAX_BYTES (photos compress badly in PNG)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    if buf.tell() > MAX_BYTES:
        buf = io.BytesIO()
        image.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.FLOYDSTEINBERG).save(
            buf, format="PNG", optimize=True)
    path.write_bytes(buf.getvalue())
    return len(buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:3000", help="a running server with the default deployments")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--plates-photo", type=Path, help="default: the Bangkok photo of the gradio-yolov8-det wheel")
    ap.add_argument("--cache", type=Path, default=PROJECT_ROOT / ".cache" / "importer", help="the photo wheels' cache")
    ap.add_argument("--conf", type=float, default=0.3, help="conf_threshold of every request")
    args = ap.parse_args(argv)

    bus = bus_photo()
    plates = args.plates_photo or plates_photo(args.cache)
    with TriserveClient(args.url, timeout=60) as ts:
        ts.wait_ready(timeout=120)
        det = ts.detect(bus, conf_threshold=args.conf, deployment="coco")
        pose = ts.pose(bus, conf_threshold=args.conf, deployment="people")
        seg = ts.segment(plates, conf_threshold=args.conf, deployment="plates")
    print("coco  ", det.model.name, [(d.label, round(d.score, 2)) for d in det.results[0].detections])
    print("people", pose.model.name, [(round(p.score, 2), sum(k.visible for k in p.keypoints))
                                      for p in pose.results[0].people], f"{len(pose.keypoint_names)} keypoints")
    print("plates", seg.model.name, [(i.label, round(i.score, 2), i.area) for i in seg.results[0].instances])
    image = compose([(f"detection: coco ({det.model.name})", detection_panel(bus, det)),
                     (f"pose: people ({pose.model.name})", pose_panel(bus, pose)),
                     (f"segmentation: plates ({seg.model.name}), cropped", segmentation_panel(plates, seg))])
    size = save(image, args.out)
    print(f"wrote {args.out} ({image.width}x{image.height}, {size / 1000:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
