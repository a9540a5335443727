"""Every script under experiments/ (and its subfolders) answers --help with exit 0 and prints a usage line.

A script that does work, imports a missing module or breaks on its path set-up (a moved script whose ROOT is
computed from the wrong parent) fails here before anyone runs it on a real run directory.
"""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import ROOT

SCRIPTS = sorted(p for p in (ROOT / "experiments").rglob("*.py") if p.name != "__init__.py")


def _help(path):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, str(path), "--help"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def answers():
    # two at a time: each start is mostly importing torch, transformers and Lightning
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(SCRIPTS, pool.map(_help, SCRIPTS)))


def test_the_scripts_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in SCRIPTS}
    assert "experiments/run.py" in names and "experiments/bench_fidelity.py" in names
    assert any(n.startswith("experiments/diagnostics/") for n in names)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_script_answers_help(path, answers):
    p = answers[path]
    assert p.returncode == 0, f"{path.relative_to(ROOT)} --help: exit {p.returncode}\n{p.stdout[-2000:]}\n" \
                              f"{p.stderr[-3000:]}"
    out = (p.stdout + p.stderr).lower()
    assert "usage" in out or "help" in out, out[:1000]
