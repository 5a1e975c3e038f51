"""pyproject.toml in the form current setuptools takes without a deprecation warning."""

from __future__ import annotations

import re
import tomllib

from tests.paths import REPO_ROOT


def test_license_is_an_spdx_expression_that_setuptools_reads_as_is() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    # A table ({ text = ... }) makes setuptools warn on every build (three times per install).
    assert project["project"]["license"] == "Apache-2.0"
    # SPDX expressions are setuptools' since 77 (PEP 639); older ones would refuse the string.
    (setuptools,) = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    found = re.fullmatch(r"setuptools>=(\d+)", setuptools)
    assert found is not None and int(found.group(1)) >= 77
    classifiers = project["project"].get("classifiers", [])
    assert not [c for c in classifiers if c.startswith("License ::")]  # refused with PEP 639
