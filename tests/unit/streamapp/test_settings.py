from __future__ import annotations

import pytest

from streamapp.settings import SettingsError, StreamappSettings
from tests.paths import DOCS


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


# -- one precedence rule: worker option > STREAMAPP_* variable > App keyword > default --

import argparse  # noqa: E402

from streamapp.settings import (  # noqa: E402
    SETTINGS,
    add_setting_options,
    options_from_args,
    resolve,
)


def test_each_layer_overrides_the_one_below() -> None:
    name = "num_standby_replicas"
    assert resolve({}, env={}, options={}).num_standby_replicas == 1  # the default
    assert resolve({name: 2}, env={}, options={}).num_standby_replicas == 2
    env = {"STREAMAPP_NUM_STANDBY_REPLICAS": "3"}
    assert resolve({name: 2}, env=env, options={}).num_standby_replicas == 3
    assert resolve({name: 2}, env=env, options={name: 4}).num_standby_replicas == 4
    # None and "" are "not given", at every layer.
    assert resolve({name: None}, env={"STREAMAPP_NUM_STANDBY_REPLICAS": ""}).num_standby_replicas


#: setting -> (worker options, a value of its variable, what the options give)
SAMPLES: dict[str, tuple[list[str], str, object]] = {
    "client_id": (["--client-id", "w9"], "w8", "w9"),
    "host": (["--host", "h9"], "h8", "h9"),
    "rack": (["--rack", "r9"], "r8", "r9"),
    "capacity": (["--capacity", "9"], "8", 9),
    "num_standby_replicas": (["--num-standby-replicas", "9"], "8", 9),
    "acceptable_recovery_lag": (["--acceptable-recovery-lag", "9"], "8", 9),
    "max_warmup_replicas": (["--max-warmup-replicas", "9"], "8", 9),
    "probing_rebalance_interval_s": (["--probing-rebalance-interval-s", "9"], "8", 9.0),
    "create_source_topics": (["--create-topics"], "false", True),
    "bad_record_policy": (["--bad-record-policy", "fail"], "dead-letter", "fail"),
    "dead_letter_topic": (["--dead-letter-topic", "t9"], "t8", "t9"),
    "static_membership": (["--no-static-membership"], "true", False),
    "leave_group_on_stop": (["--no-leave-group-on-stop"], "true", False),
    "rebalance_protocol": (["--rebalance-protocol", "eager"], "cooperative", "eager"),
    "eos_pending_writes_max_bytes": (["--eos-pending-writes-max-bytes", "9"], "8", 9),
}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_is_an_option_a_variable_and_a_keyword(setting: object) -> None:
    from streamapp.settings import Setting

    assert isinstance(setting, Setting)
    parser = argparse.ArgumentParser()
    add_setting_options(parser)
    argv, env_value, expected = SAMPLES[setting.name]
    options = options_from_args(parser.parse_args(argv))
    assert set(options) == {setting.name}
    env = {setting.env: env_value}
    got = getattr(resolve({}, env=env, options=options), setting.name)
    assert getattr(got, "value", got) == expected  # the option beats the variable
    from_env = getattr(resolve({}, env=env, options={}), setting.name)
    keyword = getattr(resolve({setting.name: from_env}, env={}, options={}), setting.name)
    assert keyword == from_env  # a keyword takes what the variable gives


def test_a_bad_value_names_where_it_came_from() -> None:
    with pytest.raises(SettingsError, match=r"^--max-warmup-replicas -1: max_warmup_replicas"):
        resolve({}, env={}, options={"max_warmup_replicas": -1})
    with pytest.raises(SettingsError, match=r"^STREAMAPP_CAPACITY='0': capacity must be"):
        resolve({}, env={"STREAMAPP_CAPACITY": "0"}, options={})
    with pytest.raises(SettingsError, match=r"^App\(probing_rebalance_interval_s=0\)"):
        resolve({"probing_rebalance_interval_s": 0}, env={}, options={})


def test_the_settings_reference_lists_every_setting_once() -> None:

    doc = (DOCS / "settings.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    for setting in SETTINGS:
        row = [r for r in rows if r.startswith(f"| `{setting.name}`")]
        assert len(row) == 1, setting.name
        assert f"`{setting.option}`" in row[0] and f"`{setting.env}`" in row[0], setting.name
        assert setting.shown_default in row[0], setting.name


def test_the_rebalance_protocol_is_cooperative_unless_asked_and_refuses_others() -> None:
    from streamapp.settings import RebalanceProtocol, SettingsError

    assert resolve({}, env={}, options={}).rebalance_protocol is RebalanceProtocol.COOPERATIVE
    # Eager stays selectable at every layer.
    chosen = resolve({"rebalance_protocol": "eager"}, env={}, options={})
    assert chosen.rebalance_protocol is RebalanceProtocol.EAGER
    from_env = resolve({}, env={"STREAMAPP_REBALANCE_PROTOCOL": "eager"}, options={})
    assert from_env.rebalance_protocol is RebalanceProtocol.EAGER
    from_option = resolve({}, env={}, options={"rebalance_protocol": "eager"})
    assert from_option.rebalance_protocol is RebalanceProtocol.EAGER
    with pytest.raises(SettingsError, match="STREAMAPP_REBALANCE_PROTOCOL='sticky'"):
        resolve({}, env={"STREAMAPP_REBALANCE_PROTOCOL": "sticky"}, options={})
    with pytest.raises(SettingsError, match="rebalance_protocol must be one of eager, coop"):
        resolve({"rebalance_protocol": "sticky"}, env={}, options={})


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_is_an_app_keyword_that_the_app_takes(setting: object) -> None:
    """An App keyword Faust does not know is taken silently into its own options: a setting
    missing from App's keywords was ignored without a word (rebalance_protocol was)."""
    import inspect

    from streamapp.app import App
    from streamapp.settings import Setting

    assert isinstance(setting, Setting)
    assert setting.name in inspect.signature(App.__init__).parameters
    _, env_value, _ = SAMPLES[setting.name]
    value = getattr(resolve({}, env={setting.env: env_value}, options={}), setting.name)
    app = App(f"keyword-{setting.name}", **{setting.name: value})
    assert getattr(app.streamapp_settings, setting.name) == value
