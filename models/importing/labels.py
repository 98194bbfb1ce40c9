"""Class names given beside a model: one per line, or JSON/YAML (a list, an {id: name} dict, or either under
'names' as ultralytics data yamls write them). Detection and text importers both read them."""
from __future__ import annotations

from pathlib import Path

from triserve.models.importing.result import ImportRefused


def read_labels(path: Path) -> list[str]:
    """Class names in class-id order: a text file (one per line), or JSON/YAML with a list, an {id: name} dict, or
    either under 'names' (ultralytics data yaml)."""
    path = Path(path)
    text = path.read_text()
    if path.suffix.lower() in {".json", ".yaml", ".yml"}:
        import yaml

        data = yaml.safe_load(text)  # JSON is YAML
        if isinstance(data, dict) and "names" in data:
            data = data["names"]
        return names_list(data, str(path))
    names = [line.strip() for line in text.splitlines()]
    while names and not names[-1]:
        names.pop()
    if not names or any(not n for n in names):
        raise ImportRefused(f"{path}: one class name per line, no blank lines in between")
    return names


def names_list(data, where: str) -> list[str]:
    """A list or an {id: name} dict (ids 0..n-1, int or str keys) -> names in id order; ImportRefused otherwise."""
    if isinstance(data, dict):
        try:
            keys = sorted(int(k) for k in data)
        except (TypeError, ValueError) as exc:
            raise ImportRefused(f"{where}: class ids must be integers, got {list(data)[:5]}") from exc
        if keys != list(range(len(keys))):
            raise ImportRefused(f"{where}: class ids must be 0..{len(keys) - 1} without gaps, got {keys[:10]}...")
        return [str(data[k] if k in data else data[str(k)]) for k in keys]
    if isinstance(data, (list, tuple)) and data:
        return [str(n) for n in data]
    raise ImportRefused(f"{where}: no class names found (expected a list or an {{id: name}} dict)")
