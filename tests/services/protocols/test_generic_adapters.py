"""The generic transport adapters: typed gRPC messages -> request model fields, OIP tensors <-> request/response
fields as a family declares them (kernel/tensors.TensorMeta)."""
import numpy as np
import pytest

from triserve import families
from triserve.kernel.tensors import TensorMeta
from triserve.services.protocols.generated import triserve_pb2 as pb
from triserve.services.protocols.grpc_typed import message_fields, methods
from triserve.services.protocols.oip_codec import Tensor, output_tensor, request_field
from triserve.services.protocols.rest import family_router


def test_message_fields_keeps_set_optionals_and_nonempty_repeated_only():
    assert message_fields(pb.ClassifyRequest(texts=["a", "b"])) == {"texts": ["a", "b"], "model": "auto"}
    assert message_fields(pb.ClassifyRequest(texts=["a"], top_k=0, model=pb.MODEL_CHOICE_FALLBACK)) == {
        "texts": ["a"], "top_k": 0, "model": "fallback"}  # a set optional is passed even when it is the zero value
    assert message_fields(pb.ForecastRequest(values=[1.0, 2.0], frequency="D")) == {
        "values": [1.0, 2.0], "frequency": "D", "model": "auto"}  # empty timestamps: left to the model's default
    assert message_fields(pb.DetectRequest(images=[b"\x89PNG"], deployment="coco")) == {
        "images": [b"\x89PNG"], "deployment": "coco", "model": "auto"}


def test_an_unknown_enum_number_stays_unknown_so_validation_refuses_it():
    fields = message_fields(pb.ClassifyRequest(texts=["a"], model=7))
    assert fields["model"] == "unknown_model_choice_7"
    with pytest.raises(ValueError):
        families.family("text").api.request_model.model_validate(fields)


@pytest.mark.parametrize("family", families.names())
def test_every_request_message_field_is_a_request_model_field(family):
    """The proto and the request model must not drift: the generic gRPC adapter maps fields by name."""
    for method, request_model, response_model in methods(family):
        message = getattr(pb, f"{method}Request")
        assert {f.name for f in message.DESCRIPTOR.fields} <= set(request_model.model_fields)
        response = getattr(pb, f"{method}Response")
        assert {f.name for f in response.DESCRIPTOR.fields} <= set(response_model.model_fields)


@pytest.mark.parametrize("family", families.names())
def test_declared_tensors_name_request_fields_and_readers(family):
    fam = families.family(family)
    assert all(meta.field in fam.api.request_model.model_fields for meta in fam.api.oip.inputs)
    assert all(meta.value is not None for meta in fam.api.oip.outputs)
    assert set(fam.api.oip.parameters) <= set(fam.api.request_model.model_fields)


def test_request_field_decodes_by_datatype():
    text = TensorMeta("TEXT", "BYTES", (-1,), field="texts")
    image = TensorMeta("IMAGE", "BYTES", (-1,), field="images", binary=True)
    data = np.array([b"caf\xc3\xa9", b"x"], dtype=object)
    assert request_field(text, Tensor("TEXT", "BYTES", [2], data)) == ["café", "x"]
    assert request_field(image, Tensor("IMAGE", "BYTES", [2], data)) == [b"caf\xc3\xa9", b"x"]
    values = TensorMeta("VALUES", "FP64", (-1,), field="values")
    assert request_field(values, Tensor("VALUES", "FP64", [1, 3], np.array([[1.0, np.nan, 3.0]]))) == [
        1.0, pytest.approx(np.nan, nan_ok=True), 3.0]


def test_output_tensor_keeps_the_declared_shape_and_datatype():
    labels = output_tensor(TensorMeta("TOP_K_LABELS", "BYTES", (-1, -1)), [["a", "b"], ["c", "d"]])
    assert labels.shape == [2, 2] and labels.data.reshape(-1).tolist() == [b"a", b"b", b"c", b"d"]
    scores = output_tensor(TensorMeta("SCORE", "FP32", (-1,)), [0.5, 0.25])
    assert scores.shape == [2] and scores.data.dtype == np.float32


def test_rest_routes_are_built_from_the_declarations():
    router = family_router("detection")
    paths = {r.path: r for r in router.routes}
    assert set(paths) == {"/v1/detect", "/v1/detect/upload"}
    upload = paths["/v1/detect/upload"]
    names = {p.name for p in upload.dependant.body_params}
    assert "images" in names  # the files' field, as declared


def test_nested_messages_become_dicts():
    request = pb.ForecastPanelRequest(series=[pb.SeriesInput(id="a", values=[1.0, 2.0], start="2024-01-01",
                                                             covariates={"t": pb.Doubles(values=[3.0, 4.0])})],
                                      frequency="D", calendar=["weekday"])
    assert message_fields(request) == {"series": [{"id": "a", "values": [1.0, 2.0], "start": "2024-01-01",
                                                   "covariates": {"t": [3.0, 4.0]}}],
                                       "frequency": "D", "model": "auto", "calendar": ["weekday"]}
