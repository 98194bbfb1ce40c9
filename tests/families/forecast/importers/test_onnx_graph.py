"""forecast-onnx: a user's window forecaster (made here with onnx.helper) imported, proved and served through the
family's runner hooks; graphs the window contract cannot serve are refused with the reason."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
import onnx
from onnx import TensorProto, helper, numpy_helper

from triserve.families.forecast.importers.onnx_graph import publish_forecast_onnx
from triserve.importers import main
from triserve.models.importing.result import ImportRefused
from triserve.models.registry import LocalRegistry

C, H = 24, 6


def window_graph(path, context=C, horizon=H, quantiles=0, batch="batch", mix_rows=False, elem=TensorProto.FLOAT):
    """Seasonal naive (period 12) as a MatMul [C, H]; quantiles: the median +- k, as [batch, H, Q]."""
    w = np.zeros((context, horizon), np.float32)
    for h in range(horizon):
        w[context - 12 + h % 12, h] = 1.0
    inits = [numpy_helper.from_array(w, "w")]
    nodes = [helper.make_node("MatMul", ["window", "w"], ["point"])]
    if mix_rows:  # every row gets the batch mean added: a graph that leaks across the batch
        nodes += [helper.make_node("ReduceMean", ["point"], ["mean"], axes=[0], keepdims=1),
                  helper.make_node("Add", ["point", "mean"], ["point2"])]
    last = "point2" if mix_rows else "point"
    if quantiles:
        offsets = np.linspace(-1, 1, quantiles).astype(np.float32)
        inits += [numpy_helper.from_array(np.array([2], np.int64), "ax2"),
                  numpy_helper.from_array(offsets.reshape(1, 1, -1), "offsets")]
        nodes += [helper.make_node("Unsqueeze", [last, "ax2"], ["p3"]),
                  helper.make_node("Add", ["p3", "offsets"], ["forecast"])]
        out_shape = [batch, horizon, quantiles]
    else:
        nodes.append(helper.make_node("Identity", [last], ["forecast"]))
        out_shape = [batch, horizon]
    graph = helper.make_graph(nodes, "user_forecaster",
                              [helper.make_tensor_value_info("window", elem, [batch, context])],
                              [helper.make_tensor_value_info("forecast", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_point_forecaster_imported_with_its_contract(tmp_path):
    reg = LocalRegistry(tmp_path / "reg")
    published, report = publish_forecast_onnx(window_graph(tmp_path / "m.onnx"), "my-load", "1.0.0", reg,
                                              frequencies=["h", "D"], alias="stable")
    m = published[0]
    pre = m.preprocess
    assert (pre.contract, pre.context, pre.horizon, pre.quantiles, pre.min_history) == ("window", C, H, [], C)
    assert pre.frequencies == ["h", "D"] and pre.max_horizon == {"h": H, "D": H}
    assert m.parity and all(c.passed for c in m.parity) and m.gates == {"parity": True, "batch_invariance": True}
    assert reg.resolve("my-load", "stable") == "1.0.0" and report["graph"]["batch_pinned"] is False


def test_quantile_forecaster_with_scaling_and_per_frequency_caps(tmp_path):
    reg = LocalRegistry(tmp_path / "reg")
    path = window_graph(tmp_path / "q.onnx", quantiles=3)
    published, _ = publish_forecast_onnx(path, "my-q", "1.0.0", reg, frequencies=["MS"], quantiles=[0.1, 0.5, 0.9],
                                         scaling="mean_abs", max_horizon={"MS": 4})
    pre = published[0].preprocess
    assert pre.quantiles == [0.1, 0.5, 0.9] and pre.scaling == "mean_abs" and pre.max_horizon == {"MS": 4}


def test_pinned_batch_graph_is_served_item_by_item(tmp_path):
    published, report = publish_forecast_onnx(window_graph(tmp_path / "b1.onnx", batch=1), "pinned", "1.0.0",
                                              LocalRegistry(tmp_path / "reg"), frequencies=["W"])
    assert report["graph"]["batch_pinned"] is True and published[0].inputs[0].shape == [1, C]


@pytest.mark.parametrize("kw,graph_kw,message", [
    ({"context": 48}, {}, "contradicts the graph"),
    ({"quantiles": [0.1, 0.5, 0.9]}, {}, "must be \\[batch, horizon, quantiles\\]"),
    ({"quantiles": [0.1, 0.5]}, {"quantiles": 3}, "3 quantiles"),
    ({"quantiles": [0.1, 0.9]}, {"quantiles": 2}, "median"),
    ({}, {"mix_rows": True}, "changes with its batch"),
    ({}, {"elem": TensorProto.DOUBLE}, "float32"),
    ({"frequencies": ["2h"]}, {}, "--frequencies"),
])
def test_refusals_say_why_and_publish_nothing(tmp_path, kw, graph_kw, message):
    reg = LocalRegistry(tmp_path / "reg")
    args = {"frequencies": ["h"]} | kw
    with pytest.raises(ImportRefused, match=message):
        publish_forecast_onnx(window_graph(tmp_path / "x.onnx", **graph_kw), "bad", "1.0.0", reg, **args)
    assert not reg.has("bad", "1.0.0")


def test_cli_and_deployment_entry(tmp_path, capsys):
    models_file = tmp_path / "models.yaml"
    models_file.write_text((Path(__file__).parents[3] / "fixtures" / "models.tiny.yaml").read_text())
    code = main(["--deployment", "load", "--models-file", str(models_file), "forecast-onnx",
                 "--model", str(window_graph(tmp_path / "m.onnx")), "--frequencies", "h", "--name", "my-load",
                 "--version", "1.0.0", "--registry", str(tmp_path / "reg"), "--license", "Apache-2.0"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["published"][0]["name"] == "my-load"
    assert LocalRegistry(tmp_path / "reg").manifest("my-load", "1.0.0").source.license == "Apache-2.0"
    assert "name: load" in models_file.read_text() and "family: forecast" in models_file.read_text()


def test_cli_refuses_a_source_without_a_licence_until_license_is_given(tmp_path, capsys, caplog):
    """A bare ONNX graph states no licence: the CLI refuses (exit 2, nothing published, the message names
    --license); a graph whose metadata states one is imported under it; a free-text --license is an argparse error."""
    graph = window_graph(tmp_path / "m.onnx")
    reg = tmp_path / "reg"
    args = ["forecast-onnx", "--model", str(graph), "--frequencies", "h", "--name", "m", "--version", "1.0.0",
            "--registry", str(reg)]
    assert main(args) == 2
    assert "states no licence" in caplog.text and "--license SPDX" in caplog.text
    assert capsys.readouterr().out == "" and LocalRegistry(reg).models() == []
    with pytest.raises(SystemExit) as exc:
        main([*args, "--license", "MIT License"])
    assert exc.value.code == 2
    stated = onnx.load(str(graph))
    stated.metadata_props.add(key="license", value="AGPL-3.0 License (https://ultralytics.com/license)")
    onnx.save(stated, str(tmp_path / "stated.onnx"))
    assert main([*args[:2], str(tmp_path / "stated.onnx"), *args[3:]]) == 0
    assert LocalRegistry(reg).manifest("m", "1.0.0").source.license == "AGPL-3.0-only"
    # the library (no require_license) records an unstated licence as NOASSERTION
    published, _ = publish_forecast_onnx(graph, "lib", "1.0.0", LocalRegistry(reg), frequencies=["h"])
    assert published[0].source.license == "NOASSERTION"
