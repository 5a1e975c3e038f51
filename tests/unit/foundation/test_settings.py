from __future__ import annotations

import pytest

from streamapp.settings import SettingsError, StreamappSettings


def test_env_overrides_code_defaults_and_round_trips() -> None:
    base = StreamappSettings(capacity=2, num_standby_replicas=1)
    env = {"STREAMAPP_CAPACITY": "4", "STREAMAPP_RACK": "rack-b", "STREAMAPP_HOST": "host-x"}
    settings = base.with_env(env)
    assert (settings.capacity, settings.rack, settings.host) == (4, "rack-b", "host-x")
    assert settings.num_standby_replicas == 1
    assert StreamappSettings().with_env(settings.to_env()) == settings


def test_bad_values_name_the_variable() -> None:
    with pytest.raises(SettingsError, match="STREAMAPP_CAPACITY='many'"):
        StreamappSettings().with_env({"STREAMAPP_CAPACITY": "many"})
    with pytest.raises(SettingsError, match="capacity must be at least 1, got 0"):
        StreamappSettings().with_env({"STREAMAPP_CAPACITY": "0"})
    with pytest.raises(SettingsError, match="acceptable_recovery_lag"):
        StreamappSettings(acceptable_recovery_lag=-1)
