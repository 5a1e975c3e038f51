"""The check, at import, that the private names of a library streamapp relies on still exist.

A module that builds on a library's internals (aiokafka's group coordinator, its producer's
batches) lists each name it relies on, by class, and runs `check` as it is imported: an
installed release outside the range the module was checked against, or a listed name that is
gone, stops the worker with one line naming what changed, rather than letting an override of
a renamed method go uncalled. ``STREAMAPP_SKIP_FAUST_CHECK=1`` skips the check, to try another
release at one's own risk.

A name counts as present (`has_name`) if it is an attribute of the class, or if the code of
the class or one of its bases reads, sets or deletes ``self.<name>``: most of the internals
are instance attributes set in ``__init__``.
"""

from __future__ import annotations

import dis
import importlib
import inspect
import os
import re
from collections.abc import Iterator, Mapping
from importlib import metadata
from types import CodeType, FunctionType

#: ``module:Class`` -> the private names relied on, on it or on its instances.
Names = Mapping[str, tuple[str, ...]]
#: distribution -> (the lowest release allowed, the first release not allowed), e.g.
#: ``{"aiokafka": ((0, 14), (0, 15))}`` for ``>=0.14,<0.15``.
Ranges = Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]]

#: The variable that skips every check of this kind.
SKIP_VARIABLE = "STREAMAPP_SKIP_FAUST_CHECK"


class LibraryMismatchError(ImportError):
    """The installed library is not one a module of streamapp was written against."""


#: Bytecode that reads, calls, sets or deletes an attribute of the object just loaded.
_ATTRIBUTE_OPS = frozenset({"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR"})
#: Bytecode that loads a local or closure variable (``self`` in a method or in a closure);
#: later CPythons add variants (LOAD_FAST_CHECK, LOAD_FAST_LOAD_FAST, LOAD_FAST_BORROW, ...).
_LOAD_VARIABLE = ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_CLASSDEREF")
#: Where a descriptor keeps its functions: staticmethod, classmethod, property, wraps.
_FUNCTION_SLOTS = ("__func__", "fget", "fset", "fdel", "func", "__wrapped__")


def _code_objects(cls: type) -> Iterator[CodeType]:
    """The code of every function defined in ``cls`` and its bases, nested code included
    (closures, comprehensions), functions held by descriptors too (property, classmethod,
    mode's cached_property, which keeps them in its ``__dict__``)."""
    for klass in cls.__mro__:
        for value in vars(klass).values():
            todo = [
                code
                for held in _held_functions(value)
                if isinstance(code := getattr(held, "__code__", None), CodeType)
            ]
            while todo:
                code = todo.pop()
                yield code
                todo.extend(c for c in code.co_consts if isinstance(c, CodeType))


def _held_functions(value: object) -> list[object]:
    """A class attribute and what it holds that may be a function."""
    if isinstance(value, type):
        return []  # a nested class: its code is its own
    held = [value]
    try:
        held += [getattr(value, slot, None) for slot in _FUNCTION_SLOTS]
        if not isinstance(value, FunctionType):
            held += list(vars(value).values())
    except Exception:  # an attribute that is no plain object (a proxy) holds no code of ours
        pass
    return held


def has_name(cls: type, name: str) -> bool:
    """True if ``name`` is an attribute of ``cls``, or the code of ``cls`` or one of its bases
    reads, sets or deletes ``self.<name>`` (an instance attribute, set in ``__init__`` or
    elsewhere).

    Read from the compiled code, not the source: ``inspect.getsource`` parses each class's
    whole module again (about 1.5 s of every worker's import for these names); the bytecode
    is already in memory, and a name only in a comment or a string does not count.
    """
    if hasattr(cls, name):
        return True
    for code in _code_objects(cls):
        if name not in code.co_names:  # most code never names it: no need to disassemble
            continue
        self_loaded = False  # the instruction before loaded ``self``
        for instruction in dis.get_instructions(code):
            if self_loaded and instruction.opname in _ATTRIBUTE_OPS and instruction.argval == name:
                return True
            self_loaded = _loads_self(instruction)
    return False


def _loads_self(instruction: dis.Instruction) -> bool:
    if not instruction.opname.startswith(_LOAD_VARIABLE):
        return False
    loaded = instruction.argval
    if isinstance(loaded, tuple):  # LOAD_FAST_LOAD_FAST (3.13): the second one is on top
        loaded = loaded[-1]
    return bool(loaded == "self")


def name_problems(names: Names) -> list[str]:
    """Each listed class that is gone, or lacks some of its listed names."""
    found: list[str] = []
    for owner, attrs in names.items():
        cls = _class(owner)
        if cls is None:
            found.append(f"{owner} no longer exists")
            continue
        missing = [name for name in attrs if not has_name(cls, name)]
        if missing:
            found.append(f"{owner} has no {', '.join(missing)}")
    return found


def _class(owner: str) -> type | None:
    module_name, _, class_name = owner.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return None
    return cls if isinstance(cls, type) else None


def keyword_problems(keywords: Names) -> list[str]:
    """Each listed callable that is gone, or lacks some of the keywords: ``module:Class`` for
    its constructor, ``module:Class.method`` for a method."""
    found: list[str] = []
    for owner, names in keywords.items():
        module_name, _, qualified = owner.partition(":")
        class_name, _, method = qualified.partition(".")
        cls = _class(f"{module_name}:{class_name}")
        called = getattr(cls, method or "__init__", None) if cls is not None else None
        if called is None:
            found.append(f"{owner} no longer exists")
            continue
        parameters = inspect.signature(called).parameters
        missing = [name for name in names if name not in parameters]
        if missing:
            found.append(f"{owner}() takes no {', '.join(missing)}")
    return found


def release(version: str) -> tuple[int, ...]:
    """``(0, 14, 0)`` from ``"0.14.0"`` (or ``"0.14.0rc1"``, ``"0.14.0.post1"``)."""
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers else ()


def range_text(lowest: tuple[int, ...], below: tuple[int, ...]) -> str:
    """``">=0.14,<0.15"``."""
    return f">={'.'.join(map(str, lowest))},<{'.'.join(map(str, below))}"


def version_problems(ranges: Ranges) -> list[str]:
    """Each distribution not installed, or installed at a release outside its range."""
    found: list[str] = []
    for dist, (lowest, below) in ranges.items():
        wanted = range_text(lowest, below)
        try:
            installed = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found.append(f"{dist} is not installed (streamapp needs {wanted})")
            continue
        if not lowest <= release(installed) < below:
            found.append(f"{dist} {installed} is installed, streamapp needs {wanted}")
    return found


def check(who: str, names: Names, ranges: Ranges, *, keywords: Names | None = None) -> None:
    """Raise `LibraryMismatchError` (one line) unless the releases are in their ranges, every
    listed name exists and every listed constructor takes its keywords. ``who`` names the
    module relying on them."""
    if os.environ.get(SKIP_VARIABLE) == "1":
        return
    found = version_problems(ranges) + name_problems(names) + keyword_problems(keywords or {})
    if found:
        raise LibraryMismatchError(
            f"{who} cannot run on the installed releases: "
            + "; ".join(found)
            + f" (install releases in the ranges pyproject.toml names, or set {SKIP_VARIABLE}=1)"
        )
