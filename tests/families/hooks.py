"""Run a family's hooks the way the kernel does, without a server: a DeploymentView over given limits, and the
kernel's lifecycle with no serving context at all, so a request that got past validation fails with an
AttributeError (on the missing context) instead of the refusal the test expects."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from triserve.configs.deployments import Deployment
from triserve.kernel.errors import ApiError
from triserve.kernel.family import DeploymentView, Family
from triserve.kernel.lifecycle import serve


def view(limits: Any, name: str = "test") -> DeploymentView:
    def unavailable():
        raise AssertionError("the hook asked for the served model before validating")

    return DeploymentView(name=name, limits=limits, primary=unavailable, batch_limit=lambda: 8,
                          observe=lambda *_: None)


def refusal(family: Family, limits: Any, request: Any) -> ApiError:
    """The ApiError the kernel's lifecycle raises for `request` before it needs any serving context."""
    dep = Deployment.model_construct(name="test", family=family.name)
    with pytest.raises(ApiError) as err:
        asyncio.run(serve(None, dep, family, view(limits), request, call=None))  # type: ignore[arg-type]
    return err.value
