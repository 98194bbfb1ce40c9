"""Over-long texts are truncated and say so (issue 19 item 7), up to the hard limit: the character cut before
tokenising, the token cut at the model's max length, what the results report over REST, typed gRPC and OIP, and the
limits that still refuse (422 text_too_long above hard_max_chars, 422 empty_text, 413 for the body)."""
from __future__ import annotations

import grpc
import httpx
import numpy as np
import pytest

from scripts.common import ort_session
from triserve.families.text.limits import Limits
from triserve.families.text.preprocess import CHARS_PER_TOKEN, TextTokenizer, char_budget, prepare_text
from triserve.families.text.schemas import TextResult
from triserve.services.protocols.generated import triserve_pb2 as tpb
from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc
from triserve_client import TriserveAPIError, TriserveClient

PROSE = ("please book me a flight to paris next monday morning and cancel the hotel reservation I made for "
         "the weekend, then tell me what my account balance is ")
LONG = (PROSE * (100_000 // len(PROSE) + 1))[:100_000]


@pytest.fixture(scope="module")
def ts(server):
    with TriserveClient(server.url, timeout=60) as client:
        yield client


def tokenizer(registry, name) -> tuple[TextTokenizer, object, object]:
    directory, m = registry.load_verified(name, "stable")
    return TextTokenizer(directory / m.preprocess.tokenizer_file, m.preprocess.max_length), directory, m


# --- the cuts, in process ----------------------------------------------------------------------------------------
def test_prepare_text_cuts_before_cleaning_and_ignores_surrounding_whitespace():
    assert prepare_text("  hello \u200bworld  ", 100) == ("hello world", False)
    assert prepare_text("abcdef", 4) == ("abcd", True)
    assert prepare_text("hi" + " " * 10_000, 100) == ("hi", False)  # trailing whitespace is not content cut
    assert prepare_text("\x00" * 50 + "late", 10) == ("", True)  # nothing but control characters in the kept part
    assert char_budget(2000, 64) == 2000 and char_budget(2000, 512) == 512 * CHARS_PER_TOKEN


def test_character_cut_does_not_change_what_the_model_reads(tiny_registry):
    tok, _, m = tokenizer(tiny_registry, "minilm-intent")
    full_ids, full_cut = tok.encode_with_truncation([LONG])  # the whole text tokenised (Hugging Face's truncation)
    ids, truncated = tok.encode_received([LONG, "hi", "  what is my balance  "], max_chars=2000)
    assert np.array_equal(ids[0], full_ids[0]) and full_cut == [True] and len(ids[0]) == m.preprocess.max_length
    assert truncated == [True, False, False]
    # a text cut by characters only (short in tokens: one long run of letters) still says it was cut
    _, cut = tok.encode_received(["x" * 5000], max_chars=2000)
    assert cut == [True]


def test_limits_defaults_and_serving_yaml():
    from triserve.configs.settings import Settings

    assert (Limits().max_chars, Limits().hard_max_chars) == (2000, 1_000_000)
    lim = Settings().family_limits("text")
    assert lim.max_chars == 2000 and lim.hard_max_chars == 1_000_000
    assert Settings().family_limits("text", {"hard_max_chars": 5000}).hard_max_chars == 5000
    with pytest.raises(ValueError):
        Limits(hard_max_chars=0)


def test_text_result_is_mirrored_by_the_typed_grpc_message():
    assert set(TextResult.model_fields) == set(tpb.TextResult.DESCRIPTOR.fields_by_name)


# --- through a real server ---------------------------------------------------------------------------------------
def test_100k_character_text_is_classified_truncated(ts, tiny_registry):
    r = ts.classify([LONG, "what is my balance"], top_k=3)
    long, short = r.results
    tok, directory, m = tokenizer(tiny_registry, r.model.name)
    assert (long.truncated, long.chars, long.tokens) == (True, 100_000, m.preprocess.max_length)
    assert (short.truncated, short.chars) == (False, len("what is my balance"))
    # the answer is the model's on the tokens of the whole text, as in process
    ids, mask = tok.encode_padded([LONG])
    probs = ort_session(directory / m.model_file).run(None, {"input_ids": ids, "attention_mask": mask})[0][0]
    top = np.argsort(-probs)[:3]
    assert [x.label for x in long.top_k] == [m.labels[i] for i in top]
    assert np.allclose([x.score for x in long.top_k], probs[top], atol=1e-5)
    # and the same as for any prefix long enough to fill the model's max length
    prefix = ts.classify(LONG[:3000], top_k=3).results[0]
    assert prefix.truncated and [(x.label, x.score) for x in prefix.top_k] == [(x.label, x.score) for x in long.top_k]


def test_fallback_truncates_at_its_own_max_length(ts, tiny_registry):
    r = ts.classify(LONG, model="fallback")
    _, _, m = tokenizer(tiny_registry, r.model.name)
    assert r.degraded and r.results[0].truncated and r.results[0].tokens == m.preprocess.max_length


def test_odd_long_texts(ts):
    one_char = ts.classify("x" * 100_000).results[0]  # refused as text_too_long before
    assert one_char.truncated and one_char.chars == 100_000
    padded = ts.classify("  hello there  " + " " * 50_000).results[0]
    assert not padded.truncated and padded.chars == 50_015


def test_hard_limit_still_refuses(ts):
    with pytest.raises(TriserveAPIError) as err:
        ts.classify(["fine", "x" * 1_000_001], request_id="too-long-1")
    e = err.value
    assert (e.status, e.code, e.request_id) == (422, "text_too_long", "too-long-1")
    assert e.details == {"index": 1, "limit": 1_000_000, "length": 1_000_001, "truncated_above": 2000}
    assert "hard limit" in e.message


def test_blank_kept_part_is_empty_text(ts):
    with pytest.raises(TriserveAPIError) as err:
        ts.classify("\u200b" * 2500 + "hello")
    assert err.value.code == "empty_text" and "first 2000 characters" in err.value.message


def test_body_cap_answers_413(server):
    body = b'{"texts": ["' + b"x" * (65 * 2**20) + b'"]}'
    resp = httpx.post(f"{server.url}/v1/classify", content=body, headers={"content-type": "application/json"},
                      timeout=60)
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "payload_too_large"


def test_typed_grpc_and_oip_report_truncation(server):
    with grpc.insecure_channel(server.grpc_target) as channel:
        reply = tpb_grpc.TriserveStub(channel).Classify(tpb.ClassifyRequest(texts=[LONG, "hi"], top_k=1), timeout=60)
    assert (reply.results[0].truncated, reply.results[0].chars) == (True, 100_000) and reply.results[0].tokens > 0
    assert (reply.results[1].truncated, reply.results[1].chars) == (False, 2)
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [LONG]}]}
    oip = httpx.post(f"{server.url}/v2/models/classify/infer", json=body, timeout=60)
    assert oip.status_code == 200, oip.text
