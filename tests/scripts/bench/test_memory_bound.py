"""scripts/bench/memory_bound.py's pieces: the extra deployments it serves and where it reads each slot's memory."""
from __future__ import annotations

import yaml

from scripts.bench.memory_bound import EXTRA, models_file, slot_memory
from triserve.configs.deployments import ModelRepository


def test_models_file_adds_two_detectors_that_the_repository_accepts(tmp_path):
    repo = yaml.safe_load(models_file(tmp_path / "models.yaml").read_text())
    names = [d["name"] for d in repo["deployments"]]
    assert names[-2:] == list(EXTRA) and len(names) == len(set(names))
    assert [d["model"]["name"] for d in repo["deployments"][-2:]] == list(EXTRA.values())
    ModelRepository.model_validate(repo)  # the server would accept it


def test_slot_memory_reads_the_runners_models_table_only():
    memory = {"resident_mb": 10.0, "per_item_mb": 1.5, "batch_cap": 4}
    models = {"deployments": [{"name": "coco", "model": {"memory": memory, "loaded_versions": ["1"], "name": "x"}}],
              "runner": {"models": {"coco": {"name": "yolo", "memory": memory, "loaded_versions": ["1"]},
                                    "coco_fallback": {"name": "yolo-int8", "memory": None, "loaded_versions": []}}}}
    assert slot_memory(models) == {"coco": {**memory, "model": "yolo"}}
