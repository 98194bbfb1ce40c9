"""The licence of imported weights: `--license SPDX` on every importer, else what the source itself states.

A source states a licence only where it is trivially readable: an ONNX graph's metadata `license` entry (ultralytics
writes "AGPL-3.0 License (https://ultralytics.com/license)"), an ultralytics checkpoint's `license` key, a Hugging
Face / sentence-transformers folder's README.md front matter (`license: apache-2.0`). Free text is mapped to an SPDX
id only when its first word is a known id (KNOWN); anything else counts as not stated. From the CLI, a source that
states none is refused (exit 2) until `--license` names one (`NOASSERTION` is accepted, and recorded as such);
library callers that pass nothing get `NOASSERTION` recorded.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from triserve.models.importing.result import GateFailed
from triserve.models.manifest import NOASSERTION, check_spdx

# lower-cased ids seen in model metadata and Hugging Face cards -> SPDX ids (deprecated GPL-family ids mean "-only")
KNOWN = {k.lower(): v for k, v in {
    "MIT": "MIT", "Apache-2.0": "Apache-2.0", "BSD-2-Clause": "BSD-2-Clause", "BSD-3-Clause": "BSD-3-Clause",
    "AGPL-3.0": "AGPL-3.0-only", "AGPL-3.0-only": "AGPL-3.0-only", "AGPL-3.0-or-later": "AGPL-3.0-or-later",
    "GPL-3.0": "GPL-3.0-only", "GPL-3.0-only": "GPL-3.0-only", "GPL-3.0-or-later": "GPL-3.0-or-later",
    "GPL-2.0": "GPL-2.0-only", "LGPL-3.0": "LGPL-3.0-only", "MPL-2.0": "MPL-2.0", "Unlicense": "Unlicense",
    "CC0-1.0": "CC0-1.0", "CC-BY-4.0": "CC-BY-4.0", "CC-BY-SA-4.0": "CC-BY-SA-4.0", "CC-BY-NC-4.0": "CC-BY-NC-4.0",
    "CC-BY-NC-SA-4.0": "CC-BY-NC-SA-4.0", "OpenRAIL": "LicenseRef-OpenRAIL",
}.items()}


class LicenseRequired(GateFailed):
    """The source states no licence and none was given (a refusal: exit 2, nothing published)."""


def add_license_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--license", metavar="SPDX", default=None, type=_spdx_arg,
                   help="SPDX license expression of the weights (e.g. Apache-2.0, MIT, AGPL-3.0-only, "
                        "LicenseRef-<name>, NOASSERTION); required when the source states none")


def _spdx_arg(value: str) -> str:
    try:
        return check_spdx(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def spdx_from_text(text: object) -> str | None:
    """An SPDX id for a licence as sources write it ('AGPL-3.0 License (https://...)', 'apache-2.0'); None when
    unknown."""
    if not isinstance(text, str) or not text.strip():
        return None
    return KNOWN.get(text.strip().split()[0].lower())


def onnx_license(path: Path) -> str | None:
    """The ONNX metadata `license` entry as SPDX (None when absent or not recognised)."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001  # unreadable graphs are refused by the importer's own checks
        return None
    return spdx_from_text({p.key: p.value for p in model.metadata_props}.get("license"))


def card_license(folder: Path) -> str | None:
    """`license:` in a model folder's README.md YAML front matter (Hugging Face model cards) as SPDX."""
    readme = Path(folder) / "README.md"
    if not readme.is_file():
        return None
    text = readme.read_text(errors="replace")
    front = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.S)
    found = re.search(r"^license:\s*['\"]?([^'\"\n]+)", front.group(1), re.M) if front else None
    return spdx_from_text(found.group(1)) if found else None


def resolve_license(given: str | None, stated: str | None, where: str, *, required: bool = False) -> str:
    """`given` (--license) over what the source states; NOASSERTION, or LicenseRequired when `required`."""
    if given:
        return check_spdx(given)
    if stated:
        return stated
    if required:
        raise LicenseRequired(f"{where}: the source states no licence for its weights: pass --license SPDX (e.g. "
                              f"--license Apache-2.0, --license LicenseRef-<name> for your own terms, or --license "
                              f"{NOASSERTION} to record it as unknown)")
    return NOASSERTION
