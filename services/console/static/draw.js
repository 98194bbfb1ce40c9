// Drawing a model's answer on a canvas holding the image at its own pixel size: boxes with labels and scores,
// keypoints with the skeleton, masks from COCO compressed RLE. Labels are drawn as canvas text (never markup).

const PALETTE = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45",
                 "#fabed4", "#469990", "#dcbeff", "#9a6324", "#800000", "#aaffc3", "#808000", "#000075"];

export function color(i) { return PALETTE[((i % PALETTE.length) + PALETTE.length) % PALETTE.length]; }

function lineWidth(ctx) { return Math.max(2, Math.round(Math.max(ctx.canvas.width, ctx.canvas.height) / 300)); }

export function drawBox(ctx, box, label, score, i) {
  const [x1, y1, x2, y2] = box;
  const lw = lineWidth(ctx);
  ctx.strokeStyle = color(i);
  ctx.lineWidth = lw;
  ctx.strokeRect(x1, y1, Math.max(1, x2 - x1), Math.max(1, y2 - y1));
  const text = `${label} ${score >= 0.01 ? score.toFixed(2) : score.toPrecision(2)}`;
  ctx.font = `${lw * 6}px sans-serif`;
  const w = ctx.measureText(text).width + lw * 2;
  const h = lw * 8;
  const ty = y1 - h >= 0 ? y1 - h : y1;
  ctx.fillStyle = color(i);
  ctx.fillRect(x1, ty, w, h);
  ctx.fillStyle = "#fff";
  ctx.textBaseline = "top";
  ctx.fillText(text, x1 + lw, ty + lw);
}

export function drawPose(ctx, person, skeleton, i) {
  const lw = lineWidth(ctx);
  const kps = person.keypoints;
  ctx.lineWidth = lw;
  ctx.strokeStyle = color(i);
  for (const bone of skeleton) {
    const a = kps[bone.start], b = kps[bone.end];
    if (!a || !b || !a.visible || !b.visible) continue;
    ctx.beginPath();
    ctx.moveTo(a.x, a.y);
    ctx.lineTo(b.x, b.y);
    ctx.stroke();
  }
  for (const kp of kps) {
    if (!kp.visible) continue;
    ctx.beginPath();
    ctx.arc(kp.x, kp.y, lw * 1.5, 0, 2 * Math.PI);
    ctx.fillStyle = "#fff";
    ctx.fill();
    ctx.strokeStyle = color(i);
    ctx.stroke();
  }
}

// pycocotools' rleFrString: 6-bit groups offset by 48, 5 data bits + a continuation bit, sign-extended, and each
// count after the second stored as a difference from the count two places before it
export function rleCounts(s) {
  const counts = [];
  let p = 0;
  while (p < s.length) {
    let x = 0, k = 0, more = true;
    while (more) {
      const c = s.charCodeAt(p) - 48;
      x |= (c & 0x1f) << (5 * k);
      more = Boolean(c & 0x20);
      p += 1; k += 1;
      if (!more && (c & 0x10)) x |= -1 << (5 * k);
    }
    if (counts.length > 2) x += counts[counts.length - 2];
    counts.push(x);
  }
  return counts;
}

// paint a mask (column-major runs, starting with background) over the canvas in the instance's colour
export function drawMask(ctx, rle, i, alpha = 0.45) {
  const [h, w] = rle.size;
  if (w !== ctx.canvas.width || h !== ctx.canvas.height) return 0;
  const image = ctx.getImageData(0, 0, w, h);
  const hex = color(i);
  const rgb = [1, 3, 5].map((o) => parseInt(hex.slice(o, o + 2), 16));
  const counts = rleCounts(rle.counts);
  let pos = 0, painted = 0;
  for (let r = 0; r < counts.length; r += 1) {
    const end = pos + counts[r];
    if (r % 2 === 1) {
      for (let j = pos; j < end && j < w * h; j += 1) {
        const x = Math.floor(j / h), y = j % h;
        const o = (y * w + x) * 4;
        for (let c = 0; c < 3; c += 1) image.data[o + c] = Math.round(image.data[o + c] * (1 - alpha) + rgb[c] * alpha);
        painted += 1;
      }
    }
    pos = end;
  }
  ctx.putImageData(image, 0, 0);
  return painted;
}

// an image classifier's answer: its top-1 label and score on a banner across the image's top edge
export function drawBanner(ctx, label, score) {
  const lw = lineWidth(ctx);
  const h = lw * 9;
  ctx.fillStyle = color(0);
  ctx.fillRect(0, 0, ctx.canvas.width, h);
  ctx.font = `${lw * 6}px sans-serif`;
  ctx.fillStyle = "#fff";
  ctx.textBaseline = "top";
  ctx.fillText(`${label} ${score.toFixed(2)}`, lw * 2, lw * 1.5);
}
