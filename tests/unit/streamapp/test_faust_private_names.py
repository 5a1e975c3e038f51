"""streamapp.private_names: the one place that names a private Faust or aiokafka name.

Checked three ways: the installed releases pass the import-time check; a missing name or another
release fails it with one line naming what changed; and no module outside the package names a
private attribute of Faust, aiokafka or mode, or overrides one in a subclass.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path

import pytest

import streamapp.private_names as private_names
from tests.paths import REPO_ROOT

#: Every package and directory of streamapp's own code (tests excluded: they may probe).
SCANNED = ("streamapp", "assignor", "tables", "standby", "examples", "bench")
#: Module -> the private names listed for it in streamapp.private_names.
ALLOWED = private_names.names_by_module()
#: The packages allowed aiokafka's internals, each with its own list and check: read by
#: tests/unit/streamapp/runtime/test_private_names.py.
AIOKAFKA_INTERNALS = (
    REPO_ROOT / "streamapp" / "runtime" / "group",
    REPO_ROOT / "streamapp" / "runtime" / "producer",
)
#: Benchmark modules allowed aiokafka's internals, each with its own list and check: read by
#: tests/unit/bench/test_offline_delivery.py.
BENCH_INTERNALS = (REPO_ROOT / "bench" / "lib" / "offline_delivery.py",)
THIRD_PARTY = ("faust", "aiokafka", "mode")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _third_party_private_names() -> set[str]:
    """Every single-underscore name Faust, aiokafka and mode define or read, from their source."""
    names: set[str] = set()
    for package in THIRD_PARTY:
        root = Path(importlib.import_module(package).__file__ or "").parent
        for path in root.rglob("*.py"):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and _private(node.attr):
                    names.add(node.attr)
                elif isinstance(
                    node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
                ) and _private(node.name):
                    names.add(node.name)
    return names


def _own_names(tree: ast.AST) -> set[str]:
    """Private names a module defines itself: functions, classes, ``x._name = ...`` targets."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute):
                    own.add(target.attr)
                elif isinstance(target, ast.Name):
                    own.add(target.id)
    return own


def _modules() -> list[Path]:
    found = []
    for top in SCANNED:
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            if not any(p in path.parents for p in AIOKAFKA_INTERNALS) and (
                path not in BENCH_INTERNALS
            ):
                found.append(path)
    return found


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_the_installed_releases_pass_the_check() -> None:
    assert private_names.problems(private_names.PRIVATE_NAMES, private_names.RELEASES) == []


def test_a_missing_name_or_another_release_fails_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        private_names,
        "PRIVATE_NAMES",
        {
            **private_names.PRIVATE_NAMES,
            "faust.transport.consumer:Consumer": {"_acked": "tests", "_gone": "tests"},
        },
    )
    monkeypatch.setattr(private_names, "RELEASES", {"aiokafka": ((0, 99), (0, 100))})
    monkeypatch.delenv("STREAMAPP_SKIP_FAUST_CHECK", raising=False)
    with pytest.raises(private_names.FaustCompatError) as raised:
        private_names.check()
    message = str(raised.value)
    assert "\n" not in message
    assert "faust.transport.consumer:Consumer has no _gone" in message
    assert "aiokafka 0.14.0 is installed, streamapp needs >=0.99,<0.100" in message
    assert "_acked" not in message


def test_no_module_names_a_private_faust_or_aiokafka_name_not_listed_for_it() -> None:
    theirs = _third_party_private_names()
    assert {"_acked", "_getmany", "_coordinator", "_dbs"} <= theirs  # the scan sees their code
    offenders: dict[str, list[str]] = {}
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _own_names(tree)
        used = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in theirs and node.attr not in own
        }
        unlisted = used - ALLOWED.get(_module_name(path), set())
        if unlisted:
            offenders[str(path.relative_to(REPO_ROOT))] = sorted(unlisted)
    assert offenders == {}, "private Faust/aiokafka names not listed for their module"


