"""Startup pull into a verified local cache, so serving never loads an artifact it has not hash-checked.

    fetch_verified("oci://127.0.0.1:5000/triserve", "minilm-intent", "stable", Path(".cache/models"))

1. resolve the ref (alias or version) in the store, retrying connection failures with exponential backoff and
   jitter (tenacity: many workers starting together do not hit the registry in lockstep);
2. a verified copy already in the cache is used as is (every file re-hashed); otherwise the version is pulled into a
   temp dir inside the cache, every file's size and sha256 checked against the manifest, and the directory renamed
   into `<cache>/<name>/versions/<version>` (atomic: readers see a whole version or none);
3. the resolved alias -> version is recorded in the cache (aliases.json + alias_log.jsonl, the local registry layout),
   so the same alias still resolves when the store is unreachable later;
4. store unreachable after the retries: the verified cache copy is used (re-hashed) if there is one, else NotReady
   says why. A tampered artifact is refused with an IntegrityError naming the file: from the store always; from the
   cache, when offline (when the store is reachable, the bad cache copy is quarantined, reported and pulled again).

ServingRegistry, what the serving processes load from, does not even wait that long: a version the cache holds is
never asked of the store, and at startup a slow store gets registry_startup_wait_s before the cached copy serves and
the fetch goes on in the background; a failed model is fetched again when asked for (a hot add after an outage).

The cache is a LocalRegistry, so the runner and the gateway keep calling `load_verified` on it as on any registry.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager
from pathlib import Path

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from triserve.models.manifest import Manifest, utcnow
from triserve.models.registry import IntegrityError, LocalRegistry, NotFound, RegistryError, verify_artifact
from triserve.models.stamps import Stamps
from triserve.models.stores import RegistryStore, RegistryUnavailable, open_store
from triserve.models.stores.local import LocalStore

log = logging.getLogger("triserve.models.cache")
CACHE_BY = "cache"  # alias-log 'by' prefix of moves recorded by the cache


class NotReady(RegistryError):
    """The model cannot be served: the store is unreachable and the cache holds no verified copy."""


@contextmanager
def _locked(cache_dir: Path, name: str):
    """One puller per model and cache directory across processes (runner and gateway start together)."""
    lock_dir = cache_dir / ".locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _record_alias(cache: LocalRegistry, name: str, ref: str, version: str, store: RegistryStore) -> None:
    if ref != version and cache.aliases(name).get(ref) != version:
        cache.set_alias(name, ref, version, by=f"{CACHE_BY}: {store.uri}")


def _quarantine(cache: LocalRegistry, name: str, version: str, reason: IntegrityError) -> Path:
    """Move a cache copy that failed verification aside (kept for inspection) and report it."""
    qdir = cache.root / ".quarantine"
    qdir.mkdir(parents=True, exist_ok=True)
    target = qdir / f"{name}-{version}-{utcnow().strftime('%Y%m%dT%H%M%S%f')}"
    os.rename(cache.root / name / "versions" / version, target)
    with open(qdir / "events.jsonl", "a") as fh:
        fh.write(json.dumps({"when": utcnow().isoformat(), "model": f"{name}:{version}", "moved_to": target.name,
                             "reason": str(reason)}) + "\n")
    log.error("INTEGRITY: cached %s:%s failed verification (%s); quarantined to %s and pulling it again",
              name, version, reason, target)
    return target


def _fetch_online(store: RegistryStore, cache: LocalRegistry, name: str, ref: str,
                  progress: bool) -> tuple[Path, Manifest]:
    version = store.resolve(name, ref)
    with _locked(cache.root, name):
        if cache.has(name, version):
            try:
                directory, manifest = cache.load_verified(name, version)
            except IntegrityError as exc:
                _quarantine(cache, name, version, exc)
            else:
                _record_alias(cache, name, ref, version, store)
                log.info("%s:%s -> %s: verified copy already in cache %s", name, ref, version, cache.root)
                return directory, manifest
        tmp_root = cache.root / ".tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{name}-{version}-", dir=tmp_root))
        try:
            started = time.monotonic()
            try:
                manifest = store.pull(name, version, tmp, progress=progress)
                verify_artifact(tmp, manifest)  # what landed on disk, independently of the streaming check
            except IntegrityError as exc:
                log.error("INTEGRITY: %s:%s from %s refused: %s", name, version, store.uri, exc)
                raise
            final = cache.root / name / "versions" / version
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(tmp, final)  # atomic on one filesystem; the lock keeps other pullers out
            log.info("%s:%s -> %s: pulled from %s and verified (%d files, %.1f MB) in %.2fs", name, ref, version,
                     store.uri, len(manifest.files), sum(f.size for f in manifest.files) / 1e6,
                     time.monotonic() - started)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        _record_alias(cache, name, ref, version, store)
        return final, manifest


def retrying(retries: int, backoff: float, jitter: float | None = None,
             sleep: Callable[[float], None] | None = None,
             before_sleep: Callable[[RetryCallState], None] | None = None) -> Retrying:
    """tenacity policy of the startup pull: RegistryUnavailable retried `retries` times (retries + 1 attempts), the
    n-th wait backoff * 2**(n-1) plus a uniform random jitter in [0, jitter] (default jitter = backoff), so workers
    that start together spread out; any other error is raised at once; the last RegistryUnavailable is re-raised."""
    return Retrying(stop=stop_after_attempt(max(0, retries) + 1),
                    wait=wait_exponential_jitter(multiplier=backoff, exp_base=2,
                                                 jitter=backoff if jitter is None else jitter),
                    retry=retry_if_exception_type(RegistryUnavailable),
                    sleep=sleep or time.sleep, before_sleep=before_sleep, reraise=True)


def fetch_verified(store_uri: str | Path | RegistryStore, name: str, ref: str, cache_dir: Path | str,
                   retries: int = 4, backoff: float = 0.5, progress: bool = False,
                   sleep: Callable[[float], None] | None = None,
                   on_unreachable: Callable[[Exception], None] | None = None,
                   jitter: float | None = None, stamps: Stamps | None = None) -> tuple[Path, Manifest]:
    """Resolve name:ref in the store and return (directory, manifest) of a verified copy in the cache.

    `retries` extra attempts after a connection failure, waiting backoff * 2**attempt seconds plus a random jitter
    of up to `jitter` seconds (default: backoff) between them (`retrying()`);
    `on_unreachable(error)` is called once they are spent, before the cache is consulted.
    Raises IntegrityError (tampered artifact, names the file), NotFound (no such model/ref in a reachable store) or
    NotReady (store unreachable and no verified cached copy). `stamps`: a cached copy hashed before and unchanged since
    is not hashed again (models/stamps.py)."""
    cache = LocalRegistry(cache_dir, stamps)
    cache.root.mkdir(parents=True, exist_ok=True)
    store = open_store(store_uri)
    last: RegistryUnavailable | None = None

    def _log_retry(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None  # set before every sleep
        log.warning("%s:%s: %s; retry %d/%d in %.2fs", name, ref, error, state.attempt_number, retries,
                    state.next_action.sleep if state.next_action else 0.0)

    try:
        return retrying(retries, backoff, jitter, sleep or time.sleep, _log_retry)(
            _fetch_online, store, cache, name, ref, progress)
    except RegistryUnavailable as exc:
        last = exc
    finally:
        if store is not store_uri:
            store.close()  # opened here from a URI
    if on_unreachable is not None:
        on_unreachable(last)
    try:
        version = cache.resolve(name, ref)
    except NotFound:
        raise NotReady(f"{name}:{ref} not ready: registry unreachable after {retries + 1} attempt(s) ({last}) "
                       f"and cache {cache.root} holds no verified copy") from last
    directory, manifest = cache.load_verified(name, version)  # IntegrityError names the file
    log.warning("%s:%s: registry unreachable (%s); serving the verified cached %s", name, ref, last, version)
    return directory, manifest


class ServingRegistry(LocalRegistry):
    """The cache as a LocalRegistry for the runner and the gateway. Why each rule:

    - a version the cache holds verified is served from it without asking the store (versions are immutable), so
      loading what another process already pulled never waits on a slow or unreachable registry;
    - at startup (`start`) the store gets `startup_wait_s` to answer; a slot whose cached copy verifies is then served
      from the cache and refreshed in the background, so a restarted worker does not wait on a slow registry for the
      models it holds;
    - a slot that could not be fetched keeps its reason and raises it from load_verified (the process stays up and
      not-ready with that reason instead of crash-looping), but not for ever: it is fetched again, with the retries
      and backoff, when asked for after `retry_after_s`, and at once through `ensure` (a hot add after an outage)."""

    def __init__(self, cache_dir: Path, store_uri: str, retries: int, backoff: float, startup_wait_s: float = 2.0,
                 retry_after_s: float | None = None, sleep: Callable[[float], None] | None = None,
                 stamps: Stamps | None = None):
        super().__init__(cache_dir, stamps)
        self.store_uri, self.retries, self.backoff, self.startup_wait_s = store_uri, retries, backoff, startup_wait_s
        # a failed slot is not asked for again sooner than one full backoff sequence (load_verified on every request
        # of an on-demand deployment must not hammer a registry that is down)
        self.retry_after_s = backoff * 2 ** retries if retry_after_s is None else retry_after_s
        self.errors: dict[tuple[str, str], Exception] = {}
        self._failed_at: dict[tuple[str, str], float] = {}
        self._fetched: set[tuple[str, str]] = set()
        self._from_cache: set[tuple[str, str]] = set()  # started from the cache, refreshing in the background
        self._refreshing: list[Future] = []
        self._startup_retries = retries
        self._sleep = sleep or time.sleep
        self._lock = threading.Lock()

    # -- fetching ---------------------------------------------------------------------------------------------------
    def _cached_version(self, name: str, ref: str) -> bool:
        """ref names a version the cache holds and it verifies: nothing to ask the store."""
        if not self.has(name, ref):
            return False
        try:
            verify_artifact(self.path(name, ref), self.manifest(name, ref), self.stamps)
        except IntegrityError as exc:  # the online fetch quarantines it and pulls it again
            log.error("INTEGRITY: cached %s:%s: %s", name, ref, exc)
            return False
        return True

    def fetch(self, name: str, ref: str, retries: int | None = None) -> Exception | None:
        """Make name:ref loadable from the cache; the failure is recorded (load_verified raises it) and returned."""
        key = (name, ref)
        try:
            if not self._cached_version(name, ref):
                fetch_verified(self.store_uri, name, ref, self.root, self.retries if retries is None else retries,
                               self.backoff, on_unreachable=self._unreachable, sleep=self._sleep,
                               stamps=self.stamps)
        except Exception as exc:  # noqa: BLE001 - any failure (registry, disk) must surface as not-ready + reason
            with self._lock:
                if key in self._from_cache:  # served from the verified cache already: a failed refresh only warns
                    log.warning("refresh of %s:%s failed (%s: %s); serving the verified cached copy", name, ref,
                                type(exc).__name__, exc)
                    return None
                self.errors[key], self._failed_at[key] = exc, time.monotonic()
            log.error("model %s:%s not ready: %s: %s", name, ref, type(exc).__name__, exc)
            return exc
        with self._lock:
            self._fetched.add(key)
            self.errors.pop(key, None)
            self._failed_at.pop(key, None)
            self._from_cache.discard(key)
        return None

    def ensure(self, name: str, ref: str) -> None:
        """Fetch name:ref now, whatever failed before (an admin's hot add: the registry may be back); raises."""
        if (name, ref) in self._fetched:
            return
        error = self.fetch(name, ref)
        if error is not None:
            raise error

    def _unreachable(self, error: Exception) -> None:
        if self._startup_retries:
            log.warning("registry unreachable (%s): the remaining startup models go straight to the cache", error)
        self._startup_retries = 0  # one slot has waited out the backoff at startup; the others need not wait again

    def _startup_fetch(self, name: str, ref: str) -> None:
        self.fetch(name, ref, retries=self._startup_retries)

    def start(self, refs: Iterable[tuple[str, str]]) -> None:
        """Fetch the configured models, one at a time in a background thread; after `startup_wait_s` a model the
        store has not answered for is served from its verified cached copy (its fetch goes on: the refresh), and
        only the models with no cached copy are waited for."""
        executor = ThreadPoolExecutor(1, thread_name_prefix="triserve-registry")
        futures = {key: executor.submit(self._startup_fetch, *key) for key in dict.fromkeys(refs)}
        executor.shutdown(wait=False)  # the thread ends once the queued fetches are done
        wait_futures(futures.values(), timeout=self.startup_wait_s)
        for (name, ref), future in futures.items():
            if future.done():
                continue
            try:
                version = LocalRegistry.resolve(self, name, ref)
                verify_artifact(self.path(name, version), self.manifest(name, version))
            except RegistryError:  # nothing usable cached: wait for the store
                future.result()
                continue
            with self._lock:
                if future.done():  # it ended meanwhile: what it found stands
                    continue
                self._from_cache.add((name, ref))
                self._fetched.add((name, ref))
                self._refreshing.append(future)
            log.warning("%s:%s: the registry has not answered within %.1fs; serving the verified cached %s and "
                        "refreshing it in the background", name, ref, self.startup_wait_s, version)

    def wait_refreshed(self, timeout: float | None = None) -> bool:
        """The background refreshes started by `start` are done (within timeout)."""
        return not wait_futures(self._refreshing, timeout=timeout).not_done

    def load_verified(self, name: str, ref: str) -> tuple[Path, Manifest]:
        key = (name, ref)
        if key not in self._fetched:
            with self._lock:
                error, failed_at = self.errors.get(key), self._failed_at.get(key, 0.0)
            if error is None or time.monotonic() - failed_at >= self.retry_after_s:
                error = self.fetch(name, ref)
            if error is not None:
                raise error
        return super().load_verified(name, ref)


def serving_stamps(settings) -> Stamps | None:
    """The stamps the runner and the gateway share (None when settings.verified_stamps is off)."""
    if not getattr(settings, "verified_stamps", False):
        return None
    return Stamps(Path(settings.model_cache_dir) / ".verified")


def open_serving_registry(settings, repository) -> LocalRegistry:
    """The registry the runner and the gateway load from: registry_dir as today when registry_uri is unset (or names
    a local directory), else the verified cache filled from registry_uri with every model of the repository's
    deployments (configs/deployments.ModelRepository; ServingRegistry.start); models of deployments added later are
    pulled on demand. Either way with verified stamps (settings.verified_stamps): an unchanged file is hashed once,
    not at every start."""
    uri = getattr(settings, "registry_uri", None)
    stamps = serving_stamps(settings)
    if not uri:
        return LocalRegistry(settings.registry_dir, stamps)
    try:
        store = open_store(uri)
    except RegistryError:
        store = None  # the reason is recorded per slot below
    if isinstance(store, LocalStore):
        store.registry.stamps = stamps
        return store.registry  # a local directory is already a verified-on-load registry: no copy
    registry = ServingRegistry(Path(settings.model_cache_dir), uri, settings.registry_retries,
                               settings.registry_backoff_s, getattr(settings, "registry_startup_wait_s", 2.0),
                               stamps=stamps)
    started = time.monotonic()
    registry.start((m.name, m.ref) for m in repository.slots.values())
    log.info("model cache %s ready for %d slots in %.2fs (%d from the cache, refreshing; %d not ready)",
             registry.root, len(registry._fetched), time.monotonic() - started, len(registry._from_cache),
             len(registry.errors))
    return registry
