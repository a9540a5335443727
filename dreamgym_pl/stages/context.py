"""Run: what every stage shares. The config, the real environment, the run directory's metrics and completed
stages, and the one place where models, trainers, engines and evaluations are made."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dreamgym_pl import dist
from dreamgym_pl.agents import make_agent
from dreamgym_pl.core import Trajectory, Transition, group_trajectories, read_jsonl
from dreamgym_pl.envs.base import make_vec_env
from dreamgym_pl.experience import format as experience_format
from dreamgym_pl.outcomes import outcome_rows, write_outcomes
from dreamgym_pl.rollout.collector import run_episodes
from dreamgym_pl.rollout.prompts import PROMPT_WORDS, PromptConfig
from dreamgym_pl.run import atomic_write_json, read_json, reading

log = logging.getLogger("dreamgym_pl")


class Run:
    """State of one run directory: config, env, metrics, completed stages, current policy."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path, callbacks: list | None = None):
        self.cfg = cfg
        self.dir = Path(run_dir)
        self.callbacks = list(callbacks or [])  # extra Lightning callbacks for every stage (e.g. sweep pruning)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics: dict[str, float] = {}
        self.state: dict[str, Any] = {"completed": [], "policy": None}
        if cfg.resume:
            fix = "rerun with resume=false (starts the run over), or delete it to redo every stage in this folder"
            if (self.dir / "stages.json").exists():
                self.state = read_json(self.dir / "stages.json", fix, keys=("completed", "policy"))
            if (self.dir / "metrics.json").exists():
                self.metrics = read_json(self.dir / "metrics.json", fix)
        env_kwargs = {k: v for k, v in OmegaConf.to_container(cfg.env, resolve=True).items() if k != "name"}
        self.env = make_vec_env(cfg.env.name, **env_kwargs)
        self.prompt_cfg = PromptConfig(**OmegaConf.to_container(cfg.prompt, resolve=True),
                                       instructions=self.env.instructions)
        self._engines: dict[str, Any] = {}

    # ----- bookkeeping ---------------------------------------------------------------------------
    @property
    def offline_path(self) -> Path:
        return Path(self.cfg.offline_file) if self.cfg.offline_file else self.dir / "offline" / "transitions.jsonl"

    def record(self, values: dict[str, float]) -> None:
        """Stage metrics; `budget/<kind>` is re-derived as the sum of every stage's `.../*<kind>` counter, so a
        stage that is killed and redone never counts twice (kinds: real_transitions, synthetic_transitions,
        real_resets; e.g. budget/real_transitions adds experience/outcome_real_transitions)."""
        self.metrics.update({k: float(v) for k, v in values.items()})
        for kind in ("real_transitions", "synthetic_transitions", "real_resets"):
            parts = [v for k, v in self.metrics.items() if not k.startswith("budget/") and k.endswith(kind)]
            if parts:
                self.metrics[f"budget/{kind}"] = float(sum(parts))
        if dist.is_main():  # every rank keeps the metrics; rank 0 writes them
            atomic_write_json(self.dir / "metrics.json", self.metrics)

    def complete(self, stage: str, policy: str | None = None) -> None:
        if stage not in self.state["completed"]:
            self.state["completed"].append(stage)
        if policy is not None:
            self.state["policy"] = policy
        if dist.is_main():
            atomic_write_json(self.dir / "stages.json", self.state)

    def offline_trajectories(self) -> list[Trajectory]:
        fix = ("rerun with resume=false (collect makes it again)" if not self.cfg.offline_file
               else "check offline_file")
        with reading(self.offline_path, fix):
            return group_trajectories(read_jsonl(self.offline_path, Transition))

    # ----- models --------------------------------------------------------------------------------
    def tokenizer_corpus(self) -> list[str]:
        """Text for the tiny tokenizer: instructions of all tasks, the env's own text, and the states, actions
        and reasoning of the scripted agents on train tasks (offline data when present), and the words of
        the agent and experience-model formats."""
        from dreamgym_pl.curriculum import task_generation_prompt

        texts: list[str] = [t.instruction for split in ("train", "val", "test") for t in self.env.tasks(split)]
        if self.offline_path.exists():
            trajs = self.offline_trajectories()
        else:
            tasks = self.env.tasks("train")[:200]
            trajs = []
            for name in ("oracle", "random"):
                trajs += run_episodes(self.env, tasks, make_agent(name, self.cfg.seed, env=self.env), batch_size=64)
        for t in trajs:
            for s in t.transitions:
                texts += [s.state.text, s.action, s.next_state.text, self.env.explain(s)]
        texts += list(self.env.corpus())
        texts += [PROMPT_WORDS, *experience_format.vocabulary(), task_generation_prompt("x")]
        return texts

    def atomic_words(self) -> list[str]:
        """Words the tiny tokenizer keeps whole: the env's (page separators) and the format tags (and the task
        generator's family slot with `curriculum.family=slot`: appended last, so the other ids stay)."""
        from dreamgym_pl.curriculum import FAMILY_SLOT

        slot = [FAMILY_SLOT] if self.cfg.curriculum.family == "slot" else []
        return list(self.env.atomic_words) + experience_format.atomic_tags() + slot

    def load_policy(self, path: str | None = None) -> tuple[Any, Any]:
        from dreamgym_pl.models import get_base_model, load_pretrained

        path = path or self.state.get("policy")
        mcfg = OmegaConf.to_container(self.cfg.model, resolve=True)
        if path:  # a kept adapter reloads trainable; full (or merged) weights get a fresh adapter when LoRA is on
            with reading(self.dir / path, f"rerun with resume=false, or drop the stage that saved {path} and the "
                                          f"stages after it from stages.json's completed list (it makes it again)"):
                return load_pretrained(self.dir / path, mcfg["dtype"], mcfg["trust_remote_code"], lora=mcfg["lora"])
        tiny = mcfg["name_or_path"] == "tiny"
        corpus = self.tokenizer_corpus() if tiny else None
        words = self.atomic_words() if tiny else None
        if dist.world() > 1:  # rank 0 builds and saves the base model, the others load it
            if dist.is_main():
                get_base_model(mcfg, self.dir, corpus, self.cfg.seed, words)
            dist.barrier()
        return get_base_model(mcfg, self.dir, corpus, self.cfg.seed, words)

    def save_policy(self, model: Any, tokenizer: Any, stage: str, merge_lora: bool | None = None) -> str:
        from dreamgym_pl.models import save_model

        rel = f"checkpoints/{stage}"
        if merge_lora is None:
            merge_lora = bool(self.cfg.model.merge_lora)
        if dist.is_main():  # merge_lora: the adapter merged into full weights, else the adapter alone
            save_model(model, tokenizer, self.dir / rel, merge_lora=merge_lora)
        dist.barrier()
        return rel

    def trainer(self, stage: str, callbacks: list | None = None, **overrides: Any):
        """A Lightning Trainer for `stage` (TensorBoard logs in tb/<stage>, continuing a resumed stage's step count),
        with the stage's `callbacks` followed by the run's own (sweep pruning)."""
        import lightning as L

        from dreamgym_pl.policy.zero import configure_trainer
        from dreamgym_pl.precision import run_precision
        from dreamgym_pl.stages.resume import ContinuedTensorBoardLogger

        tcfg = OmegaConf.to_container(self.cfg.trainer, resolve=True)
        tcfg["precision"] = run_precision(self.cfg)  # `auto`: bf16-mixed with AMX / a bf16 GPU, else 32-true
        strategy = tcfg.pop("strategy", "auto")
        if isinstance(strategy, dict):
            from hydra.utils import instantiate

            strategy = instantiate(strategy)
        kwargs = dict(logger=ContinuedTensorBoardLogger(str(self.dir / "tb"), name=stage, version=""),
                      enable_checkpointing=False, log_every_n_steps=1, strategy=strategy,
                      enable_model_summary=False, **tcfg)
        extra = list(callbacks or []) + self.callbacks
        if extra:
            kwargs["callbacks"] = extra
        kwargs.update(overrides)
        # a resumed stage's curves go on from its checkpoint's step (the checkpoint callbacks set the offset);
        # DeepSpeed: the logging batch size of our pre-batched loaders, float32 batches (policy/zero.py)
        return configure_trainer(L.Trainer(**kwargs))

    def engine_for(self, role: str, model: Any, tokenizer: Any) -> Any:
        """The generation engine of `role` (policy / experience), built once per run from `cfg.engine` and
        synced to `model`'s current weights on every call (HF: shares the module, moved to the trainer's device;
        vLLM: pushes weights). Prompts keep their last N tokens, N the role's training bound (prompt.max_tokens,
        experience.max_prompt_tokens): generation sees what training saw."""
        import torch

        from dreamgym_pl.models import generation_device
        from dreamgym_pl.rollout.engine import make_engine

        if self.cfg.engine.name == "hf":
            local = int(os.environ.get("LOCAL_RANK", 0))
            model.to(generation_device(self.cfg.trainer.accelerator, torch.cuda.is_available(), local))
        eng = self._engines.get(role)
        if eng is not None and getattr(eng, "tokenizer", tokenizer) is not tokenizer and hasattr(eng, "adopt") \
                and eng.adopt(model, tokenizer):
            return eng  # vLLM: a later stage's policy of the same model, its weights pushed (no rebuild, no re-save)
        if eng is None or (getattr(eng, "tokenizer", tokenizer) is not tokenizer):
            if eng is not None and hasattr(eng, "close"):
                eng.close()
            cap = self.cfg.prompt.max_tokens if role == "policy" else self.cfg.experience.max_prompt_tokens
            eng = self._engines[role] = make_engine(self.cfg.engine, model, tokenizer, max_prompt_tokens=int(cap))
        else:
            eng.load_weights(model)
        return eng

    def evaluate(self, model: Any, tokenizer: Any, progress: str | bool = False,
                 num_goals: int | None = None, split: str | None = None,
                 outcomes: Path | None = None) -> dict[str, float]:
        """The greedy policy on the first `num_goals` (default `eval.num_goals`) tasks of `split` (default
        `eval.split`), one episode each. Under data parallelism each rank plays its share and the counts are summed.
        `outcomes`: each episode's task id, success and score (all ranks') also go to this JSONL file, for paired
        comparisons of runs over goals."""
        from dreamgym_pl.rollout.actor import policy_actor
        from dreamgym_pl.rollout.collector import episode_sums, stats_from_sums

        n = self.cfg.eval.num_goals if num_goals is None else num_goals
        tasks = dist.shard(self.env.tasks(split or self.cfg.eval.split)[:n])
        engine = self.engine_for("policy", model, tokenizer)
        actor = policy_actor(engine, self.prompt_cfg, self.env, 0.0, self.cfg.algo.max_new_tokens)
        trajs = run_episodes(self.env, tasks, actor, batch_size=self.cfg.eval.batch_size, source="eval",
                             progress=progress) if tasks else []
        if outcomes is not None:  # every rank's episodes, one file written by rank 0
            rows = [r for part in dist.all_gather_objects(outcome_rows(trajs)) for r in part]
            if dist.is_main():
                write_outcomes(outcomes, rows)
        return stats_from_sums(dist.all_sum(episode_sums(trajs)))


