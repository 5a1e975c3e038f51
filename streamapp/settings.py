"""streamapp's own worker settings, beside Faust's `app.conf`, and the one rule that sets them.

Every setting can be given three ways, and where more than one is given the first of these wins:

1. a ``streamapp worker`` option (``--num-standby-replicas 2``): this worker only;
2. a ``STREAMAPP_<NAME>`` environment variable (``STREAMAPP_NUM_STANDBY_REPLICAS=2``);
3. an ``App(...)`` keyword in the app's code (``App("myapp", num_standby_replicas=2)``);

else the default. `resolve` is where that rule lives; `SETTINGS` is the one list of the
settings, from which the worker's options, the environment variables and docs/settings.md's
table follow. Names follow Kafka Streams where it has one (``num.standby.replicas``,
``acceptable.recovery.lag``, ``max.warmup.replicas``, ``probing.rebalance.interval.ms``).
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum, StrEnum

from streamapp.bad_records import BadRecordPolicy

ENV_PREFIX = "STREAMAPP_"


class SettingsError(ValueError):
    """A streamapp setting has a value it cannot take."""


class RebalanceProtocol(StrEnum):
    """How a worker goes through a rebalance of its group.

    ``eager``: it gives up every partition before it rejoins (aiokafka's and Faust's way).
    ``cooperative`` (KIP-429): it keeps what it owns through the rebalance and gives up only
    what the plan moves away from it, once every member of the group speaks cooperative.
    """

    EAGER = "eager"
    COOPERATIVE = "cooperative"


@dataclass(frozen=True)
class StreamappSettings:
    """streamapp's settings of one worker, as `resolve` settled them (``app.streamapp_settings``).

    Each field is an `App` keyword of the same name, a ``streamapp worker`` option and a
    ``STREAMAPP_<NAME>`` variable; docs/settings.md says what each does. An enum field also
    takes its value's name (``rebalance_protocol="eager"``).

    Raises:
        SettingsError: A value out of range (a capacity below 1, a negative count, a
            non-positive interval, an empty dead-letter topic, an unknown enum name).
    """

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
    # On by default: a worker restarted on its data dir (a crash, a deploy) takes its place
    # back at once instead of the group waiting out the old member's session timeout, and the
    # id it joins under (its client id) is already unique per worker.
    static_membership: bool = True
    # On by default: a worker stopped for good (scale-in) hands its partitions over at once.
    # Off, a static member's stop keeps its place for the session timeout, as Kafka Streams'
    # does: a rolling restart then causes no rebalance of the other workers.
    leave_group_on_stop: bool = True
    # Cooperative by default: a rebalance stops only the partitions that move. Safe
    # in a group with eager members (an older streamapp, or `eager` chosen): the leader plans
    # eagerly, and every member behaves eagerly, until every member speaks cooperative.
    rebalance_protocol: RebalanceProtocol = RebalanceProtocol.COOPERATIVE
    # Under exactly_once a table's writes wait in memory until their transaction commits; past
    # this much the worker commits early. Kafka Streams' statestore.uncommitted.max.bytes
    # (KIP-892) has the same default.
    eos_pending_writes_max_bytes: int = 64 * 1024 * 1024

    def _as_enum(self, name: str, kind: type[StrEnum]) -> None:
        """Setting ``name`` as a member of ``kind``, given a member or its name."""
        value = getattr(self, name)
        if isinstance(value, kind):
            return
        try:
            member = kind(value)
        except ValueError:
            raise SettingsError(f"{name} must be one of {', '.join(kind)}, got {value!r}") from None
        object.__setattr__(self, name, member)

    def __post_init__(self) -> None:
        # `App(bad_record_policy="dead-letter")` and the like pass the name.
        self._as_enum("rebalance_protocol", RebalanceProtocol)
        self._as_enum("bad_record_policy", BadRecordPolicy)
        if self.dead_letter_topic is not None and not self.dead_letter_topic.strip():
            raise SettingsError("dead_letter_topic must not be empty")
        if self.capacity < 1:
            raise SettingsError(f"capacity must be at least 1, got {self.capacity}")
        for name in ("num_standby_replicas", "acceptable_recovery_lag", "max_warmup_replicas"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.eos_pending_writes_max_bytes < 1:
            raise SettingsError(
                "eos_pending_writes_max_bytes must be at least 1, "
                f"got {self.eos_pending_writes_max_bytes}"
            )
        if self.probing_rebalance_interval_s <= 0:
            raise SettingsError(
                "probing_rebalance_interval_s must be positive, "
                f"got {self.probing_rebalance_interval_s}"
            )

    def with_env(self, env: Mapping[str, str] | None = None) -> StreamappSettings:
        """These settings with any ``STREAMAPP_<NAME>`` variables of ``env`` applied."""
        return replace(self, **_env_values(os.environ if env is None else env))  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The environment variables that carry these settings into a worker process."""
        env = {}
        for name in BY_NAME:
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


