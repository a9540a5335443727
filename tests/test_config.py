import pytest
from omegaconf import OmegaConf

from dreamgym_pl.config import ConfigError, validate
from tests.conftest import compose

PRESETS = ["webshop_grpo", "webshop_ppo", "webshop_sft", "webshop_dpo", "webshop_dreamgym", "webshop_s2r"]


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_compose_and_validate(preset, tmp_path):
    cfg = compose([f"conf={preset}"])
    validate(cfg, tmp_path)
    assert "collect" in cfg.stages and cfg.env.results_per_page == 3


def test_preset_overrides_root_stages():
    assert list(compose(["conf=webshop_grpo"]).stages) == ["collect", "sft", "rl", "eval"]
    assert compose(["conf=webshop_ppo"]).algo.name == "ppo"


@pytest.mark.parametrize("override,key", [
    ("collect.agents.oracle=-1", "collect.agents.oracle"),
    ("+collect.agents.wizard=3", "collect.agents.wizard"),
    ("eval.num_goals=0", "eval.num_goals"),
    ("rl.real_budget=-5", "rl.real_budget"),
    ("env.max_steps=0", "env.max_steps"),
    ("env.products_file=/no/such/file.json", "env.products_file"),
    ("eval.agent=wizard", "eval.agent"),
    ("algo.name=a2c", "algo.name"),
    ("stages=[collect,teleport]", "stages"),
    ("collect.noisy_eps=1.5", "collect.noisy_eps"),
    ("algo.agg=sum", "algo.agg"),
    ("algo.kl_kind=k9", "algo.kl_kind"),
    ("+algo.gae_lambda=0.9", "algo.gae_lambda"),  # a PPO key under algo=grpo
    ("rollout.batch_size=0", "rollout.batch_size"),
])
def test_bad_values_name_the_key(override, key, tmp_path):
    cfg = compose([override])
    with pytest.raises(ConfigError, match=f"^{key}:"):
        validate(cfg, tmp_path)


def test_unknown_env_name(tmp_path):
    cfg = compose([])
    OmegaConf.update(cfg, "env.name", "nope")
    with pytest.raises(ConfigError, match="^env.name:"):
        validate(cfg, tmp_path)


def test_sft_without_offline_data(tmp_path):
    cfg = compose(["stages=[sft,eval]"])
    with pytest.raises(ConfigError, match="offline data"):
        validate(cfg, tmp_path)


def test_synthetic_rl_needs_experience_model(tmp_path):
    cfg = compose(["stages=[collect,sft,synthetic_rl]"])
    with pytest.raises(ConfigError, match="experience model"):
        validate(cfg, tmp_path)


@pytest.mark.parametrize("override,key", [("curriculum.lambda_=1.5", "curriculum.lambda_"),
                                          ("curriculum.min_variance=0", "curriculum.min_variance"),
                                          ("replay.embedder=bert", "replay.embedder"),
                                          ("s2r.real_budget=-1", "s2r.real_budget")])
def test_more_bad_values(override, key, tmp_path):
    with pytest.raises(ConfigError, match=f"^{key}:"):
        validate(compose([override]), tmp_path)


def test_run_script_fails_before_work(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    p = subprocess.run([sys.executable, str(ROOT / "experiments/run.py"), "rl.real_budget=-1",
                        f"hydra.run.dir={tmp_path}/run"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert "rl.real_budget" in p.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()
