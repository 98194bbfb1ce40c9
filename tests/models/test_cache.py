"""Startup pull into the verified cache: atomic landing, alias memory for offline starts, retries with backoff and
jitter (tenacity), tamper handling (remote refused; cache refused offline, quarantined and re-pulled online), serving
registry."""
from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.models.conftest import closed_port
from tests.models.test_manifest import make_manifest
from triserve.configs.deployments import ModelRepository
from triserve.models.cache import NotReady, ServingRegistry, fetch_verified, open_serving_registry
from triserve.models.registry import IntegrityError, LocalRegistry, NotFound
from triserve.models.stores import RegistryUnavailable
from triserve.models.stores.local import LocalStore

V1, V2 = "1.0.0-abcdef12", "1.0.1-abcdef12"


@pytest.fixture()
def store(tmp_path) -> LocalStore:
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "model.onnx").write_bytes(b"graph-v1")
    store = LocalStore(tmp_path / "remote")
    store.publish(staging, make_manifest(version=V1))
    (staging / "model.onnx").write_bytes(b"graph-v2")
    store.publish(staging, make_manifest(version=V2))
    store.set_alias("toy-model", "stable", V1, by="ci")
    return store


class Flaky(LocalStore):
    """A store whose first `failures` calls to resolve fail as if the network were down; counts pulls."""

    def __init__(self, inner: LocalStore, failures: int):
        super().__init__(inner.registry.root)
        self.failures, self.pulls = failures, 0

    def resolve(self, name, ref):
        if self.failures:
            self.failures -= 1
            raise RegistryUnavailable("connection refused (simulated)")
        return super().resolve(name, ref)

    def pull(self, *args, **kwargs):
        self.pulls += 1
        return super().pull(*args, **kwargs)


def test_fetch_lands_atomically_and_records_the_alias(store, tmp_path):
    cache = tmp_path / "cache"
    directory, manifest = fetch_verified(store, "toy-model", "stable", cache)
    assert directory == cache / "toy-model" / "versions" / V1 and manifest.version == V1
    assert (directory / "model.onnx").read_bytes() == b"graph-v1"
    assert list((cache / ".tmp").iterdir()) == []
    local = LocalRegistry(cache)
    assert local.aliases("toy-model") == {"stable": V1}
    assert local.alias_log("toy-model")[-1]["by"] == f"cache: {store.uri}"
    assert local.load_verified("toy-model", "stable")[1].version == V1


def test_cached_copy_is_reused_and_alias_moves_are_followed(store, tmp_path):
    cache = tmp_path / "cache"
    flaky = Flaky(store, failures=0)
    fetch_verified(flaky, "toy-model", "stable", cache)
    fetch_verified(flaky, "toy-model", "stable", cache)
    assert flaky.pulls == 1  # the second start verified the cached copy instead of downloading
    store.set_alias("toy-model", "stable", V2, by="ci")
    _, manifest = fetch_verified(flaky, "toy-model", "stable", cache)
    assert manifest.version == V2 and flaky.pulls == 2
    assert [(e["from"], e["to"]) for e in LocalRegistry(cache).alias_log("toy-model")] == [(None, V1), (V1, V2)]
    offline = f"oci://127.0.0.1:{closed_port()}/x"
    _, manifest = fetch_verified(offline, "toy-model", "stable", cache, retries=0)
    assert manifest.version == V2  # resolved offline from the last recorded move


def _jittered(sleeps: list[float], base: list[float], jitter: float) -> bool:
    """Each wait is the exponential base plus a jitter in [0, jitter]."""
    return len(sleeps) == len(base) and all(b <= s <= b + jitter for s, b in zip(sleeps, base))


def test_connection_failures_are_retried_with_exponential_backoff(store, tmp_path):
    sleeps: list[float] = []
    flaky = Flaky(store, failures=2)
    _, manifest = fetch_verified(flaky, "toy-model", "stable", tmp_path / "cache", retries=3, backoff=0.1,
                                 sleep=sleeps.append, jitter=0)
    assert manifest.version == V1 and sleeps == [0.1, 0.2]


