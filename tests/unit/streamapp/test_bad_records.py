"""The bad-record policy: its setting, the log lines, dead-letter headers, counts, and the guards
around Faust's decoder and agent function (no broker: Faust objects used without a worker)."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, cast

import faust
import pytest
from aiokafka.errors import KafkaTimeoutError
from faust.exceptions import ImproperlyConfigured, KeyDecodeError, ValueDecodeError
from faust.types import TP, Message

from streamapp import App
from streamapp.bad_records import (
    HEADER_PREFIX,
    Agent,
    BadRecord,
    BadRecordCounts,
    BadRecordPolicy,
    Stage,
    Topic,
    dead_letter_headers,
    default_dead_letter_topic,
    error_text,
    guard_agent_fun,
    handle_record_error,
    is_record_error,
)
from streamapp.ops.web import assignment_view
from streamapp.preflight import WorkerSetupError
from streamapp.settings import SettingsError, StreamappSettings
from streamapp.worker import add_worker_arguments, import_app

# -- the setting --


def test_policy_defaults_to_skip_and_takes_names() -> None:
    assert StreamappSettings().bad_record_policy is BadRecordPolicy.SKIP
    settings = StreamappSettings(bad_record_policy="dead-letter")  # type: ignore[arg-type]
    assert settings.bad_record_policy is BadRecordPolicy.DEAD_LETTER
    with pytest.raises(SettingsError, match="one of skip, dead-letter, fail, got 'drop'"):
        StreamappSettings(bad_record_policy="drop")  # type: ignore[arg-type]


def test_policy_from_the_environment_round_trips() -> None:
    env = {"STREAMAPP_BAD_RECORD_POLICY": "fail", "STREAMAPP_DEAD_LETTER_TOPIC": "dlq"}
    settings = StreamappSettings().with_env(env)
    assert settings.bad_record_policy is BadRecordPolicy.FAIL
    assert settings.dead_letter_topic == "dlq"
    assert StreamappSettings().with_env(settings.to_env()) == settings
    with pytest.raises(SettingsError, match=r"'dead_letter' is not a valid BadRecordPolicy \(one"):
        StreamappSettings().with_env({"STREAMAPP_BAD_RECORD_POLICY": "dead_letter"})


def test_app_keyword_and_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    app = App("bad-kw", datadir=str(tmp_path), bad_record_policy="dead-letter")
    assert app.streamapp_bad_records.policy is BadRecordPolicy.DEAD_LETTER
    assert app.streamapp_bad_records.dead_letter_topic_name == "bad-kw-dead-letters"
    monkeypatch.setenv("STREAMAPP_BAD_RECORD_POLICY", "fail")
    monkeypatch.setenv("STREAMAPP_DEAD_LETTER_TOPIC", "elsewhere")
    app = App("bad-env", datadir=str(tmp_path), bad_record_policy="dead-letter")
    assert app.streamapp_bad_records.policy is BadRecordPolicy.FAIL
    assert app.streamapp_bad_records.dead_letter_topic_name == "elsewhere"


def test_worker_option_takes_the_three_policies() -> None:
    parser = argparse.ArgumentParser()
    add_worker_arguments(parser)
    args = parser.parse_args(["-A", "m:app", "--bad-record-policy", "dead-letter"])
    assert args.bad_record_policy == "dead-letter"
    assert parser.parse_args(["-A", "m:app"]).bad_record_policy is None
    with pytest.raises(SystemExit):
        parser.parse_args(["-A", "m:app", "--bad-record-policy", "ignore"])


def test_a_bad_policy_in_the_environment_is_one_line_for_the_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "bad_policy_env_app.py").write_text("from streamapp import App\napp = App('x')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("STREAMAPP_BAD_RECORD_POLICY", "drop")
    with pytest.raises(WorkerSetupError) as refused:
        import_app("bad_policy_env_app:app")
    assert str(refused.value) == (
        "-A 'bad_policy_env_app:app': STREAMAPP_BAD_RECORD_POLICY='drop' is not a valid "
        "BadRecordPolicy (one of skip, dead-letter, fail)"
    )


# -- the pure part --


def _record(stage: Stage = Stage.VALUE_DECODE, error: BaseException | None = None) -> BadRecord:
    return BadRecord(
        "clicks", 3, 42, stage, error or ValueDecodeError("Expecting value: line 1 column 1")
    )


def test_error_text_is_one_bounded_line() -> None:
    assert error_text(ValueError("bad\nthing")) == "ValueError: bad thing"
    long = error_text(ValueError("x" * 1000), limit=50)
    assert len(long) == 50 and long.endswith("...")


def test_log_lines_name_topic_partition_offset_and_error() -> None:
    assert _record().skipped_line() == (
        "streamapp: skipped record clicks[3]@42: value cannot be decoded: "
        "ValueDecodeError: Expecting value: line 1 column 1 (bad_record_policy=skip)"
    )
    key = _record(Stage.KEY_DECODE, KeyDecodeError("bad key"))
    assert key.dead_lettered_line("app-dead-letters") == (
        "streamapp: record clicks[3]@42 sent to dead-letter topic app-dead-letters: "
        "key cannot be decoded: KeyDecodeError: bad key"
    )
    raised = BadRecord("clicks", 0, 7, Stage.PROCESSING, ZeroDivisionError("division"), "count")
    assert "agent count raised ZeroDivisionError: division" in raised.failing_line()


def test_dead_letter_headers_keep_the_original_ones_and_name_the_error() -> None:
    record = BadRecord("clicks", 3, 42, Stage.PROCESSING, KeyError("k"), agent="count")
    headers = dead_letter_headers(record, [("trace", b"abc")])
    assert headers[0] == ("trace", b"abc")
    assert dict(headers[1:]) == {
        HEADER_PREFIX + "stage": b"processing",
        HEADER_PREFIX + "exception": b"builtins.KeyError",
        HEADER_PREFIX + "message": b"'k'",
        HEADER_PREFIX + "topic": b"clicks",
        HEADER_PREFIX + "partition": b"3",
        HEADER_PREFIX + "offset": b"42",
        HEADER_PREFIX + "agent": b"count",
    }
    # Faust may hand headers over as a mapping; an error's text is bounded.
    long = BadRecord("t", 0, 0, Stage.VALUE_DECODE, ValueDecodeError("y" * 5000))
    bounded = dict(dead_letter_headers(long, {"h": b"1"}))
    assert bounded["h"] == b"1"
    assert len(bounded[HEADER_PREFIX + "message"]) == 1000
    assert HEADER_PREFIX + "agent" not in bounded


def test_record_errors_are_not_those_of_the_cluster_the_app_or_the_process() -> None:
    assert is_record_error(ValueError("bad field"))
    assert is_record_error(ValueDecodeError("raised by the agent's own decoding"))
    assert not is_record_error(KafkaTimeoutError())
    assert not is_record_error(ImproperlyConfigured("no"))
    assert not is_record_error(MemoryError())
    assert not is_record_error(KeyboardInterrupt())


def test_counts_per_topic() -> None:
    counts = BadRecordCounts()
    assert counts.as_json() == {}
    counts.skipped("b")
    counts.skipped("b")
    counts.dead_lettered("a")
    assert counts.as_json() == {
        "a": {"skipped": 0, "dead_lettered": 1},
        "b": {"skipped": 2, "dead_lettered": 0},
    }
    assert default_dead_letter_topic("clicks") == "clicks-dead-letters"


# -- the agent guard --


class Poison(Exception):
    pass


#: The guard only hands the stream on; these agents never look at it.
NO_STREAM = cast(Any, object())


async def test_guard_calls_the_function_again_after_a_handled_error() -> None:
    records = iter(["a", "poison", "b", "poison", "c"])
    seen: list[str] = []
    handled: list[str] = []

    async def agent(stream: Any) -> None:
        for record in records:
            if record == "poison":
                raise Poison(record)
            seen.append(record)

    async def on_error(stream: Any, error: Exception) -> bool:
        handled.append(str(error))
        return True

    guarded = guard_agent_fun(agent, on_error)
    await cast(Awaitable[None], guarded(NO_STREAM))
    assert seen == ["a", "b", "c"]
    assert handled == ["poison", "poison"]
    # Agent.clone guards the guarded function again: the original, once.
    again = guard_agent_fun(guarded, on_error)
    assert again.__streamapp_unguarded__ is agent  # type: ignore[attr-defined]


async def test_guard_lets_an_unhandled_error_through() -> None:
    async def agent(stream: Any) -> None:
        raise Poison("fatal")

    async def on_error(stream: Any, error: Exception) -> bool:
        return False

    with pytest.raises(Poison, match="fatal"):
        await cast(Awaitable[None], guard_agent_fun(agent, on_error)(NO_STREAM))


async def test_guard_keeps_a_yielding_agent_yielding() -> None:
    records = iter([1, 0, 2, 0, 3])

    async def agent(stream: Any) -> AsyncIterator[float]:
        for record in records:
            yield 6 / record  # 0 raises ZeroDivisionError

    async def on_error(stream: Any, error: Exception) -> bool:
        return isinstance(error, ZeroDivisionError)

    result = cast(AsyncIterable[float], guard_agent_fun(agent, on_error)(NO_STREAM))
    assert [value async for value in result] == [6.0, 3.0, 2.0]


# -- Faust's decoder and agent, without a worker --


def _message(topic: str, key: bytes | None, value: bytes | None) -> Message:
    return Message(topic, 1, 17, 0.0, 0, [], key, value, None, tp=TP(topic, 1))


def _app(tmp_path: Path, policy: str) -> App:
    return App(f"bad-{policy}", datadir=str(tmp_path), bad_record_policy=policy)


async def test_undecodable_value_is_skipped_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = _app(tmp_path, "skip")
    topic = app.topic("events", key_type=str, key_serializer="raw", value_serializer="json")
    assert isinstance(topic, Topic)
    good = await topic.decode(_message("events", b"k", json.dumps({"n": 1}).encode()))
    assert good.value == {"n": 1}
    with caplog.at_level(logging.WARNING, logger="streamapp.bad_records"):
        # Faust's conductor decodes with propagate=True, then acks and calls the hooks.
        with pytest.raises(ValueDecodeError):
            await topic.decode(_message("events", b"k", b"{not json"), propagate=True)
        await topic.on_value_decode_error(ValueDecodeError("x"), _message("events", b"k", b""))
        assert await topic.decode(_message("events", b"k", b"")) is None
    assert [r.getMessage() for r in caplog.records] == [
        "streamapp: skipped record events[1]@17: value cannot be decoded: ValueDecodeError: "
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1) "
        "(bad_record_policy=skip)",
        "streamapp: skipped record events[1]@17: value cannot be decoded: ValueDecodeError: "
        "Expecting value: line 1 column 1 (char 0) (bad_record_policy=skip)",
    ]
    assert not topic.queue._errors  # nothing thrown into the agent's stream
    assert app.streamapp_bad_records.counts.as_json() == {
        "events": {"skipped": 2, "dead_lettered": 0}
    }


async def test_undecodable_key_is_a_bad_record_too(tmp_path: Path) -> None:
    app = _app(tmp_path, "skip")
    topic = app.topic("events", key_type=str, key_serializer="raw", value_serializer="json")
    with pytest.raises(KeyDecodeError):
        await topic.decode(_message("events", b"\xff\xfe", b"{}"), propagate=True)
    assert app.streamapp_bad_records.counts.as_json()["events"]["skipped"] == 1


async def test_fail_throws_into_the_stream_as_faust_does(tmp_path: Path) -> None:
    app = _app(tmp_path, "fail")
    topic = app.topic("events", value_serializer="json")
    assert await topic.decode(_message("events", None, b"{not json")) is None
    assert isinstance(topic.queue._errors[0], ValueDecodeError)
    assert app.streamapp_bad_records.counts.as_json() == {}


async def test_an_agent_hands_a_record_it_caught_to_the_policy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As a batch agent does: the record is skipped, logged and counted as a processing error.
    app = _app(tmp_path, "skip")
    message = _message("events", b"k", b"v")
    with caplog.at_level(logging.WARNING, logger="streamapp.bad_records"):
        assert await handle_record_error(app, message, Poison("bad value"), "sums") is True
    assert [r.getMessage() for r in caplog.records] == [
        "streamapp: skipped record events[1]@17: agent sums raised Poison: bad value "
        "(bad_record_policy=skip)"
    ]
    counts = app.streamapp_bad_records.counts
    assert counts.as_json() == {"events": {"skipped": 1, "dead_lettered": 0}}
    assert counts.by_stage == {("skipped", "events", "processing"): 1}


async def test_a_caught_record_under_fail_is_left_to_the_agent_to_raise(tmp_path: Path) -> None:
    app = _app(tmp_path, "fail")
    message = _message("events", b"k", b"v")
    assert await handle_record_error(app, message, Poison("bad"), "sums") is False
    assert app.streamapp_bad_records.counts.as_json() == {}
    # An app that is not a streamapp.App has no policy: Faust's way, the agent raises.
    faust_app = faust.App("plain", datadir=str(tmp_path / "plain"))
    assert await handle_record_error(faust_app, message, Poison("bad")) is False


def test_agents_are_guarded_and_the_view_reports_counts(tmp_path: Path) -> None:
    app = _app(tmp_path, "skip")

    @app.agent(app.topic("events"))
    async def count(stream: Any) -> None:
        async for _ in stream:
            pass

    assert isinstance(count, Agent)
    assert count.fun.__streamapp_unguarded__.__name__ == "count"  # type: ignore[attr-defined]
    clone = count.clone()
    assert clone.fun.__streamapp_unguarded__ is count.fun.__streamapp_unguarded__  # type: ignore[attr-defined]
    assert count.name.endswith("count")
    app.streamapp_bad_records.counts.skipped("events")

    class Runtime:  # the parts of standby's ReplicaRuntime the view reads
        share = None
        replica_lag: dict[Any, int] = {}
        replica_ends: dict[Any, int] = {}
        followup = type("F", (), {"coming": False})()
        history: list[Any] = []
        meter = type("M", (), {"rebalances": 0, "as_json": lambda self: {}})()

        def member(self) -> tuple[str, int]:
            return "m", 1

    app.streamapp_runtime = Runtime()  # type: ignore[attr-defined]
    view = assignment_view(app)
    assert view["bad_records"] == {"events": {"skipped": 1, "dead_lettered": 0}}