@dataclass(frozen=True)
class Setting:
    """One streamapp setting: its name (the `App` keyword), how a string becomes its value."""

    name: str
    convert: Callable[[str], object]
    help: str
    #: The worker option, when it is not ``--`` + the name with dashes.
    flag: str | None = None
    metavar: str | None = None
    #: The default in words, where the value alone would not say it.
    default_text: str | None = None

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def default(self) -> object:
        return _DEFAULTS[self.name]

    @property
    def shown_default(self) -> str:
        """The default as the help and docs/settings.md say it."""
        if self.default_text is not None:
            return self.default_text
        default = self.default
        if isinstance(default, Enum):
            return str(default.value)
        if default is None:
            return "none"
        return str(default).lower() if isinstance(default, bool) else str(default)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "client_id",
        str,
        "this worker's identity across restarts; its local state and tasks follow it",
        metavar="ID",
        default_text="created once and kept in the data dir",
    ),
    Setting(
        "host",
        str,
        "placement domain: standbys go to another host than the active",
        default_text="this machine's hostname",
    ),
    Setting("rack", str, "wider placement domain: standbys on another rack first, else host"),
    Setting("capacity", int, "this worker's relative share of work (at least 1)", metavar="N"),
    Setting(
        "num_standby_replicas",
        int,
        "standby replicas kept of each table partition, on other workers",
        metavar="N",
    ),
    Setting(
        "acceptable_recovery_lag",
        int,
        "changelog records a worker may be behind and still take over a task at once; "
        "further behind, it warms up first",
        metavar="RECORDS",
    ),
    Setting(
        "max_warmup_replicas",
        int,
        "warmup replicas one rebalance may start (state copied before a task moves)",
        metavar="N",
    ),
    Setting(
        "probing_rebalance_interval_s",
        float,
        "seconds between follow-up rebalances while warmups catch up",
        metavar="SECONDS",
    ),
    Setting(
        "create_source_topics",
        boolean,
        "create missing source topics with the partition counts the app declares; off, a "
        "missing source topic refuses the start, naming the `streamapp topics create` command",
        flag="--create-topics",
    ),
    Setting(
        "bad_record_policy",
        BadRecordPolicy,
        "what a record that cannot be decoded, or whose processing raises, does: skip it with "
        "a warning, send it to the dead-letter topic, or fail (Faust's way: the agent crashes "
        "and restarts)",
    ),
    Setting(
        "dead_letter_topic",
        str,
        "where dead letters go",
        metavar="TOPIC",
        default_text="<app id>-dead-letters",
    ),
    Setting(
        "static_membership",
        boolean,
        "join the group as a static member (KIP-345) whose group.instance.id is the client id: "
        "a restart within the session timeout takes its partitions back without a rebalance, "
        "a stop (Ctrl-C, SIGTERM) still hands them over at once; Faust's "
        "consumer_group_instance_id, when the app sets it, is used instead",
    ),
    Setting(
        "leave_group_on_stop",
        boolean,
        "a stop (Ctrl-C, SIGTERM) leaves the group, so the others take this worker's "
        "partitions at once; --no-leave-group-on-stop keeps a static member's place for the "
        "session timeout instead, so a restart within it (a rolling restart) causes no "
        "rebalance of the other workers",
    ),
    Setting(
        "rebalance_protocol",
        RebalanceProtocol,
        "how this worker goes through a rebalance: cooperative (KIP-429: keeps what it owns "
        "and gives up only what moves, once every member of the group speaks cooperative) or "
        "eager (gives up every partition first)",
    ),
    Setting(
        "eos_pending_writes_max_bytes",
        int,
        "under exactly_once, the memory a worker's table writes may take while they wait for "
        "their transaction's commit (key and value bytes and about 100 bytes a key); past it "
        "the worker commits early, before its commit interval",
        metavar="BYTES",
        default_text="67108864 (64 MiB)",
    ),
)

