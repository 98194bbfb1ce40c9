"""The KServe InferenceService (configs/deploy/kserve/), validated offline (issue 43 part 6).

* base/inferenceservice.yaml and the cpu/ gpu/ variants rendered by the real kustomize (kubectl's or a `kustomize`
  binary) against KServe's own CRD schema: the openAPIV3Schema of serving.kserve.io_inferenceservices.yaml vendored
  in configs/deploy/schemas/ (its $comment names the upstream commit and what was left out), read as the API server's
  strict field validation reads it (kubectl's default --validate=strict: an unknown field is an error, not pruned).
* The predictor's container also against the Kubernetes Container schema of kubernetes-validate (strict) for the
  oldest and newest version tested, and wired like the kustomize layout: REST on 3000 first (KServe's Service port
  80), gRPC on 3001 named so that KServe gives it appProtocol h2c, /readyz and /livez probes on the REST port, the
  registry pulled at start (every TRISERVE_* variable a valid Settings override), the cache volume mounted; the GPU
  variant alone asks for nvidia.com/gpu and GPU nodes.
"""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.configs.k8s_support import DEPLOY, KUBECTL, KUSTOMIZE, kustomize_build, one
from tests.configs.test_deploy import K8S_VERSIONS, _k8s_registry, _settings_env_ok

jsonschema = pytest.importorskip("jsonschema")

KSERVE = DEPLOY / "kserve"
SCHEMA = DEPLOY / "schemas" / "kserve-inferenceservice-v1beta1.schema.json"
needs_kustomize = pytest.mark.skipif(
    KUBECTL is None and KUSTOMIZE is None,
    reason="neither kubectl (`kubectl kustomize`) nor kustomize is installed in the system directories")


def strict(schema: dict) -> dict:
    """The CRD schema as strict field validation applies it: an object with declared properties takes no others
    (unless it preserves unknown fields or declares additionalProperties itself)."""
    out = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


@pytest.fixture(scope="module")
def validator():
    schema = strict(json.loads(SCHEMA.read_text()))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def base() -> dict:
    return yaml.safe_load((KSERVE / "base" / "inferenceservice.yaml").read_text())


def rendered(variant: str) -> dict:
    return one(kustomize_build(KSERVE / variant), "InferenceService")


def test_base_matches_the_kserve_crd_schema(validator):
    assert errors(validator, base()) == []


@needs_kustomize
@pytest.mark.parametrize("variant", ["base", "cpu", "gpu"])
def test_each_variant_renders_and_matches_the_kserve_crd_schema(variant, validator):
    found = errors(validator, rendered(variant))
    print(f"kserve/{variant}: InferenceService against {SCHEMA.name}: {len(found)} errors")
    assert found == []


def test_the_schema_check_is_not_vacuous(validator):
    doc = base()
    predictor = doc["spec"]["predictor"]
    predictor["minReplica"] = 1  # typo of minReplicas
    predictor["containers"][0]["readinessProbe"]["httpGet"]["port"] = [3000]  # neither int nor string
    predictor["containers"][0]["resources"]["limits"]["memory"] = "12 gigs"  # not a quantity
    del doc["spec"]["predictor"]
    doc["spec"]["predicter"] = predictor
    found = errors(validator, doc)
    assert any("'predictor' is a required property" in e for e in found), found
    assert any("'predicter' was unexpected" in e for e in found), found
    doc = base()
    doc["spec"]["predictor"]["minReplica"] = 1
    doc["spec"]["predictor"]["containers"][0]["resources"]["limits"]["memory"] = "12 gigs"
    doc["spec"]["predictor"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = [3000]
    found = errors(validator, doc)
    assert len(found) >= 3, found


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_predictor_container_is_a_valid_kubernetes_container(version):
    schema = {"$ref": "https://kubernetes.io/api/_definitions.json#/$defs/io.k8s.api.core.v1.Container"}
    container_validator = jsonschema.Draft202012Validator(schema, registry=_k8s_registry(version))
    (container,) = base()["spec"]["predictor"]["containers"]
    assert errors(container_validator, container) == []
    assert errors(container_validator, {**container, "imagePullPolicy": 3})


def test_wiring_ports_probes_and_registry(monkeypatch):
    doc = base()
    assert doc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    predictor = doc["spec"]["predictor"]
    (container,) = predictor["containers"]
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [("http1", 3000), ("grpc", 3001)]
    for probe, path in (("startupProbe", "/readyz"), ("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        assert container[probe]["httpGet"] == {"path": path, "port": 3000}, probe
    envs = {e["name"]: e["value"] for e in container["env"]}
    assert envs["TRISERVE_GRPC__PORT"] == "3001" and envs["BENTOML_PORT"] == "3000"
    assert envs["TRISERVE_REGISTRY_URI"].startswith("oci://")
    _settings_env_ok(envs, monkeypatch)
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == envs["TRISERVE_MODEL_CACHE_DIR"]
    assert [v["name"] for v in predictor["volumes"]] == [mount["name"]]
    assert "nvidia.com/gpu" not in json.dumps(doc)  # the base is hardware-neutral


@needs_kustomize
def test_only_the_gpu_variant_asks_for_a_gpu():
    cpu, gpu = rendered("cpu"), rendered("gpu")
    cpu_container, gpu_container = cpu["spec"]["predictor"]["containers"][0], gpu["spec"]["predictor"]["containers"][0]
    assert cpu_container["image"].endswith("/triserve:latest")
    assert gpu_container["image"].endswith("/triserve-gpu:latest")
    assert "nvidia.com/gpu" not in json.dumps(cpu)
    assert gpu_container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert gpu_container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert gpu["spec"]["predictor"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert gpu["spec"]["predictor"]["tolerations"][0]["key"] == "nvidia.com/gpu"
