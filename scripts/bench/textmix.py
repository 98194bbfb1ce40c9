"""The text request mix shared by the performance harness and its peers (one text per request).

Realistic lengths, from short commands ("play jazz") to ~40-word sentences, drawn with a fixed seed; when
`.cache/payloads/payloads.jsonl` exists (lines {"texts": [...]} or {"text": "..."}, e.g. sampled request bodies), its
texts are replayed instead. Also: where the default text model lives (minilm-intent:stable in models/store).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAYLOADS = ROOT / ".cache" / "payloads" / "payloads.jsonl"

SHORT = ["play jazz", "tell me a joke", "is my card blocked", "what time is it", "cancel my order", "set an alarm",
         "check my balance", "turn off the lights", "who made you", "repeat that", "what's the weather tomorrow",
         "book a table for two", "how old are you", "flip a coin", "roll a die"]
MEDIUM = ["what is my account balance in checking", "book a flight to paris next monday morning",
          "set a timer for ten minutes please", "how do you say good morning in german",
          "transfer 200 dollars to my savings account", "cancel my dinner reservation at eight tonight",
          "what is the exchange rate between dollars and euros", "remind me to call my mother on sunday",
          "how many calories are in a banana", "find me a good italian restaurant nearby",
          "please add milk and eggs to my shopping list", "what is the fastest route to the airport right now"]
CLAUSES = ["i need to know whether my credit card was charged twice for the same purchase last week",
           "because i am travelling to japan next month and want to make sure the card works abroad",
           "and could you also tell me what the interest rate on my savings account is at the moment",
           "so that i can plan how much money i should transfer before the end of the billing cycle",
           "my flight from chicago to boston was delayed and i would like to rebook it for tomorrow",
           "while you are at it please remind me to pay the electricity bill on friday afternoon",
           "i lost my phone on the train this morning and need to lock my banking app right away",
           "and then book a table for four at the thai place near the office at seven thirty"]


def generated(n: int = 512, seed: int = 0) -> list[str]:
    """n texts: 35% short commands, 35% medium requests, 30% long sentences of 2-3 clauses (~20-45 words)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.35:
            out.append(rng.choice(SHORT))
        elif r < 0.70:
            out.append(rng.choice(MEDIUM))
        else:
            out.append(" ".join(rng.sample(CLAUSES, rng.randint(2, 3))))
    return out


def replayed(path: Path = PAYLOADS) -> list[str]:
    texts: list[str] = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        body = rec.get("body", rec) if isinstance(rec, dict) else rec
        if isinstance(body, dict) and isinstance(body.get("texts"), list):
            texts.extend(t for t in body["texts"] if isinstance(t, str) and t.strip())
        elif isinstance(body, dict) and isinstance(body.get("text"), str):
            texts.append(body["text"])
    return texts


def texts(n: int = 512, seed: int = 0) -> tuple[list[str], str]:
    """(texts, source description)."""
    if PAYLOADS.exists():
        got = replayed()
        if got:
            return got, f"replayed {PAYLOADS.relative_to(ROOT)} ({len(got)} texts)"
    return generated(n, seed), (f"generated mix (seed {seed}, {n} texts: 35% short commands, 35% medium, "
                                f"30% 20-45 words)")


def model_dir(registry: Path | str = ROOT / "models" / "store", name: str = "minilm-intent", ref: str = "stable"
              ) -> tuple[Path, dict]:
    """Artifact directory and manifest (as a dict) of a model version, read straight from the local store layout."""
    root = Path(registry)
    aliases = json.loads((root / name / "aliases.json").read_text()) if (root / name / "aliases.json").exists() else {}
    version = aliases.get(ref, ref)
    if isinstance(version, dict):
        version = version.get("version", ref)
    d = root / name / "versions" / version
    return d, json.loads((d / "manifest.json").read_text())
