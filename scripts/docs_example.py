"""Draw the documentation's example image, docs/img/example_families.png, from the answers of a RUNNING server.

    make serve &                                           # the defaults: coco, people, plates
    .venv/bin/python -m scripts.docs_example --url http://127.0.0.1:3000

Three panels side by side, each the server's real answer drawn with PIL: COCO detection (deployment `coco`) and pose
(`people`) on ultralytics' bus.jpg (inside the installed ultralytics package), licence-plate segmentation (`plates`)
on a crop of the Bangkok motorcyclists photo of the gradio-yolov8-det wheel (a photo the plates import is checked
on, fetched and cached by triserve.models.importing.photos; or --plates-photo). The crop (--plates-crop) is what is
sent: in the
whole 1024 px street photo a plate is ~25 px wide before the model's 640 px letterbox, and the model finds the
pickup's plate at 0.43 in the crop (0, 250, 512, 681), 0.71 in the default crop, at 0.21 only in the
whole photo (there its best guess, 0.41, is the radiator grille's badge). Boxes with labels and scores, keypoints
and the skeleton the answer names, masks decoded from their COCO RLE by the client (triserve_client.masks) and laid
over translucent. Every call goes
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
PANEL_HEIGHT = 500
MAX_BYTES = 400_000


def bus_photo() -> Path:
    import ultralytics  # the photo ships inside the package

    return Path(ultralytics.__file__).parent / "assets" / "bus.jpg"


def plates_photo(cache: Path) -> Path:
    from triserve.models.importing.photos import package_photos

    photos = {p.name: p.path for p in package_photos(cache).all()}
    if BANGKOK not in photos:
        sys.exit(f"the plates photo {BANGKOK} could not be had (cache {cache}); pass --plates-photo")
    return photos[BANGKOK]


def colour(i: int) -> tuple[int, int, int]:
    r, g, b = colorsys.hsv_to_rgb((i * 0.618034) % 1.0, 0.85, 1.0)
    return int(r * 255), int(g * 255), int(b * 255)


def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def label(draw: ImageDraw.ImageDraw, xy: tuple[float, float], text: str, fill: tuple[int, int, int], size: int,
          width: int) -> None:
    """`text` on a filled tag just above `xy`, kept inside an image `width` wide (and below its top)."""
    f = font(size)
    x0, y0, x1, y1 = draw.textbbox((0, 0), text, font=f)
    w, h = x1 - x0 + 6, y1 - y0 + 6
    x, y = max(0.0, min(xy[0], width - w)), max(0.0, xy[1] - h)  # kept inside the image
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
        label(draw, (x1, y1), f"{d.label} {d.score:.2f}", c, 14, img.width)
    return img


def pose_panel(photo: Path, r: PoseResponse) -> Image.Image:
    img, s = scaled(Image.open(photo).convert("RGB"), PANEL_HEIGHT)
    draw = ImageDraw.Draw(img)
    for n, person in enumerate(r.results[0].people):
        c = colour(n + 3)
        x1, y1, x2, y2 = (v * s for v in person.box)
        draw.rectangle([x1, y1, x2, y2], outline=c, width=2)
        label(draw, (x1, y1), f"{person.label} {person.score:.2f}", c, 13, img.width)
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


def segmentation_panel(photo: Image.Image, r: SegmentResponse, alpha: float = 0.5) -> Image.Image:
    """Masks over the photo as sent (full resolution), translucent, then scaled to the panel's height."""
    base = np.asarray(photo.convert("RGB")).astype(np.float32)
    result = r.results[0]
    for n, inst in enumerate(result.instances):
        if inst.rle is not None:
            mask = decode_rle(inst.rle)
            base[mask] = (1 - alpha) * base[mask] + alpha * np.array(colour(n + 7), np.float32)
    img, s = scaled(Image.fromarray(base.clip(0, 255).astype(np.uint8)), PANEL_HEIGHT)
    draw = ImageDraw.Draw(img)
    for n, inst in enumerate(result.instances):
        x1, y1, x2, y2 = (v * s for v in inst.box)
        draw.rectangle([x1, y1, x2, y2], outline=colour(n + 7), width=2)
        label(draw, (x1, y1), f"{inst.label} {inst.score:.2f}", colour(n + 7), 13, img.width)
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
    ap.add_argument("--plates-crop", default="200,350,560,620", help="x1,y1,x2,y2 of the plates photo sent")
    ap.add_argument("--conf", type=float, default=0.3, help="conf_threshold of the coco and people requests")
    ap.add_argument("--plates-conf", type=float, default=0.5, help="conf_threshold of the plates request")
    args = ap.parse_args(argv)

    bus = bus_photo()
    x1, y1, x2, y2 = (int(v) for v in args.plates_crop.split(","))
    plates = Image.open(args.plates_photo or plates_photo(args.cache)).convert("RGB").crop((x1, y1, x2, y2))
    sent = io.BytesIO()
    plates.save(sent, format="PNG")
    with TriserveClient(args.url, timeout=60) as ts:
        ts.wait_ready(timeout=120)
        det = ts.detect(bus, conf_threshold=args.conf, deployment="coco")
        pose = ts.pose(bus, conf_threshold=args.conf, deployment="people")
        seg = ts.segment(sent.getvalue(), conf_threshold=args.plates_conf, deployment="plates")
    print("coco  ", det.model.name, [(d.label, round(d.score, 2)) for d in det.results[0].detections])
    print("people", pose.model.name, [(round(p.score, 2), sum(k.visible for k in p.keypoints))
                                      for p in pose.results[0].people], f"{len(pose.keypoint_names)} keypoints")
    print("plates", seg.model.name, [(i.label, round(i.score, 2), i.area) for i in seg.results[0].instances])
    image = compose([(f"detection: coco ({det.model.name})", detection_panel(bus, det)),
                     (f"pose: people ({pose.model.name})", pose_panel(bus, pose)),
                     (f"segmentation: plates ({seg.model.name}), a crop", segmentation_panel(plates, seg))])
    size = save(image, args.out)
    print(f"wrote {args.out} ({image.width}x{image.height}, {size / 1000:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
