"""The run directory's files: atomic JSON writes, JSON reads that name a corrupt file, and versioned folders
committed by one atomic pointer swap (RL checkpoints and the replay buffer share it).

Run directory contract (scripts, sweeps and people read these):
  config.yaml    the resolved config of the latest invocation
  stages.json    completed stages and the current policy / experience checkpoints (resume)
  metrics.json   flat {"key": number}, rewritten atomically after every stage
  offline/       transitions.jsonl from `collect`
  replay/        the replay buffer (a versioned folder)
  curriculum/    the curriculum's state and generated tasks
  checkpoints/   <stage>/ HF-format weights + tokenizer; <stage>/resume/ RL checkpoints (versioned)
  history/       per-iteration logs of RL stages
  tb/            TensorBoard logs, one sub-directory per stage
  plots/         PNG curves
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


class CorruptFileError(RuntimeError):
    """A run-directory file that cannot be read; the message names it and what to do."""


def atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path, fix: str = "delete it, or rerun with resume=false") -> Any:
    """JSON from a run-directory file; a truncated or garbled file raises CorruptFileError naming it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptFileError(f"{path}: not valid JSON ({e}); {fix}") from e


class VersionedDir:
    """A folder of versions `<prefix>-NNNNNN/` and a `CURRENT` pointer file naming the live one.

    `new(version)` makes an empty version folder; `commit(vdir)` swaps the pointer to it atomically
    (`os.replace`) and then removes every other version: a kill at any point leaves the previous version
    loadable. `current()` is the live folder (None before the first commit)."""

    def __init__(self, root: str | Path, prefix: str = "v"):
        self.root = Path(root)
        self.prefix = prefix

    @property
    def pointer(self) -> Path:
        return self.root / "CURRENT"

    def current(self) -> Path | None:
        if not self.pointer.exists():
            return None
        name = self.pointer.read_text().strip()
        vdir = self.root / name
        if not name.startswith(f"{self.prefix}-") or not vdir.is_dir():
            raise CorruptFileError(f"{self.pointer}: points to {name!r}, which is not a saved version; delete "
                                   f"{self.root} (its saves are lost) or rerun with resume=false")
        return vdir

    def next_version(self) -> int:
        cur = self.current()
        return 0 if cur is None else int(cur.name.split("-")[1]) + 1

    def new(self, version: int | None = None) -> Path:
        vdir = self.root / f"{self.prefix}-{self.next_version() if version is None else version:06d}"
        if vdir.exists():
            shutil.rmtree(vdir)
        vdir.mkdir(parents=True)
        return vdir

    def commit(self, vdir: Path) -> None:
        tmp = self.root / "CURRENT.tmp"
        tmp.write_text(vdir.name)
        os.replace(tmp, self.pointer)  # the commit point
        for d in self.root.glob(f"{self.prefix}-*"):
            if d.name != vdir.name:
                shutil.rmtree(d, ignore_errors=True)