def test_backoff_has_jitter_so_workers_do_not_retry_in_lockstep(store, tmp_path):
    """Default jitter = backoff: wait n is backoff * 2**(n-1) + U(0, backoff); two workers' waits differ."""
    runs = []
    for worker in range(2):
        sleeps: list[float] = []
        flaky = Flaky(store, failures=3)
        _, manifest = fetch_verified(flaky, "toy-model", "stable", tmp_path / f"cache{worker}", retries=3,
                                     backoff=0.1, sleep=sleeps.append)
        assert manifest.version == V1 and flaky.failures == 0 and flaky.pulls == 1
        assert _jittered(sleeps, [0.1, 0.2, 0.4], 0.1), sleeps
        runs.append(sleeps)
    assert runs[0] != runs[1] and runs[0] != [0.1, 0.2, 0.4]


def test_retries_only_connection_failures_and_only_as_many_times_as_asked(store, tmp_path):
    sleeps: list[float] = []
    with pytest.raises(NotFound):  # a reachable store that says no: raised at once, no retry
        fetch_verified(store, "nope", "stable", tmp_path / "cache", retries=3, backoff=0.1, sleep=sleeps.append)
    assert sleeps == []
    flaky = Flaky(store, failures=99)
    with pytest.raises(NotReady):
        fetch_verified(flaky, "toy-model", "stable", tmp_path / "cache", retries=2, backoff=0.0,
                       sleep=sleeps.append)
    assert flaky.failures == 99 - 3 and sleeps == [0.0, 0.0]  # 3 attempts; backoff 0: no wait, no jitter
    flaky = Flaky(store, failures=99)
    with pytest.raises(NotReady, match="after 1 attempt"):
        fetch_verified(flaky, "toy-model", "stable", tmp_path / "cache", retries=0, sleep=sleeps.append)
    assert flaky.failures == 98 and sleeps == [0.0, 0.0]


def test_unreachable_without_cache_is_not_ready_with_the_reason(store, tmp_path):
    sleeps: list[float] = []
    with pytest.raises(NotReady) as info:
        fetch_verified(Flaky(store, failures=99), "toy-model", "stable", tmp_path / "cache", retries=3, backoff=0.5,
                       sleep=sleeps.append)
    assert _jittered(sleeps, [0.5, 1.0, 2.0], 0.5), sleeps
    message = str(info.value)
    assert "toy-model:stable not ready" in message and "unreachable after 4 attempt(s)" in message
    assert "connection refused (simulated)" in message and "holds no verified copy" in message


def test_unknown_model_in_a_reachable_store_is_not_found(store, tmp_path):
    with pytest.raises(NotFound):
        fetch_verified(store, "nope", "stable", tmp_path / "cache", retries=0)


def test_tampered_remote_never_reaches_the_cache(store, tmp_path):
    (store.registry.path("toy-model", V1) / "model.onnx").write_bytes(b"graph-vX")
    with pytest.raises(IntegrityError, match="sha256 mismatch for model.onnx"):
        fetch_verified(store, "toy-model", "stable", tmp_path / "cache")
    assert not LocalRegistry(tmp_path / "cache").has("toy-model", V1)
    assert list((tmp_path / "cache" / ".tmp").iterdir()) == []


def test_tampered_cache_is_refused_offline(store, tmp_path):
    cache = tmp_path / "cache"
    directory, _ = fetch_verified(store, "toy-model", "stable", cache)
    (directory / "model.onnx").write_bytes(b"graph-vX")
    with pytest.raises(IntegrityError, match="sha256 mismatch for model.onnx"):
        fetch_verified(Flaky(store, failures=99), "toy-model", "stable", cache, retries=0)


def test_tampered_cache_is_quarantined_reported_and_pulled_again_online(store, tmp_path, caplog):
    cache = tmp_path / "cache"
    directory, _ = fetch_verified(store, "toy-model", "stable", cache)
    (directory / "model.onnx").write_bytes(b"graph-vX")
    with caplog.at_level(logging.ERROR, logger="triserve.models.cache"):
        directory, _ = fetch_verified(store, "toy-model", "stable", cache)
    assert (directory / "model.onnx").read_bytes() == b"graph-v1"
    assert any("INTEGRITY" in r.message and "model.onnx" in r.message for r in caplog.records)
    events = [json.loads(line) for line in (cache / ".quarantine" / "events.jsonl").read_text().splitlines()]
    assert events[0]["model"] == f"toy-model:{V1}" and "model.onnx" in events[0]["reason"]
    assert (cache / ".quarantine" / events[0]["moved_to"] / "model.onnx").read_bytes() == b"graph-vX"


