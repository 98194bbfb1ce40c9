"""The family contract stays narrow (kernel/family.py): every registered family defines at most eight members of
its own (hooks + declarations), and its transports' surface is one `api` declaration."""
from __future__ import annotations

import pytest

from triserve.configs import families
from triserve.kernel.family import Family, FamilyApi, OipSurface

MAX_MEMBERS = 8


def own_members(cls: type) -> list[str]:
    """What a family class itself defines (shared bases such as families/vision's are not the family's work)."""
    return sorted(name for name in vars(cls) if not name.startswith("_"))


@pytest.mark.parametrize("name", families.names())
def test_a_family_defines_at_most_eight_members(name):
    fam = families.family(name)
    members = own_members(type(fam))
    assert len(members) <= MAX_MEMBERS, f"{name} defines {len(members)}: {members}"
    assert "api" in members and "name" in members
    assert isinstance(fam, Family) and isinstance(fam.api, FamilyApi) and isinstance(fam.api.oip, OipSurface)


def test_the_counts_as_they_stand():
    """The contract before this count: 9-18 members a family (request_model, response_model, routes, four oip_*,
    grpc_method, tensor_items and the OIP hooks each on the family); now one `api` holds the declarations."""
    counts = {name: len(own_members(type(families.family(name)))) for name in families.names()}
    assert counts == {"detection": 6, "text": 7, "forecast": 8, "segmentation": 5, "classification": 7, "pose": 6}


def test_no_family_still_declares_the_old_attributes():
    old = {"request_model", "response_model", "routes", "grpc_method", "oip_alias", "oip_parameters",
           "oip_pipeline_inputs", "oip_pipeline_outputs", "tensor_items", "oip_request_fields", "oip_extra_parameters"}
    for name in families.names():
        assert not old & {n for cls in type(families.family(name)).__mro__ for n in vars(cls)}, name
