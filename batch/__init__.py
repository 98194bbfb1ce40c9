"""Offline batch inference: resumable jobs over files and tables, locally, on Ray Data or on Spark (docs/batch.md).
Each family's own preprocessing, runtime feeds and postprocessing (families/<name>/batch.py), the model
pulled from the registry as the service pulls it (sha256-verified), the ONNX session opened as the runner opens it."""
