"""services/arbiter.py: the arbiter `bentoml serve` makes checks for dead workers every runner.respawn_check_s."""
from __future__ import annotations

import pytest
from circus.arbiter import Arbiter

from triserve.services.arbiter import respawn_promptly


@pytest.fixture(autouse=True)
def _restore_circus(monkeypatch):
    monkeypatch.setattr(Arbiter, "__init__", Arbiter.__init__)  # put back after each test


def _arbiter(check_delay: float) -> Arbiter:
    return Arbiter([], "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", check_delay=check_delay)


def test_the_check_period_is_capped():
    respawn_promptly(1.0)
    arbiter = _arbiter(10)  # BentoML's create_standalone_arbiter passes 10
    assert arbiter.check_delay == 1.0
    assert arbiter.ctrl.check_delay == 1000  # the controller runs the periodic check, in ms
    assert _arbiter(0.25).check_delay == 0.25  # a shorter period stays


def test_bentoml_s_own_arbiter_gets_it():
    from bentoml._internal.utils.circus import create_standalone_arbiter

    respawn_promptly(1.0)
    arbiter = create_standalone_arbiter([])
    assert arbiter.check_delay == 1.0 and arbiter.ctrl.check_delay == 1000


def test_applying_again_replaces_the_period_instead_of_stacking():
    respawn_promptly(0.5)
    respawn_promptly(2.0)
    assert _arbiter(10).check_delay == 2.0


def test_the_gateway_applies_it_in_the_arbiter(monkeypatch):
    from bentoml._internal.utils.circus import create_standalone_arbiter

    from triserve.configs.settings import get_settings
    from triserve.services.gateway import Gateway

    monkeypatch.setattr(get_settings().runner, "respawn_check_s", 0.75)
    Gateway.inner._respawn_promptly()  # what BentoML's serve_http runs before it makes the arbiter
    assert create_standalone_arbiter([]).check_delay == 0.75