def _settings(tmp_path: Path, uri: str | None) -> SimpleNamespace:
    return SimpleNamespace(registry_uri=uri, registry_dir=tmp_path / "remote", model_cache_dir=tmp_path / "cache",
                           registry_retries=0, registry_backoff_s=0.0)


# two deployments over the same model at two refs: two distinct (name, ref) pulls
REPOSITORY = ModelRepository.model_validate({"deployments": [
    {"name": "a", "family": "text", "model": {"name": "toy-model", "ref": "stable"},
     "fallback": {"name": "toy-model", "ref": V2}},
    {"name": "b", "family": "text", "model": {"name": "toy-model", "ref": "stable"}}]})


def test_serving_registry_without_uri_is_the_registry_dir(store, tmp_path):
    registry = open_serving_registry(_settings(tmp_path, None), REPOSITORY)
    assert type(registry) is LocalRegistry and registry.root == tmp_path / "remote"
    local = open_serving_registry(_settings(tmp_path, store.uri), REPOSITORY)
    assert local.root == store.registry.root  # local: no copy


def test_serving_registry_pulls_configured_slots_into_the_cache(store, tmp_path, http_root):
    import shutil

    root, url = http_root
    shutil.copytree(tmp_path / "remote", root / tmp_path.name)
    registry = open_serving_registry(_settings(tmp_path, f"{url}/{tmp_path.name}"), REPOSITORY)
    assert isinstance(registry, ServingRegistry) and registry.root == tmp_path / "cache"
    assert sorted(registry.versions("toy-model")) == [V1, V2]
    assert registry.load_verified("toy-model", "stable")[1].version == V1


def test_serving_registry_unreachable_keeps_the_reason_per_slot(tmp_path):
    registry = open_serving_registry(_settings(tmp_path, f"oci://127.0.0.1:{closed_port()}/x"), REPOSITORY)
    with pytest.raises(NotReady, match="toy-model:stable not ready"):
        registry.load_verified("toy-model", "stable")


def test_serving_registry_waits_out_the_backoff_once(tmp_path):
    """With the store down, the first slot spends the retries; the other slots go straight to the cache."""
    sleeps: list[float] = []
    registry = ServingRegistry(tmp_path / "cache", f"oci://127.0.0.1:{closed_port()}/x", retries=2, backoff=0.25,
                               sleep=sleeps.append)
    registry.start((m.name, m.ref) for m in REPOSITORY.slots.values())
    # two distinct (name, ref) slots, one backoff (with jitter)
    assert _jittered(sleeps, [0.25, 0.5], 0.25) and len(registry.errors) == 2, sleeps


class Counting(LocalStore):
    """A store that counts what it is asked and can hold every call until `release` is set (a registry that does
    not answer), setting `asked` when a call arrives; `down` makes every call fail as unreachable."""

    def __init__(self, inner: LocalStore):
        super().__init__(inner.registry.root)
        self.calls: list[str] = []
        self.asked, self.release = threading.Event(), threading.Event()
        self.release.set()
        self.down = 0  # calls still to fail as unreachable

    def _ask(self, what: str) -> None:
        self.calls.append(what)
        self.asked.set()
        assert self.release.wait(30), "the test never released the store"
        if self.down:
            self.down -= 1
            raise RegistryUnavailable("connection refused (simulated)")

    def resolve(self, name, ref):
        self._ask(f"resolve {name}:{ref}")
        return super().resolve(name, ref)

    def pull(self, name, version, *args, **kwargs):
        self._ask(f"pull {name}:{version}")
        return super().pull(name, version, *args, **kwargs)


