"""tokenizer.json as the text family serves it: read what a file says (lowercasing, pad id, truncation length) and
write it with the serving settings (no fixed padding, truncation at max_length). The tokenizers library is the
serving tokenizer (families/text/preprocess.py)."""
from __future__ import annotations

import json
from pathlib import Path

from triserve.models.importing.result import ImportRefused

TOKENIZER_FILE = "tokenizer.json"
PAD_TOKENS = ("[PAD]", "<pad>", "<|pad|>", "[pad]", "<PAD>")


def write_tokenizer(src: Path, dst: Path, max_length: int) -> Path:
    """Copy tokenizer.json with the serving settings baked in: truncation at max_length, no fixed padding (a source
    file may pad every text to a fixed length; serving pads per batch to the longest item)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(src))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    tok.save(str(dst), pretty=False)
    return dst


def tokenizer_lowercases(tokenizer_json: Path) -> bool:
    """Whether the tokenizer.json normaliser lowercases (BertNormalizer(lowercase) or a Lowercase step)."""
    def walk(node) -> bool:
        if not isinstance(node, dict):
            return False
        kind = node.get("type")
        if kind == "Lowercase" or (kind == "BertNormalizer" and node.get("lowercase")):
            return True
        return any(walk(n) for n in node.get("normalizers", []) or [])

    return walk(json.loads(Path(tokenizer_json).read_text()).get("normalizer"))


def tokenizer_pad_id(tokenizer_json: Path, explicit: int | None = None) -> int:
    """The pad id the runner pads with: --pad-token-id, else the file's padding config, else a known pad token."""
    if explicit is not None:
        return int(explicit)
    data = json.loads(Path(tokenizer_json).read_text())
    pad = (data.get("padding") or {}).get("pad_id")
    if pad is not None:
        return int(pad)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    for t in PAD_TOKENS:
        tid = tok.token_to_id(t)
        if tid is not None:
            return int(tid)
    raise ImportRefused(f"{Path(tokenizer_json).name}: no pad token found (no padding config, none of {PAD_TOKENS}); "
                        f"pass --pad-token-id N (the runner pads batches with it; the mask hides it)")


def tokenizer_max_length(tokenizer_json: Path) -> int | None:
    """The truncation length written in tokenizer.json, if any."""
    trunc = json.loads(Path(tokenizer_json).read_text()).get("truncation") or {}
    return int(trunc["max_length"]) if trunc.get("max_length") else None


def stage_tokenizer(src: Path, dst: Path, max_length: int) -> Path:
    """tokenizer.json with the serving settings (write_tokenizer); an unreadable file is a refusal."""
    try:
        return write_tokenizer(Path(src), Path(dst), max_length)
    except Exception as exc:  # an unreadable tokenizer is a refusal
        raise ImportRefused(f"{Path(src).name}: not a readable tokenizers file ({type(exc).__name__}: {exc})") from exc
