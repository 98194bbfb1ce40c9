"""corrupt_model reads the IntegrityError from /v1/models whichever way the service answers it: 200 with the slot's
error, or 503 not_ready with the error as its reason (a model that fails verification keeps the service from
loading)."""
from __future__ import annotations

from scripts.drills.corrupt_model import named_integrity_errors

MISMATCH = "IntegrityError: minilm-intent:1.0.0-ab47a8c5: sha256 mismatch for model.onnx"


def test_a_200_names_it_in_errors():
    assert named_integrity_errors(200, {"errors": {"intent": MISMATCH, "coco": "other"}}) == [MISMATCH]


def test_a_503_names_it_as_the_reason():
    body = {"error": {"code": "not_ready", "details": {"reason": MISMATCH}}}
    assert named_integrity_errors(503, body) == [MISMATCH]


def test_other_answers_name_none():
    assert named_integrity_errors(503, {"error": {"code": "not_ready", "details": {"reason": "loading"}}}) == []
    assert named_integrity_errors(200, {"errors": {}}) == []
    assert named_integrity_errors(503, None) == []
    assert named_integrity_errors(0, None) == []