def test_every_listed_name_is_used_by_its_module() -> None:
    """A name listed for a module that no longer uses it is a stale entry: the list says why
    each name is needed, and a name no module needs is not."""
    theirs = _third_party_private_names()
    unused: dict[str, list[str]] = {}
    for module, names in ALLOWED.items():
        path = REPO_ROOT / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in theirs}
        used |= {
            n.name
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name in theirs
        }
        if names - used:
            unused[module] = sorted(names - used)
    assert unused == {}


def test_no_class_overrides_a_private_faust_or_aiokafka_name_not_listed_for_it() -> None:
    """A subclass of a Faust or aiokafka class neither overrides one of their private names nor
    reads or sets one on ``self`` (an attribute it sets under a name of theirs would clobber
    theirs), unless the name is listed for its module."""
    theirs = _third_party_private_names()
    offenders: list[str] = []
    for path in _modules():
        if "spark" in path.parts or path.name == "__main__.py":
            continue  # PySpark jobs, entry points: no Faust classes
        module_name = _module_name(path)
        allowed = ALLOWED.get(module_name, set())
        module = importlib.import_module(module_name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in THIRD_PARTY]
            if not bases:
                continue
            for name in vars(cls):
                if name in ("_abc_impl", "_tasks"):
                    # Set on every subclass by its metaclass: abc.ABCMeta's bookkeeping, and
                    # mode's Service's list of its background tasks.
                    continue
                if name in allowed:
                    continue
                if _private(name) and any(name in vars(b) for b in bases):
                    offenders.append(f"{module_name}.{cls.__qualname__}.{name} (override)")
            try:
                source = ast.parse(textwrap.dedent(inspect.getsource(cls)))
            except OSError:  # made by a function or a metaclass: no source of its own
                continue
            for node in ast.walk(source):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and node.attr in theirs
                    and node.attr not in vars(cls)  # its own method, under a name they use too
                    and node.attr not in allowed
                ):
                    offenders.append(f"{module_name}.{cls.__qualname__}: self.{node.attr}")
    assert sorted(set(offenders)) == [], "private Faust/aiokafka names not listed for their module"


class _Base:
    def __init__(self, value: int) -> None:
        self._set = value
        self._annotated: int = value
        self._called()
        del self._deleted
        other = _Other()
        other._elsewhere = value  # on another object, not on self
        # self._in_a_comment = value
        self.note = "self._in_a_string = value"

    def _called(self) -> None:
        print([self._in_a_comprehension for _ in range(1)], lambda: self._in_a_closure)

    @property
    def shown(self) -> object:
        return self._in_a_property


class _Other:
    pass


class _Sub(_Base):
    pass


@pytest.mark.parametrize(
    "name",
    [
        "_set",
        "_annotated",
        "_called",
        "_deleted",
        "_in_a_comprehension",
        "_in_a_closure",
        "_in_a_property",
    ],
)
def test_a_name_the_code_of_a_class_or_a_base_uses_on_self_is_found(name: str) -> None:
    assert private_names._has_name(_Sub, name)


@pytest.mark.parametrize("name", ["_elsewhere", "_in_a_comment", "_in_a_string", "_gone"])
def test_a_name_not_used_on_self_is_not_found(name: str) -> None:
    # Only code counts: not another object's attribute, a comment or a string.
    assert not private_names._has_name(_Sub, name)


def test_the_check_reads_no_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every worker imports this check: it reads the compiled code in memory, not the source
    files (inspect.getsource parsed each class's module again, most of streamapp's import)."""

    def no_source(obj: object) -> str:
        raise OSError("the check must not read source files")

    monkeypatch.setattr(inspect, "getsource", no_source)
    monkeypatch.setattr(inspect, "getsourcelines", no_source)
    assert private_names.problems(private_names.PRIVATE_NAMES, private_names.RELEASES) == []
