import copy

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
    ("+sft.maxsteps=5", "sft.maxsteps"),  # a typo: no such key
    ("experience.outcome_model=bert", "experience.outcome_model"),
    ("experience.outcome_steps=0", "experience.outcome_steps"),  # off is outcome_model=none
])
def test_bad_values_name_the_key(override, key, tmp_path):
    cfg = compose([override])
    with pytest.raises(ConfigError, match=f"^{key}:"):
        validate(cfg, tmp_path)


def test_env_specific_agent_is_checked_against_the_env(tmp_path):
    validate(compose(["+collect.agents.near_miss=5", "eval.agent=near_miss", "sft.source=near_miss"]), tmp_path)
    for override, key in (("+collect.agents.near_miss=5", "collect.agents.near_miss"), ("eval.agent=near_miss", "eval.agent"),
                          ("sft.source=near_miss", "sft.source")):
        with pytest.raises(ConfigError, match=f"^{key}:.*textworld"):  # WebShop's own agent, not TextWorld's
            validate(compose(["env=textworld", override]), tmp_path)


def test_sft_source_must_be_collected(tmp_path):
    validate(compose(["conf=webshop_sft"]), tmp_path)  # the preset clones hasty, which collect plays
    with pytest.raises(ConfigError, match="^sft.source:.*collect.agents.hasty"):
        validate(compose(["conf=webshop_sft", "collect.agents.hasty=0"]), tmp_path)
    validate(compose(["conf=webshop_sft", "collect.agents.hasty=0", "sft.source=all", "sft.min_score=null"]), tmp_path)


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


def test_a_capped_budget_must_fit_one_task(tmp_path):
    """s2r.budget_cap: a budget below one task's longest episodes (group 8 x 10 steps on webshop_tiny) is refused;
    at exactly one task, and uncapped, it is fine."""
    with pytest.raises(ConfigError, match="^s2r.real_budget: 79 fits not one task"):
        validate(compose(["conf=webshop_s2r", "s2r.real_budget=79"]), tmp_path)
    validate(compose(["conf=webshop_s2r", "s2r.real_budget=80"]), tmp_path)
    validate(compose(["conf=webshop_s2r", "s2r.real_budget=79", "s2r.budget_cap=false"]), tmp_path)
    validate(compose(["conf=webshop_grpo", "rl.real_budget=79"]), tmp_path)  # rl: whole iterations by default


