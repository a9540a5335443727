"""The conf/model files read outside Hydra's composition (`experience.model=<name>`, config validation), composed
as Hydra composes the `model` group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CONF_MODELS = Path(__file__).resolve().parents[1] / "conf" / "model"


def is_model_file(name: str) -> bool:
    """Whether `name` is a conf/model file other than hf.yaml (whose `name_or_path` is the user's)."""
    return name != "hf" and (CONF_MODELS / f"{name}.yaml").is_file()


def model_file(name: str) -> dict[str, Any]:
    """conf/model/<name>.yaml as Hydra composes the `model` group: the files its `defaults:` list names merged in
    their order (`_self_` where it is listed, else last), so that e.g. llama31_8b carries hf's keys."""
    from omegaconf import OmegaConf

    own = OmegaConf.load(CONF_MODELS / f"{name}.yaml")
    order = list(own.pop("defaults", None) or [])
    if "_self_" not in order:
        order.append("_self_")
    parts = [own if d == "_self_" else OmegaConf.create(model_file(str(d))) for d in order]
    return OmegaConf.to_container(OmegaConf.merge(*parts), resolve=True)
