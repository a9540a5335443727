"""One source per default: every option of a config group declares the keys its readers take (no fallback in the
code stands in for a missing one), a conf/model file carries the keys of the files its `defaults:` list names,
and a saved run's config is completed from the same group options it was made with."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[1] / "conf"
MODEL_KEYS = ("name_or_path", "dtype", "trust_remote_code", "merge_lora")
LORA_KEYS = ("enabled", "r", "alpha", "dropout", "target_modules")
TRAINER_KEYS = ("accelerator", "devices", "num_nodes", "strategy", "precision")


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "model").glob("*.yaml")))
def test_every_model_file_declares_what_the_loaders_read(name):
    from dreamgym_pl.model_files import model_file

    m = model_file(name)
    assert all(k in m for k in MODEL_KEYS), [k for k in MODEL_KEYS if k not in m]
    assert all(k in m["lora"] for k in LORA_KEYS), [k for k in LORA_KEYS if k not in m["lora"]]
    composed = OmegaConf.to_container(_compose(f"model={name}").model, resolve=True)
    if name != "hf":  # hf's name_or_path is ??? (the user's); Hydra composes the same mapping as model_file
        assert composed == m


def test_model_file_takes_the_keys_of_its_defaults_list():
    from dreamgym_pl.model_files import model_file

    llama, hf = model_file("llama31_8b"), model_file("hf")
    assert llama["lora"]["target_modules"] == hf["lora"]["target_modules"] and len(hf["lora"]["target_modules"]) == 7
    assert llama["name_or_path"] == "meta-llama/Llama-3.1-8B-Instruct" and llama["trust_remote_code"] is False
    small = model_file("tiny_192")
    assert small["name_or_path"] == "tiny" and small["hidden_size"] == 192 and small["num_layers"] == 4


def test_experience_model_naming_a_tiny_file_fails_on_its_key():
    from dreamgym_pl.config import ConfigError, _check_model_source

    with pytest.raises(ConfigError, match="experience.model: the tiny model is the policy's"):
        _check_model_source("experience.model", "tiny_192")  # inherits name_or_path: tiny from model/tiny.yaml


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "trainer").glob("*.yaml")))
def test_every_trainer_file_declares_what_the_pipeline_reads(name):
    t = _compose(f"trainer={name}").trainer
    assert all(k in t for k in TRAINER_KEYS), [k for k in TRAINER_KEYS if k not in t]


def _saved_run(tmp_path, choices=None, *overrides):
    cfg = _compose(*overrides)
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if choices is not None:
        (tmp_path / ".hydra").mkdir()
        (tmp_path / ".hydra" / "hydra.yaml").write_text(OmegaConf.to_yaml({"hydra": {"runtime": {"choices": {
            "conf": None, "env": choices, "model": "tiny", "algo": "grpo", "trainer": "cpu", "engine": "hf",
            "hydra/env": "default"}}}}))
    return cfg


@pytest.mark.parametrize("recorded", [True, False])
def test_run_config_of_another_env_holds_that_envs_keys_only(tmp_path, recorded):
    """A TextWorld run reloaded by a tool: its env section is TextWorld's (no WebShop key merged in, which the
    env's factory would refuse), with or without Hydra's record of the options."""
    from dreamgym_pl.stages.context import run_config

    saved = _saved_run(tmp_path, "textworld" if recorded else None, "env=textworld")
    cfg = run_config(tmp_path, ["eval.num_goals=3"])
    assert set(cfg.env) == set(saved.env) and cfg.env.name == "textworld"
    assert cfg.resume is True and cfg.eval.num_goals == 3


def test_run_config_fills_a_key_added_since_from_the_runs_own_options(tmp_path):
    from dreamgym_pl.stages.context import run_config

    _saved_run(tmp_path, "webshop_tiny", "env=webshop_tiny")
    saved = OmegaConf.load(tmp_path / "config.yaml")
    del saved.env["trace"]  # a run made before the key existed
    del saved.experience["outcome_model"]
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    cfg = run_config(tmp_path)
    today = _compose("env=webshop_tiny")
    assert cfg.env.trace == today.env.trace and cfg.experience.outcome_model == today.experience.outcome_model
    assert cfg.env.product_ids == today.env.product_ids  # webshop_tiny's own value, not webshop's


def test_run_config_leaves_out_keys_removed_since_the_run(tmp_path, caplog):
    from dreamgym_pl.stages.context import run_config

    _saved_run(tmp_path, "webshop_tiny", "env=webshop_tiny")
    saved = OmegaConf.load(tmp_path / "config.yaml")
    saved.env.show_attributes = False  # levers measured, not adopted and deleted (issue 52)
    saved.group_batches = 0
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    cfg = run_config(tmp_path)
    assert "show_attributes" not in cfg.env and "group_batches" not in cfg
    assert "env.show_attributes" in caplog.text and "group_batches" in caplog.text


def test_run_config_takes_a_group_whole_where_the_record_disagrees(tmp_path):
    """A record of options from a later, failed invocation (grpo, webshop) beside a PPO TextWorld run's config:
    the run's own algo and env, not a merge of two options."""
    from dreamgym_pl.stages.context import run_config

    saved = _saved_run(tmp_path, "webshop_tiny", "env=textworld", "algo=ppo")
    cfg = run_config(tmp_path)
    assert set(cfg.algo) == set(saved.algo) and cfg.algo.name == "ppo"
    assert set(cfg.env) == set(saved.env) and cfg.env.name == "textworld"


def test_run_config_keeps_the_runs_own_mappings(tmp_path):
    """A mapping of names the run set (here emptied) comes back as the run had it, not refilled by its preset."""
    from dreamgym_pl.stages.context import run_config

    cfg = _compose("conf=webshop_dreamgym")
    assert cfg.experience.outcome_agents.near_miss > 0
    OmegaConf.set_struct(cfg, False)
    cfg.experience.outcome_agents = {}
    del cfg.collect.agents["random"]
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "hydra.yaml").write_text(OmegaConf.to_yaml({"hydra": {"runtime": {"choices": {
        "conf": "webshop_dreamgym"}}}}))
    back = run_config(tmp_path)
    assert dict(back.experience.outcome_agents) == {} and "random" not in back.collect.agents


def test_removed_keys_take_their_emptied_parents_along(tmp_path):
    from dreamgym_pl.stages.context import drop_removed_keys

    saved = OmegaConf.create({"s2r": {"real_budget": 5, "algo": {"warmup_steps": 0}}, "seed": 1})
    assert drop_removed_keys(saved, tmp_path) == ["s2r.algo.warmup_steps"]
    assert OmegaConf.to_container(saved) == {"s2r": {"real_budget": 5}, "seed": 1}


def test_a_corrupt_saved_config_names_its_file(tmp_path):
    from dreamgym_pl.stages.context import run_config

    (tmp_path / "config.yaml").write_text("env: [unclosed\n")
    from dreamgym_pl.run import CorruptFileError

    with pytest.raises(CorruptFileError, match="config.yaml"):
        run_config(tmp_path)
