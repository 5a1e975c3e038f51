"""streamapp's own worker settings, beside Faust's `app.conf`.

They reach a worker process through ``STREAMAPP_*`` environment variables, which the
``streamapp worker`` command sets from its options before the user's app module is imported;
values given to `streamapp.App(...)` in code are the defaults those variables override.
Names follow Kafka Streams where it has one (``num.standby.replicas``,
``acceptable.recovery.lag``, ``max.warmup.replicas``, ``probing.rebalance.interval.ms``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum

from streamapp.bad_records import BadRecordPolicy

ENV_PREFIX = "STREAMAPP_"


class SettingsError(ValueError):
    """A streamapp setting has a value it cannot take."""


@dataclass(frozen=True)
class StreamappSettings:
    client_id: str | None = None
    host: str = socket.gethostname()
    rack: str | None = None
    capacity: int = 1
    num_standby_replicas: int = 1
    acceptable_recovery_lag: int = 10_000
    max_warmup_replicas: int = 2
    probing_rebalance_interval_s: float = 30.0
    # Off by default, as Kafka Streams has it: a missing source topic is more often a typo or
    # a wrong cluster than a topic nobody made yet, and a topic created by mistake stays.
    create_source_topics: bool = False
    # What a record that cannot be decoded, or whose processing raises, does (see
    # streamapp.bad_records). Skip by default, not Kafka Streams' fail: under Faust, failing
    # crashes the agent, which restarts after a pause and goes on after the record anyway.
    bad_record_policy: BadRecordPolicy = BadRecordPolicy.SKIP
    # The topic dead letters go to; None for "<app id>-dead-letters".
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.bad_record_policy, BadRecordPolicy):
            # `App(bad_record_policy="dead-letter")` passes the name.
            try:
                policy = BadRecordPolicy(self.bad_record_policy)
            except ValueError:
                raise SettingsError(
                    f"bad_record_policy must be one of {', '.join(BadRecordPolicy)}, "
                    f"got {self.bad_record_policy!r}"
                ) from None
            object.__setattr__(self, "bad_record_policy", policy)
        if self.dead_letter_topic is not None and not self.dead_letter_topic.strip():
            raise SettingsError("dead_letter_topic must not be empty")
        if self.capacity < 1:
            raise SettingsError(f"capacity must be at least 1, got {self.capacity}")
        for name in ("num_standby_replicas", "acceptable_recovery_lag", "max_warmup_replicas"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.probing_rebalance_interval_s <= 0:
            raise SettingsError(
                "probing_rebalance_interval_s must be positive, "
                f"got {self.probing_rebalance_interval_s}"
            )

    def with_env(self, env: Mapping[str, str] | None = None) -> StreamappSettings:
        """These settings with any ``STREAMAPP_<NAME>`` variables of ``env`` applied."""
        env = os.environ if env is None else env
        changes: dict[str, object] = {}
        for name, convert in _CONVERTERS.items():
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is None or raw == "":
                continue
            try:
                changes[name] = convert(raw)
            except ValueError:
                choices = (
                    f" (one of {', '.join(convert)})"
                    if isinstance(convert, type) and issubclass(convert, Enum)
                    else ""
                )
                raise SettingsError(
                    f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {convert.__name__}{choices}"
                ) from None
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The environment variables that carry these settings into a worker process."""
        env = {}
        for name in _CONVERTERS:
            value = getattr(self, name)
            if value is not None:
                env[ENV_PREFIX + name.upper()] = str(value)
        return env


def boolean(raw: str) -> bool:
    """A yes/no setting as an environment variable spells it (``true``/``false``, ``1``/``0``)."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


_CONVERTERS: dict[str, Callable[[str], object]] = {
    "client_id": str,
    "host": str,
    "rack": str,
    "capacity": int,
    "num_standby_replicas": int,
    "acceptable_recovery_lag": int,
    "max_warmup_replicas": int,
    "probing_rebalance_interval_s": float,
    "create_source_topics": boolean,
    "bad_record_policy": BadRecordPolicy,
    "dead_letter_topic": str,
}
