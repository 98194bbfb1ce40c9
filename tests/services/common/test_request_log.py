import json

from configs.settings import Observability
from services.common.request_log import RequestLog


def test_payloads_are_sampled_capped_and_rotated(tmp_path):
    cfg = Observability(payload_sample_rate=1.0, payload_dir=tmp_path, payload_max_bytes=300,
                        payload_file_bytes=4096, payload_files=2)
    log = RequestLog(cfg)
    body = json.dumps({"texts": ["hello world"]}).encode()
    for i in range(200):
        log.payload("text", "/v1/classify", f"rid-{i}", body)
    log.payload("text", "/v1/classify", "too-big", b'{"texts": ["' + b"x" * 1000 + b'"]}')
    log.payload("text", "/v1/classify", "not-json", b"{oops")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["payloads.jsonl", "payloads.jsonl.1", "payloads.jsonl.2"]  # rotated, bounded
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 3 * 4096 + 200
    last = [json.loads(line) for line in (tmp_path / "payloads.jsonl").read_text().splitlines()]
    assert last[-1]["request_id"] == "rid-199" and last[-1]["body"] == {"texts": ["hello world"]}
    assert not any(r["request_id"] in ("too-big", "not-json") for r in last)


def test_sampling_rate_zero_writes_nothing(tmp_path):
    log = RequestLog(Observability(payload_sample_rate=0.0, payload_dir=tmp_path))
    assert log.payloads is None
    log.payload("text", "/v1/classify", "rid", b"{}")
    assert list(tmp_path.iterdir()) == []
