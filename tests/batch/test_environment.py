"""Starting a cluster must not change the caller's environment (a later subprocess would see this checkout first)."""
import os

from triserve.batch.environment import PROJECT_ROOT, started_with


def test_the_project_leads_pythonpath_only_while_the_cluster_starts(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with started_with(PYSPARK_PYTHON="/usr/bin/python3") as env:
        assert os.environ["PYTHONPATH"].split(os.pathsep) == [PROJECT_ROOT, "/elsewhere"] == env["PYTHONPATH"].split(
            os.pathsep)
        assert os.environ["PYSPARK_PYTHON"] == "/usr/bin/python3"
    assert os.environ["PYTHONPATH"] == "/elsewhere" and "PYSPARK_PYTHON" not in os.environ


def test_an_unset_pythonpath_stays_unset(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with started_with():
        assert os.environ["PYTHONPATH"] == PROJECT_ROOT
    assert "PYTHONPATH" not in os.environ
