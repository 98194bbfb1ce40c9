"""The global model: a tiny one trained for a few steps exports to ONNX with the documented contract and matches
torch within 1e-4 (scripts.common.parity_gate)."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")
import onnx
import torch

from scripts.common import ort_session, parity_gate
from scripts.forecast.corpus import Series
from scripts.forecast.global_model import (
    ModelConfig,
    WindowSampler,
    export_onnx,
    parity_cases,
    predict,
    train,
)
from triserve.families.forecast.features import (
    CONTEXT,
    FREQUENCIES,
    H_MAX,
    INPUT_NAMES,
    MAX_HORIZON,
    N_FEATURES,
    OUTPUT_NAME,
    QUANTILES,
)

CFG = ModelConfig(hidden=16, blocks=1, freq_dim=4, batch_size=36, max_steps=4)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    rng = np.random.default_rng(0)
    series = []
    for f in FREQUENCIES:
        for i in range(2):
            n = MAX_HORIZON[f] + 60 + 40 * i
            v = 50 + 5 * np.sin(np.arange(n) / 3.0) + rng.standard_normal(n)
            series.append(Series(f"{f}/{i}", f, np.datetime64("2021-01-01", "s"), v, group=f"{f}/{i}"))
    torch.set_num_threads(1)
    model, hist = train(series, CFG, seconds_budget=30, seed=0)
    path = export_onnx(model, tmp_path_factory.mktemp("gm") / "model.onnx")
    return series, model, hist, path


def test_trains_and_exports_the_contract(tiny):
    series, model, hist, path = tiny
    assert hist["steps"] == CFG.max_steps and np.isfinite(hist["loss_last_100"])
    m = onnx.load(str(path))
    ins = {i.name: i for i in m.graph.input}
    assert list(ins) == list(INPUT_NAMES) and [o.name for o in m.graph.output] == [OUTPUT_NAME]

    def shape(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    assert shape(ins["context"]) == ["batch", CONTEXT] and shape(ins["mask"]) == ["batch", CONTEXT]
    assert shape(ins["freq"]) == ["batch"] and ins["freq"].type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert shape(ins["features"]) == ["batch", N_FEATURES]
    assert shape(m.graph.output[0]) == ["batch", H_MAX, len(QUANTILES)]
    assert {p.key for p in m.metadata_props} >= {"triserve.forecast.context", "triserve.forecast.quantiles"}


def test_onnx_parity_with_torch(tiny):
    series, model, _, path = tiny
    session = ort_session(path, threads=1)
    checks = parity_gate(parity_cases(model, WindowSampler(series, CFG, 1), seed=0), session, tolerance=1e-4,
                         output_name=OUTPUT_NAME)
    assert checks and all(c.passed for c in checks)


def test_predict_in_original_units_with_monotone_quantiles(tiny):
    series, _, _, path = tiny
    session = ort_session(path, threads=1)
    hist = [series[0].values * 1e9, np.full(30, 4.0), np.array([1.0, 2.0, 3.0])]
    out = predict(session, hist, ["YS", "D", "W"], [np.datetime64("2024-01-01", "s")] * 3, [6, 14, 104])
    assert [o.shape for o in out] == [(6, len(QUANTILES)), (14, len(QUANTILES)), (104, len(QUANTILES))]
    for o in out:
        assert np.isfinite(o).all() and np.all(np.diff(o, axis=1) >= -1e-6 * np.abs(o).max())
    np.testing.assert_allclose(out[1], 4.0, rtol=1e-6)  # a constant stays constant