def test_a_version_in_the_cache_is_never_asked_of_the_store(store, tmp_path):
    """What another process pulled is loaded from the verified cache: a slow or unreachable registry cannot hold
    back the gateway's catalog (issue 42: every OIP request of a worker waited on it after a hot add)."""
    cache = tmp_path / "cache"
    fetch_verified(store, "toy-model", V1, cache)
    counting = Counting(store)
    counting.release.clear()  # a registry that would never answer
    registry = ServingRegistry(cache, counting, retries=0, backoff=0.0)
    assert registry.load_verified("toy-model", V1)[1].version == V1
    assert counting.calls == []
    (cache / "toy-model" / "versions" / V1 / "model.onnx").write_bytes(b"graph-vX")  # tampered: asked again
    counting.release.set()
    assert ServingRegistry(cache, counting, retries=0, backoff=0.0).load_verified("toy-model", V1)[1].version == V1
    assert counting.calls == [f"resolve toy-model:{V1}", f"pull toy-model:{V1}"]


def test_a_restart_starts_from_the_verified_cache_while_the_registry_does_not_answer(store, tmp_path):
    cache = tmp_path / "cache"
    fetch_verified(store, "toy-model", "stable", cache)  # an earlier life of the worker
    counting = Counting(store)
    counting.release.clear()
    registry = ServingRegistry(cache, counting, retries=0, backoff=0.0, startup_wait_s=0.0)
    registry.start([("toy-model", "stable")])
    assert counting.asked.wait(30)  # the refresh is waiting on the registry...
    assert registry.load_verified("toy-model", "stable")[1].version == V1  # ...and the cached copy serves
    assert not registry.wait_refreshed(0) and registry.errors == {}
    store.set_alias("toy-model", "stable", V2, by="ci")  # moved while this worker was down
    counting.release.set()
    assert registry.wait_refreshed(30)
    assert LocalRegistry(cache).aliases("toy-model") == {"stable": V2}  # refreshed in the background
    assert registry.errors == {} and counting.calls == ["resolve toy-model:stable", f"pull toy-model:{V2}"]


def test_a_failed_refresh_keeps_serving_the_cached_copy(store, tmp_path):
    cache = tmp_path / "cache"
    fetch_verified(store, "toy-model", "stable", cache)
    counting = Counting(store)
    counting.release.clear()
    counting.down = 99
    registry = ServingRegistry(cache, counting, retries=0, backoff=0.0, startup_wait_s=0.0)
    registry.start([("toy-model", "stable")])
    assert registry.load_verified("toy-model", "stable")[1].version == V1
    counting.release.set()
    assert registry.wait_refreshed(30)
    assert registry.errors == {} and registry.load_verified("toy-model", "stable")[1].version == V1


def test_a_model_with_no_cached_copy_waits_for_the_registry_at_startup(store, tmp_path):
    counting = Counting(store)
    registry = ServingRegistry(tmp_path / "cache", counting, retries=0, backoff=0.0, startup_wait_s=0.0)
    registry.start([("toy-model", "stable")])
    assert registry.errors == {} and registry.load_verified("toy-model", "stable")[1].version == V1


def test_a_model_refused_during_an_outage_is_fetched_once_the_registry_is_back(store, tmp_path):
    """Bounded retries with backoff per attempt, and a failure is not for ever: no restart needed (issue 42)."""
    sleeps: list[float] = []
    counting = Counting(store)
    counting.down = 3
    registry = ServingRegistry(tmp_path / "cache", counting, retries=2, backoff=0.1, sleep=sleeps.append,
                               retry_after_s=3600)
    registry.start([("toy-model", "stable")])  # 3 attempts, all refused: not ready, with the reason
    with pytest.raises(NotReady, match="unreachable after 3 attempt"):
        registry.load_verified("toy-model", "stable")
    assert len(counting.calls) == 3  # within retry_after_s the recorded reason is raised without asking again
    counting.down = 2  # back after two more refusals: the retries with backoff bridge them
    registry.ensure("toy-model", "stable")  # a hot add asks at once
    assert registry.load_verified("toy-model", "stable")[1].version == V1 and registry.errors == {}
    assert _jittered(sleeps, [0.1, 0.2, 0.1, 0.2], 0.1), sleeps


def test_a_recorded_failure_is_retried_by_load_after_retry_after_s(store, tmp_path):
    counting = Counting(store)
    counting.down = 1
    registry = ServingRegistry(tmp_path / "cache", counting, retries=0, backoff=0.0, retry_after_s=0.0)
    registry.start([("toy-model", "stable")])
    assert len(registry.errors) == 1
    assert registry.load_verified("toy-model", "stable")[1].version == V1 and registry.errors == {}