_DEFAULTS: dict[str, object] = {f.name: f.default for f in fields(StreamappSettings)}
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

# The options of the `streamapp worker` of this process, set before the app module is imported
# (an `App` resolves its settings as it is created; see `use_worker_options`).
_worker_options: dict[str, object] = {}


def use_worker_options(options: Mapping[str, object]) -> None:
    """Make ``options`` (setting name -> value) this process's worker options for `resolve`."""
    _worker_options.clear()
    _worker_options.update(options)


def resolve(
    keywords: Mapping[str, object] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    options: Mapping[str, object] | None = None,
) -> StreamappSettings:
    """The settings: worker option, else ``STREAMAPP_*`` variable, else App keyword, else default.

    A value ``None`` counts as not given.

    Args:
        keywords: What the app's code gave `App(...)`.
        env: The environment (default ``os.environ``).
        options: The worker's options (default: this process's, see `use_worker_options`).

    Returns:
        The settings every layer together gives.

    Raises:
        SettingsError: A name that is not a streamapp setting, or a value a setting cannot
            take, naming where it came from (the option, variable or keyword).
    """
    given_options = dict(_worker_options if options is None else options)
    environ = os.environ if env is None else env
    layers: list[tuple[Mapping[str, object], Callable[[Setting, object], str]]] = [
        (keywords or {}, lambda s, v: f"App({s.name}={v!r})"),
        (_env_values(environ), lambda s, v: f"{s.env}={environ[s.env]!r}"),
        (given_options, lambda s, v: f"{s.option} {v}"),
    ]
    values: dict[str, object] = {}
    for layer, where in layers:  # lowest first: each later layer overrides
        for name, value in layer.items():
            if value is None:
                continue
            setting = BY_NAME.get(name)
            if setting is None:
                raise SettingsError(f"{name!r} is not a streamapp setting")
            try:
                StreamappSettings(**{name: value})  # type: ignore[arg-type]
            except SettingsError as exc:
                raise SettingsError(f"{where(setting, value)}: {exc}") from None
            values[name] = value
    return StreamappSettings(**values)  # type: ignore[arg-type]


def _env_values(env: Mapping[str, str]) -> dict[str, object]:
    """The settings ``env`` gives, converted (`SettingsError` naming a variable that won't)."""
    values: dict[str, object] = {}
    for setting in SETTINGS:
        raw = env.get(setting.env)
        if raw is None or raw == "":
            continue
        convert = setting.convert
        try:
            values[setting.name] = convert(raw)
        except ValueError:
            choices = (
                f" (one of {', '.join(convert)})"
                if isinstance(convert, type) and issubclass(convert, Enum)
                else ""
            )
            raise SettingsError(
                f"{setting.env}={raw!r} is not a valid {convert.__name__}{choices}"
            ) from None
    return values


def add_setting_options(
    parser: argparse.ArgumentParser, names: Iterable[str] | None = None, *, app: bool = True
) -> None:
    """Add an option for each setting in ``names`` (default: all), documented alike.

    ``app``: the command runs an app, whose ``App(...)`` keywords come between the environment
    and the default (`streamapp group` runs none: give it what the app sets).
    """
    for name in names if names is not None else BY_NAME:
        setting = BY_NAME[name]
        help_text = (
            f"{setting.help} (env {setting.env}; "
            + (f"else the app's {name}=; " if app else "")
            + f"default: {setting.shown_default})"
        )
        kwargs: dict[str, object] = {"dest": name, "default": None, "help": help_text}
        if setting.convert is boolean:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif isinstance(setting.convert, type) and issubclass(setting.convert, Enum):
            kwargs["choices"] = [member.value for member in setting.convert]
        else:
            kwargs["type"] = setting.convert
            kwargs["metavar"] = setting.metavar or name.split("_")[-1].upper()
        parser.add_argument(setting.option, **kwargs)  # type: ignore[arg-type]


def options_from_args(args: argparse.Namespace) -> dict[str, object]:
    """The settings the command line gave (options not given are left out)."""
    return {
        s.name: getattr(args, s.name) for s in SETTINGS if getattr(args, s.name, None) is not None
    }
