"""The two packages allowed aiokafka's internals: each lists what it uses, and checks it.

streamapp's group protocol (`streamapp.runtime.group`) and producer
(`streamapp.runtime.producer`) name aiokafka's private names; nothing else outside
streamapp.private_names does (tests/unit/streamapp/test_faust_compat.py). Each package lists
them in its PRIVATE_NAMES, checked as it is imported against a range of aiokafka releases.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from importlib import metadata
from pathlib import Path
from types import ModuleType

import aiokafka
import pytest

import streamapp.runtime.group as group
import streamapp.runtime.producer as producer
from streamapp.runtime import library_check
from tests.paths import REPO_ROOT
from tests.unit.streamapp.test_faust_private_names import _own_names, _private

PACKAGES = [group, producer]


def _private_names_of(package: str) -> set[str]:
    names: set[str] = set()
    root = Path(importlib.import_module(package).__file__ or "").parent
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _private(node.name):
                names.add(node.name)
    return names


def _modules(package: ModuleType) -> list[Path]:
    return sorted(Path(package.__file__ or "").parent.glob("*.py"))


def _listed(package: ModuleType) -> set[str]:
    return {name for names in package.PRIVATE_NAMES.values() for name in names}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_the_installed_aiokafka_passes_the_check(package: ModuleType) -> None:
    assert library_check.version_problems(package.AIOKAFKA_RELEASES) == []
    assert library_check.name_problems(package.PRIVATE_NAMES) == []
    assert library_check.keyword_problems(package.KEYWORDS) == []


@pytest.mark.parametrize(
    ("installed", "allowed"),
    [("0.14.0", True), ("0.14.9", True), ("0.14.1rc1", True), ("0.15.0", False), ("0.13.2", False)],
)
def test_any_release_in_the_range_passes_others_fail_with_one_line(
    monkeypatch: pytest.MonkeyPatch, installed: str, allowed: bool
) -> None:
    monkeypatch.setattr(metadata, "version", lambda dist: installed)
    monkeypatch.delenv(library_check.SKIP_VARIABLE, raising=False)
    if allowed:
        library_check.check("group", group.PRIVATE_NAMES, group.AIOKAFKA_RELEASES)
        return
    with pytest.raises(library_check.LibraryMismatchError) as raised:
        library_check.check("group", group.PRIVATE_NAMES, group.AIOKAFKA_RELEASES)
    assert str(raised.value).startswith("group cannot run on the installed releases: ")
    assert f"aiokafka {installed} is installed, streamapp needs >=0.14,<0.15" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_missing_name_or_keyword_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(library_check.SKIP_VARIABLE, raising=False)
    names = {**group.PRIVATE_NAMES, "aiokafka.consumer.fetcher:Fetcher": ("_records", "_gone")}
    keywords = {"aiokafka.producer.sender:Sender": ("client", "spacing")}
    with pytest.raises(library_check.LibraryMismatchError) as raised:
        library_check.check("group", names, group.AIOKAFKA_RELEASES, keywords=keywords)
    message = str(raised.value)
    assert "aiokafka.consumer.fetcher:Fetcher has no _gone" in message
    assert "aiokafka.producer.sender:Sender() takes no spacing" in message
    assert "_records" not in message and "\n" not in message
    monkeypatch.setenv(library_check.SKIP_VARIABLE, "1")
    library_check.check("group", names, group.AIOKAFKA_RELEASES, keywords=keywords)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_aiokafka_private_name_a_package_uses_is_in_its_list(package: ModuleType) -> None:
    aiokafka_names = _private_names_of("aiokafka")
    others = (_private_names_of("faust") | _private_names_of("mode")) - aiokafka_names
    listed = _listed(package)
    unlisted: dict[str, list[str]] = {}
    faust_names: dict[str, list[str]] = {}
    for path in _modules(package):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr not in _own_names(tree)
        }
        if missing := sorted((used & aiokafka_names) - listed):
            unlisted[path.name] = missing
        if theirs := sorted(used & others):
            faust_names[path.name] = theirs
    assert unlisted == {}, "aiokafka private names used but not in PRIVATE_NAMES"
    assert faust_names == {}, "private Faust or mode names in an aiokafka package"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_a_subclass_overrides_or_sets_only_listed_aiokafka_names(package: ModuleType) -> None:
    """A name of aiokafka's that a class of the package defines, or sets on ``self``, is one
    it overrides on purpose, listed: never one of its own that happens to clobber aiokafka's."""
    listed = _listed(package)
    clobbered: list[str] = []
    for path in _modules(package):
        module = importlib.import_module(f"{package.__name__}.{path.stem}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            bases = [b for b in cls.__mro__[1:] if b.__module__.startswith("aiokafka")]
            if not bases:
                continue
            # What its source defines in its body and sets on attributes (not what aiokafka's
            # own machinery adds to a subclass, as its Request classes' _CLASSES).
            (source,) = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
            assert isinstance(source, ast.ClassDef)
            own = _own_names(ast.Module(body=source.body, type_ignores=[]))
            for name in sorted(own):
                if not _private(name) or name in listed or name == "_abc_impl":
                    continue
                if any(library_check.has_name(base, name) for base in bases):
                    clobbered.append(f"{cls.__qualname__}.{name}")
    assert clobbered == []


def test_outside_the_two_packages_no_runtime_module_names_aiokafka_internals() -> None:
    """streamapp.runtime's other modules (the client log, the check) use public names only."""
    aiokafka_names = _private_names_of("aiokafka")
    runtime = REPO_ROOT / "streamapp" / "runtime"
    allowed = [Path(p.__file__ or "").parent for p in PACKAGES]
    offenders = {}
    for path in sorted(runtime.rglob("*.py")):
        if any(a in path.parents for a in allowed):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        if found := sorted((used & aiokafka_names) - _own_names(tree)):
            offenders[path.name] = found
    assert offenders == {}
    assert aiokafka.__version__  # the scan read the installed aiokafka
