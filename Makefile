# triserve: the two commands a newcomer needs.
#   make serve   install, build the default models if missing, serve on 127.0.0.1:3000
#   make test    install, run the test suite (tiny models built inside the test session)
#   make help    every target with its one line (the `## ` comment on its rule line)
# Packaging (README "Packaging and deployment"):
#   make bento        bentoml build: a versioned Bento without weights (BENTOFILE=bentofile.gpu.yaml for the GPU one)
#   make image        bento + buildah image + push to $(REGISTRY) + skopeo inspect (scripts/containerize.py)
#   make variants     INT8 (static QDQ / per-channel) and FP16 variants, gated and published (scripts/variants.py)
#   make smoke-image  build the default models if missing, publish them to $(REGISTRY), run the pushed image with podman
#                     against them (scripts/smoke_image.py)
#   make lock         locks/*.txt from pyproject.toml: the pinned sets make install, the Bentos and the images install
# Documentation: make docs (the site, mkdocs --strict, into .cache/site; docs/index.md is its home page)
# ONNX Runtime: ORT=cpu (default: onnxruntime) or ORT=gpu (onnxruntime-gpu), never both (same `onnxruntime` import):
#   make install ORT=gpu
# Tools: every command below runs from the project's environment ($(VENV)/bin/...) or by absolute path; the only
# lookup is the interpreter that creates the venv (SYSTEM_PYTHON, resolved once to an absolute path).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
SYSTEM_PYTHON ?= $(shell command -v python3)
GIT ?= $(firstword $(wildcard /usr/local/bin/git /usr/bin/git /bin/git) git)
GREP ?= $(firstword $(wildcard /usr/bin/grep /bin/grep) grep)
AWK ?= $(firstword $(wildcard /usr/bin/awk /bin/awk) awk)
TR ?= $(firstword $(wildcard /usr/bin/tr /bin/tr) tr)
ORT ?= cpu
ifeq ($(filter $(ORT),cpu gpu),)
$(error ORT must be cpu or gpu, not '$(ORT)')
endif
# the other flavour, uninstalled before this one is installed (switching ORT in an existing venv)
ORT_OTHER := $(if $(filter gpu,$(ORT)),onnxruntime,onnxruntime-gpu)
# the client is its own distribution (client/pyproject.toml); the third-party packages come from the lock: a change to
# any of these files reinstalls
LOCK := locks/dev-$(ORT).txt
STAMP := $(VENV)/.installed-$(ORT)-$(shell cat pyproject.toml client/pyproject.toml $(LOCK) | sha256sum | cut -c1-12)
HOST ?= 127.0.0.1
PORT ?= 3000
BENTOFILE ?= bentofile.yaml
REGISTRY ?= 127.0.0.1:5000
export YOLO_OFFLINE := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export BENTOML_DO_NOT_TRACK := True
# BentoML keeps prometheus multiprocess files under BENTOML_HOME and wipes them at start: one home per checkout.
export BENTOML_HOME ?= $(CURDIR)/.cache/bentoml

.PHONY: install models variants serve test test-slow perf-guard lint docs docs-reference clean-models bento lock image smoke-image

$(STAMP): pyproject.toml client/pyproject.toml $(LOCK)
	test -x $(PY) || $(if $(SYSTEM_PYTHON),$(SYSTEM_PYTHON),$(error no python3 to create $(VENV) with: set SYSTEM_PYTHON=/path/to/python3.11)) -m venv $(VENV)
	$(PIP) install -q --retries 10 --upgrade pip
	$(PIP) uninstall -q -y $(ORT_OTHER)
	# every third-party package at its locked version (torch==2.14.1 included: never an unpinned CUDA download),
	# then the project and the API client (triserve-client: scripts/drills and the tests use it) on top, editable.
	# uv installs the lock (51 s against pip's 3m52s for the same 248 packages, identical `pip freeze`: docs/development.md);
	# it takes pip's configured find-links (where torch lies on this machine; uv reads no pip configuration);
	# pip installs uv and stays the fallback.
	# The lock is ~4 GB from PyPI (torch's CUDA wheels come with it): a broken connection must not fail the install.
	# uv retries each request 10 times (UV_HTTP_RETRIES; default 3), pip 10 times and resumes a cut download 50 times
	# (a fresh-clone CI run failed on nvidia_nvjitlink cut at 10.5 of 46.6 MB after pip's default 5 resumes).
	$(PIP) install -q --retries 10 $$($(GREP) -E '^uv==' $(LOCK) | $(AWK) '{print $$1}')
	UV_FIND_LINKS=$$($(PIP) config get global.find-links 2>/dev/null | $(TR) -s ' \n' ',') UV_HTTP_RETRIES=10 $(VENV)/bin/uv pip install -q --python $(PY) --system-certs -r $(LOCK) || $(PIP) install -q --retries 10 --resume-retries 50 -r $(LOCK)
	$(PIP) install -q --no-deps -e . -e ./client
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP) ## venv + the project (editable, ORT=cpu|gpu extra, export, dev) and the client

models: install ## build/import the default models into models/store when missing (scripts.pipeline build)
	$(PY) -m scripts.pipeline build