GROUPS = ("conf", "env", "model", "algo", "trainer", "engine")  # conf/config.yaml's defaults list
MAPPINGS = ("collect.agents", "experience.outcome_agents", "trainer.strategy")  # name -> value maps a run sets whole


def run_choices(run_dir: str | Path) -> dict[str, str]:
    """The config-group options a run was composed with (`.hydra/hydra.yaml`, written by experiments/run.py);
    {} for a run made without Hydra's app (tests, sweeps)."""
    path = Path(run_dir) / ".hydra" / "hydra.yaml"
    if not path.exists():
        return {}
    with reading(path, "it is Hydra's record of the run's options: restore it or delete .hydra/"):
        choices = OmegaConf.load(path).hydra.runtime.choices
    return {g: str(choices[g]) for g in GROUPS if choices.get(g) is not None}


def drop_removed_keys(saved: DictConfig, run_dir: str | Path) -> list[str]:
    """Delete from a saved run config the keys that no longer exist (levers removed since the run was made: no
    rule in config_keys.py), with a warning naming them; returns their names."""
    from dreamgym_pl.config_keys import leaf_keys, rule_for

    gone = [k for k in leaf_keys(saved) if rule_for(k) is None]
    for key in gone:
        while True:  # the key, then each parent it leaves empty that has no rule of its own (s2r.algo: {})
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(saved, parent) if parent else saved
            del node[leaf]
            if not parent or len(node) > 0 or rule_for(parent) is not None:
                break
            key = parent
    if gone:
        log.warning("%s: keys no longer in the config left out (removed since the run was made): %s", run_dir,
                    ", ".join(gone))
    return gone


