"""Texts users read stay in step with what is served (issue 43): the package Summary names every family; docs/api.md
links every family's page and names every method of the typed gRPC service (services/protocols/protos/triserve.proto);
the client distribution has a README as its long description and a __version__."""
from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import triserve_client
from triserve import families

ROOT = Path(__file__).resolve().parents[1]
API = (ROOT / "docs" / "api.md").read_text()
PROTO = (ROOT / "services" / "protocols" / "protos" / "triserve.proto").read_text()


def test_every_family_page_is_linked():
    for name in families.names():
        page = f"families/{name}.md"
        assert (ROOT / "docs" / page).is_file(), page
        assert f"]({page})" in API, page


def test_every_typed_grpc_method_is_documented():
    methods = re.findall(r"^\s*rpc (\w+)\(", PROTO, flags=re.M)
    assert methods
    section = API[API.index("`triserve.v1.Triserve`"):]
    section = section[:section.index("\n- ", 1)]  # the Triserve service's bullet
    assert not [m for m in methods if f"`{m}`" not in section], methods


def test_package_summary_and_docs_home_name_every_family():
    summary = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    home = (ROOT / "docs" / "index.md").read_text().split("\n\n")[1]
    for name in families.names():
        assert name in summary, name
        assert name in home.replace("\n", " "), name


def test_the_client_has_a_readme_and_a_version():
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    readme = (ROOT / "client" / project["readme"]).read_text()
    assert readme.startswith("# triserve-client") and "pip install ./client" in readme
    assert triserve_client.__version__ == importlib.metadata.version("triserve-client") == project["version"]
    assert "__version__" in triserve_client.__all__