def test_run_script_fails_before_work(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    p = subprocess.run([sys.executable, str(ROOT / "experiments/run.py"), "rl.real_budget=-1",
                        f"hydra.run.dir={tmp_path}/run"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert "rl.real_budget" in p.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


# ----- every key of every config file has a rule, and a bad value for each is an error naming the key ----------
def _compositions():
    """(overrides, composed config) for the root config and every option of every config group."""
    from tests.conftest import ROOT

    from dreamgym_pl.algo_config import ALGO_CONFIGS

    options = [f"{group.name}={f.stem}" for group in sorted(p for p in (ROOT / "conf").iterdir() if p.is_dir())
               for f in sorted(group.glob("*.yaml"))] + [f"algo={name}" for name in ALGO_CONFIGS]
    return [((), compose([]))] + [((ov,), compose([ov])) for ov in options]


COMPOSITIONS = _compositions()


def test_every_config_key_has_a_rule():
    from dreamgym_pl.config_keys import RULES, leaf_keys, rule_for

    seen, missing = set(), []
    for ov, cfg in COMPOSITIONS:
        for key in leaf_keys(cfg):
            seen.add(key)
            if rule_for(key) is None:
                missing.append(f"{key} ({' '.join(ov) or 'config.yaml'})")
    assert not missing, f"config keys without a rule in dreamgym_pl/config_keys.py: {missing}"
    assert len(seen) > 150
    # no stale rules: every rule names a key some file defines (trainer.strategy: a mapping in some files)
    stale = [k for k in RULES if "*" not in k and k not in seen and k != "trainer.strategy"]
    assert not stale, stale


def _bad_value_cases():
    from dreamgym_pl.config_keys import RULES, check_keys, leaf_keys

    cases, done = [], set()
    for ov, cfg in COMPOSITIONS:
        try:  # a composition whose own values pass (model=hf leaves name_or_path to the user)
            check_keys(cfg, ConfigError)
        except ConfigError:
            continue
        keys = leaf_keys(cfg)
        keys += [k for k in RULES if k not in keys and "*" not in k and OmegaConf.select(cfg, k) is not None]
        for key in keys:
            if key not in done:
                done.add(key)
                cases.append((ov, key))
    return cases


@pytest.mark.parametrize("ov,key", _bad_value_cases())
def test_a_bad_value_of_every_key_names_it(ov, key, tmp_path):
    from dreamgym_pl.config_keys import rule_for

    rule = rule_for(key)
    cfg = copy.deepcopy(dict(COMPOSITIONS)[ov])
    OmegaConf.update(cfg, key, rule.bad, merge=False, force_add=True)
    assert not rule.ok(rule.bad)
    with pytest.raises(ConfigError, match=f"^{key.replace('.', '[.]')}: ") as e:
        validate(cfg, tmp_path)
    if key not in ("stages", "env.name", "algo.name"):  # those three name the known values in their own words
        assert "must be" in str(e.value) and rule.allowed in str(e.value)


@pytest.mark.parametrize("key,value,ok", [
    ("experience.val_fraction", 0.0, True), ("experience.val_fraction", 1.0, False), ("experience.val_fraction", -0.1, False),
    ("checkpoint_every", 1, True), ("checkpoint_every", 0, False), ("checkpoint_every", 2.5, False),
    ("algo.clip_low", 0.2, True), ("algo.clip_low", 1.0, False), ("algo.clip_low", 0.0, False),
    ("algo.clip_high", 0.28, True), ("algo.clip_high", 0.0, False),
    ("algo.dual_clip", None, True), ("algo.dual_clip", 1.0, False), ("algo.dual_clip", 3.0, True),
    ("algo.temperature", 0.0, False), ("algo.temperature", 0.7, True), ("experience.temperature", 0.0, True),
    ("curriculum.temperature", -1.0, False), ("algo.top_p", 1.0, True), ("algo.top_p", 0.0, False),
    ("algo.agg", "seq-mean", True), ("algo.kl_kind", "k2", False), ("resume", "yes", False), ("seed", 1.5, False),
    ("collect.noisy_eps", True, False), ("env.num_test", None, True),
])
def test_rules_by_hand(key, value, ok):
    """Hand-picked edges of a few rules (bools are not numbers; open and closed interval ends)."""
    from dreamgym_pl.config_keys import rule_for

    assert rule_for(key).ok(value) is ok


def test_error_names_allowed_values(tmp_path):
    with pytest.raises(ConfigError, match=r"^algo\.agg: must be one of \['token-mean', 'seq-mean'\], got 'sum'$"):
        validate(compose(["algo.agg=sum"]), tmp_path)
    with pytest.raises(ConfigError, match=r"^experience\.val_fraction: must be a number in \[0, 1\), got 1\.5$"):
        validate(compose(["experience.val_fraction=1.5"]), tmp_path)


def test_algo_group_size_sets_the_capped_budget_check(tmp_path):
    """The budget check of s2r uses algo.group_size: 4 x 10 steps fit in 40, 8 x 10 do not."""
    validate(compose(["conf=webshop_s2r", "s2r.real_budget=40", "algo.group_size=4"]), tmp_path)
    with pytest.raises(ConfigError, match="^s2r.real_budget: 40 fits not one task.*: algo.group_size"):
        validate(compose(["conf=webshop_s2r", "s2r.real_budget=40"]), tmp_path)
