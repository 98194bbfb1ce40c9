"""The text family's importers: Hugging Face sequence classifiers, ONNX graphs with their tokenizer.json, and
sentence-transformers encoders with a scikit-learn linear head, each verified against the framework it came from and
published through triserve.models.importing.

IMPORTERS: the modules `triserve import` (triserve/importers.py) registers, each with `add_parser(subparsers)`:
  hf            text-hf        a save_pretrained AutoModelForSequenceClassification directory
  onnx_graph    text-onnx      an ONNX classifier + tokenizer.json + labels
  sklearn_head  text-sklearn   a sentence-transformers folder + a fitted linear classifier, fused into one graph
What they share: finish (the last mile: parity, padding invariance, the served path, evaluation, drift references),
tokenizer (tokenizer.json with the serving settings), torch_export (torch -> ONNX), utterances (the check texts).
"""

IMPORTERS = (
    "triserve.families.text.importers.hf",
    "triserve.families.text.importers.onnx_graph",
    "triserve.families.text.importers.sklearn_head",
)
