"""The checks of a scenario's JSON fields: each names the field path of what it refuses.

Every check raises (or, `field_error`, returns) a `ScenarioError` whose message starts with the
field's path (``members.a.capacity: ...``). The ``all_plain_counts`` and ``partition_numbers``
fast paths check a whole list in C first and build a path only for an error: a thousand members
are parsed per plan.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, cast

from assignor.errors import ScenarioError


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def field_error(path: str, message: str) -> ScenarioError:
    return ScenarioError(f"{path}: {message}")


def as_mapping(value: object, path: str) -> Mapping[Any, Any]:
    if type(value) is dict:  # parsed JSON: skips the slower ABC check
        return value
    if not isinstance(value, Mapping):
        raise field_error(path, f"must be an object, got {type_name(value)}")
    return value


def as_list(value: object, path: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise field_error(path, f"must be a list, got {type_name(value)}")
    return value


def as_string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise field_error(path, f"must be a string, got {type_name(value)}")
    return value


def as_integer(value: object, path: str, *, minimum: int, what: str = "value") -> int:
    # bool is an int subclass in Python; JSON true is never a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise field_error(path, f"must be an integer, got {type_name(value)}")
    if value < minimum:
        raise field_error(path, f"{what} must be at least {minimum}, got {value}")
    return value


def partition_key(key: object, path: str) -> int:
    """Offsets are keyed by partition number; JSON makes that a string."""
    if isinstance(key, bool):
        raise field_error(path, f"partition must be an integer, got {key!r}")
    if isinstance(key, int):
        number = key
    elif isinstance(key, str):
        try:
            number = int(key, 10)
        except ValueError:
            raise field_error(path, f"partition must be an integer, got {key!r}") from None
    else:
        raise field_error(path, f"partition must be an integer, got {type_name(key)}")
    if number < 0:
        raise field_error(path, f"partition must be at least 0, got {number}")
    return number


def reject_unknown_keys(mapping: Mapping[Any, Any], allowed: frozenset[str], path: str) -> None:
    for key in mapping:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            raise field_error(where, "unknown key")


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


INT_ONLY = frozenset({int})
STR_ONLY = frozenset({str})


def all_plain_counts(values: Collection[object]) -> bool:
    """Every value a plain int >= 0: one type-set check and one min, both in C."""
    if not INT_ONLY.issuperset(map(type, values)):
        return False
    ints = cast("Collection[int]", values)  # every value is an int: checked just above
    return min(ints, default=0) >= 0


def partition_numbers(raw: object, path: str, topic: str) -> list[int] | tuple[int, ...]:
    """The partition list of ``path.topic``; the field path is only built to name an error."""
    if isinstance(raw, list | tuple) and all_plain_counts(raw):  # the fast, common case
        return raw
    where = join_path(path, topic)
    return [
        as_integer(p, f"{where}[{i}]", minimum=0, what="partition")
        for i, p in enumerate(as_list(raw, where))
    ]