# INT8/FP16 variants of the stable primaries, gated; docs/bench/quantization.{json,md}
variants: models ## INT8/FP16 variants of the stable primaries, gated (docs/bench/quantization)
	$(PY) -m scripts.variants build --out docs/bench/quantization

# `triserve serve` (triserve/cli.py): bentoml serve triserve.services.gateway:Gateway with this file's environment defaults
serve: models ## build the default models if missing, then `triserve serve` on HOST:PORT (127.0.0.1:3000)
	$(VENV)/bin/triserve serve --host $(HOST) --port $(PORT)

# TEST_WORKERS pytest-xdist workers: most tests wait on the servers they start (each on its own ports and BENTOML_HOME),
# so two workers on this 2-core host finish in 8.2 min what one did in 13.6 (docs/development.md); 1 = no xdist
TEST_WORKERS ?= 2
test: install ## run the test suite (tiny models built inside the test session), without the tests marked slow
	$(PY) -m pytest -q --durations=25 -m "not slow" $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS)) tests

test-slow: install ## only the tests marked slow (minutes each: the 3-minute soak drill)
	$(PY) -m pytest -q --durations=25 -m slow tests

# The performance guard (scripts/bench/perf_guard.py): CPU per request of this tree against its parent commit, both
# served in one run (A B B A cells, 5 rounds, the tiny text model); fails on a regression beyond +15%. A measurement
# with a threshold, not a timed test (~1.5 min from a clean clone; not in .ci/run: too noisy yet, docs/performance.md).
perf-guard: install ## CPU per request vs the previous commit, measured side by side; fails beyond +15%
	$(PY) -m scripts.bench.perf_guard

# ruff + mypy + import-linter, zero findings (configuration in pyproject.toml); .ci/run runs it before the tests
lint: install ## ruff + mypy + the import layers (import-linter), zero findings
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

# The documentation site (mkdocs.yml, docs/; mkdocs-material comes with the dev extra). `make docs` fails when the
# generated pages are stale (docs/reference/configuration.md and the marked blocks of docs/families/*.md, from
# configs/ and families/: scripts/docs_reference.py); `make docs-reference` rewrites them. Open .cache/site/index.html.
docs: install ## the documentation site, built with --strict into .cache/site (generated pages checked first)
	$(PY) -m scripts.docs_reference --check
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir .cache/site

docs-reference: install ## rewrite the generated documentation pages from configs/ and families/
	$(PY) -m scripts.docs_reference

clean-models: ## remove the built models (models/store) and the pipeline cache
	rm -rf models/store .cache/pipeline

# after a change to pyproject.toml's dependencies: re-resolve (keeping every pin still allowed); LOCK_ARGS=--upgrade
# takes the newest allowed versions. make install then installs the new lock.
lock: ## locks/*.txt from pyproject.toml (scripts/lock.py; LOCK_ARGS=--upgrade for the newest allowed)
	test -x $(PY) || $(MAKE) install
	$(PY) -m scripts.lock $(LOCK_ARGS)

bento: install ## bentoml build: a versioned Bento without weights (BENTOFILE=)
	$(PY) -m scripts.containerize --check-bentofiles
	$(VENV)/bin/bentoml build -f $(BENTOFILE) --label git_commit=$$($(GIT) rev-parse HEAD)
	$(VENV)/bin/bentoml list triserve

# IMAGE_ARGS: more options for scripts/containerize.py (--build-only, --no-push, --check-tools, ...)
image: install ## bento + buildah image + push to REGISTRY + skopeo inspect (IMAGE_ARGS=)
	$(PY) -m scripts.containerize --bentofile $(BENTOFILE) --registry $(REGISTRY) $(IMAGE_ARGS)

smoke-image: models ## publish the default models to REGISTRY, run the pushed image with podman (SMOKE_ARGS=)
	$(PY) -m scripts.smoke_image --registry $(REGISTRY) $(SMOKE_ARGS)

# The tiers apart (scripts/tiers.py): RUNNERS runner replicas behind haproxy (Debian package haproxy), GATEWAYS
# gateways pointing at it by BENTOML_SERVE_DEPENDS, haproxy in front of the gateways too; Ctrl-C stops everything.
# TIERS_ARGS: more options (--deployments intent, --gateway-workers 2, --seconds 60, ...)
RUNNERS ?= 2
GATEWAYS ?= 2
.PHONY: tiers
tiers: models ## runner and gateway tiers apart behind haproxy (RUNNERS=, GATEWAYS=, TIERS_ARGS=)
	$(PY) -m scripts.tiers --runners $(RUNNERS) --gateways $(GATEWAYS) --gateway-lb $(TIERS_ARGS)

# The targets with their `## ` line, in this file's order; plain `make` stays `make install` (the first rule: $(STAMP)).
.PHONY: help
help: ## this list
	@echo 'usage: make [TARGET] [VAR=value ...]   (variables and details: the comments at the top of the Makefile)'
	@$(GREP) -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | $(AWK) 'BEGIN {FS = ":.*?## "}; {printf "  %-13s %s\n", $$1, $$2}'
