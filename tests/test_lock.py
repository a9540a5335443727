"""constraints.txt (the pinned install `make install` uses) against pyproject.toml's dependencies."""

import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as norm

from dreamgym_pl.provenance import PACKAGES
from tests.conftest import ROOT


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version.strip(), f"constraints.txt: {line!r} is not an exact pin"
            out[norm(name)] = version.strip()
    return out


def direct_requirements() -> list[Requirement]:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


def test_every_direct_dependency_is_pinned_inside_its_range():
    p = pins()
    missing = [r.name for r in direct_requirements() if norm(r.name) not in p]
    assert not missing, f"not in constraints.txt (run `make lock`): {missing}"
    outside = [f"{r.name}=={p[norm(r.name)]} (pyproject: {r.specifier})" for r in direct_requirements()
               if not r.specifier.contains(p[norm(r.name)], prereleases=True)]
    assert not outside, outside


def test_the_installed_versions_are_the_pinned_ones():
    """`make install` installs from constraints.txt; an install made otherwise reads differently here, and its
    numbers may differ from the README's (README "Reproducibility"). Skipped for an install made without the pins
    (`make install CONSTRAINTS=`: the Makefile leaves no `.pinned` marker then)."""
    if not (Path(sys.prefix) / "bin" / ".pinned").exists():
        pytest.skip("this environment was not installed from constraints.txt")
    p = pins()

    def installed(n: str) -> str | None:
        try:
            return metadata.version(n).split("+")[0]
        except metadata.PackageNotFoundError:
            return None

    differ = {n: (installed(n), p[norm(n)]) for n in PACKAGES if norm(n) in p and installed(n) != p[norm(n)]}
    assert not differ, f"installed vs pinned: {differ}"