def run_config(run_dir: str | Path, overrides: list[str] = ()) -> DictConfig:
    """A finished run's resolved config (`<run dir>/config.yaml`) over today's defaults of the same group options
    and preset (`run_choices`: keys added since the run get their defaults), with `key=value` overrides and
    resume=true: for tools that reuse a run. A group whose option differs from the record's (an algorithm, an env, a
    model: the record may be a later, failed invocation's) and every mapping of names (`MAPPINGS`) are taken whole
    from the run: no keys merged across two options of one group, no entry the run removed put back."""
    from hydra import compose, initialize_config_dir

    choices = run_choices(run_dir)
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[2] / "conf"), version_base="1.3"):
        defaults = compose(config_name="config", overrides=[f"{g}={v}" for g, v in choices.items()])
    with reading(Path(run_dir) / "config.yaml", "it is the run's resolved config: restore it or rerun"):
        saved = OmegaConf.load(Path(run_dir) / "config.yaml")
    drop_removed_keys(saved, run_dir)
    OmegaConf.set_struct(defaults, False)
    for group, name in (("algo", "name"), ("env", "name"), ("model", "name_or_path")):
        today = OmegaConf.select(defaults, f"{group}.{name}", throw_on_missing=False)  # model=hf: ??? -> None
        if not choices and group == "algo" or OmegaConf.select(saved, f"{group}.{name}") != today:
            defaults[group] = saved[group]
    for key in MAPPINGS:
        if OmegaConf.select(saved, key) is not None:
            OmegaConf.update(defaults, key, OmegaConf.select(saved, key), merge=False)
    return OmegaConf.merge(defaults, saved, OmegaConf.from_dotlist(list(overrides) + ["resume=true"]))
