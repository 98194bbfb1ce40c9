# triserve: the two commands a newcomer needs.
#   make serve   install, build the default models if missing, serve on 127.0.0.1:3000
#   make test    install, run the test suite (tiny models built inside the test session)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
HOST ?= 127.0.0.1
PORT ?= 3000
export YOLO_OFFLINE := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export BENTOML_DO_NOT_TRACK := True
# BentoML keeps prometheus multiprocess files under BENTOML_HOME and wipes them at start: one home per checkout.
export BENTOML_HOME ?= $(CURDIR)/.cache/bentoml

.PHONY: install models serve test lint clean-models

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: pip takes the local wheels (never an unpinned CUDA download).
	$(PIP) install -q torch==2.14.1 torchvision==0.29.1
	$(PIP) install -q -e '.[export,dev]'
	touch $(STAMP)

install: $(STAMP)

models: install
	$(PY) -m scripts.pipeline build

serve: models
	$(VENV)/bin/bentoml serve services.gateway:Gateway --host $(HOST) --port $(PORT)

test: install
	$(PY) -m pytest -q tests

clean-models:
	rm -rf models/store .cache/pipeline
