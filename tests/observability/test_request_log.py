import json

from triserve.configs.settings import Observability
from triserve.observability.request_log import RequestLog


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


class _CountingStream:
    def __init__(self):
        self.writes: list[str] = []
        self.flushes = 0

    def write(self, text: str) -> None:
        self.writes.append(text)

    def flush(self) -> None:
        self.flushes += 1


def test_background_writer_keeps_every_line_in_order_with_few_writes():
    import logging

    from triserve.observability.request_log import BackgroundLineWriter, json_logger

    stream = _CountingStream()
    writer = BackgroundLineWriter(stream, "unit.writer", interval_s=3600)  # only explicit flushes write
    logger = json_logger("unit.writer", lambda: writer)
    for i in range(500):
        logger.info('{"n": %d}', i)
    assert stream.writes == []  # nothing written on the caller's thread
    writer.flush()
    lines = "".join(stream.writes).splitlines()
    assert lines == [f'{{"n": {i}}}' for i in range(500)] and len(stream.writes) == 1
    logging.getLogger("unit.writer").handlers.clear()


def test_a_logger_asked_for_again_makes_no_new_writer_thread():
    """Once per request (the audit of a refused admin call) must not mean a thread per request: 1,100 threads after
    10,000 junk requests slowed refusals from ~300/s to ~15/s before this."""
    import threading

    from triserve.observability.request_log import stdout_json_logger

    first = stdout_json_logger("unit.once")
    before = threading.active_count()
    for _ in range(50):
        assert stdout_json_logger("unit.once") is first
    assert threading.active_count() == before and len(first.handlers) == 1


def test_background_writer_drops_and_counts_beyond_its_bound():
    from triserve.observability.request_log import LOG_LINES_DROPPED, BackgroundLineWriter, json_logger

    stream = _CountingStream()
    writer = BackgroundLineWriter(stream, "unit.bounded", interval_s=3600, max_pending=10)
    logger = json_logger("unit.bounded", lambda: writer)
    for i in range(15):
        logger.info("line %d", i)
    writer.flush()
    assert "".join(stream.writes).splitlines() == [f"line {i}" for i in range(10)]
    assert LOG_LINES_DROPPED.labels("unit.bounded")._value.get() == 5


def test_fresh_request_ids_are_unique_hex_and_client_ids_are_kept():
    from triserve.kernel.request_context import new_request_id

    ids = {new_request_id(None) for _ in range(10_000)}
    assert len(ids) == 10_000 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert new_request_id("client-id.1") == "client-id.1"
    replaced = new_request_id("bad id\n")  # log injection: replaced by a fresh id
    assert len(replaced) == 32 and int(replaced, 16) >= 0
