"""The runner's single-body pickle answer: what BentoML's pickle client reads back, and who gets it."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from _bentoml_impl.serde import Payload, PickleSerde
from starlette.responses import Response

from triserve.runners.wire import PICKLE, pickled_response, sent_pickle


class _Ctx:
    """BentoML's Context as the API sees it: `request` raises LookupError outside a request."""

    def __init__(self, content_type: str | None):
        self._content_type = content_type

    @property
    def request(self):
        if self._content_type is None:
            raise LookupError("request")
        return SimpleNamespace(headers={"content-type": self._content_type})


def _results() -> list[dict]:
    rows = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)
    return [{"y": rows[i], "batch": 3, "infer_ms": 1.5, "model": "m", "version": "1"} for i in range(3)] + [
        {"error": "deadline_exceeded"}]


def test_the_body_reads_back_through_bentomls_pickle_client_unchanged():
    results = _results()
    resp = pickled_response(results)
    assert resp.media_type == PICKLE and resp.headers["content-type"].startswith(PICKLE)
    assert resp.headers["buffer-lengths"] == str(len(resp.body))  # one in-band body, no out-of-band buffers
    back = PickleSerde().deserialize_value(Payload((resp.body,), resp.headers))
    assert len(back) == len(results) and back[-1] == {"error": "deadline_exceeded"}
    for got, want in zip(back[:3], results[:3]):
        assert np.array_equal(got["y"], want["y"]) and got["y"].dtype == np.float32
        assert {k: v for k, v in got.items() if k != "y"} == {k: v for k, v in want.items() if k != "y"}


@pytest.mark.parametrize("content_type, expected", [
    (PICKLE, True), (f"{PICKLE}; charset=utf-8", True), ("application/json", False), ("", False), (None, False)])
def test_only_pickle_callers_are_recognised(content_type, expected):
    assert sent_pickle(_Ctx(content_type)) is expected


def test_runner_answers_pickle_callers_in_one_body_and_others_with_the_list(monkeypatch):
    from triserve.runners import service

    results = _results()
    assert isinstance(service._answer(results, _Ctx(PICKLE)), Response)
    assert service._answer(results, _Ctx("application/json")) is results
    assert service._answer(results, _Ctx(None)) is results
    # runner-side batching: BentoML's dispatcher splits the returned list between the calls it merged
    monkeypatch.setattr(service.settings.runner, "batching", "runner")
    assert service._answer(results, _Ctx(PICKLE)) is results
