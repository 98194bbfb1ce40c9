"""models/importing/licenses.py: what a source states about its licence, mapped to SPDX, and --license over it."""
from __future__ import annotations

import argparse

import pytest

from triserve.models.importing.licenses import (
    LicenseRequired,
    add_license_option,
    card_license,
    resolve_license,
    spdx_from_text,
)


@pytest.mark.parametrize("text, spdx", [
    ("AGPL-3.0 License (https://ultralytics.com/license)", "AGPL-3.0-only"),  # ultralytics' .pt and ONNX metadata
    ("apache-2.0", "Apache-2.0"), ("MIT", "MIT"), ("cc-by-nc-4.0", "CC-BY-NC-4.0"),
    ("other", None), ("", None), (None, None), ("see LICENSE", None),
])
def test_spdx_from_text(text, spdx):
    assert spdx_from_text(text) == spdx


def test_model_card_front_matter(tmp_path):
    assert card_license(tmp_path) is None
    (tmp_path / "README.md").write_text("---\nlanguage: en\nlicense: apache-2.0\ntags:\n- x\n---\n"
                                        "# card\nlicense: mit\n")
    assert card_license(tmp_path) == "Apache-2.0"
    (tmp_path / "README.md").write_text("# no front matter\nlicense: mit\n")
    assert card_license(tmp_path) is None


def test_given_over_stated_and_refusal_names_the_option():
    assert resolve_license("MIT", "Apache-2.0", "m.onnx") == "MIT"
    assert resolve_license(None, "Apache-2.0", "m.onnx", required=True) == "Apache-2.0"
    assert resolve_license(None, None, "m.onnx") == "NOASSERTION"
    with pytest.raises(LicenseRequired, match=r"m\.onnx: .*pass --license SPDX"):
        resolve_license(None, None, "m.onnx", required=True)


def test_license_option_checks_spdx():
    p = argparse.ArgumentParser()
    add_license_option(p)
    assert p.parse_args(["--license", "Apache-2.0 OR MIT"]).license == "Apache-2.0 OR MIT"
    with pytest.raises(SystemExit):
        p.parse_args(["--license", "MIT License"])
