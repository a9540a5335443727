"""The LLM policy as an actor for the collector: prompts from histories, one batched generate a turn."""

from __future__ import annotations

from typing import Callable, Sequence

from dreamgym_pl.core import Observation, Task
from dreamgym_pl.rollout.sampling import GenerationEngine, SamplingParams
from dreamgym_pl.rollout.prompts import PromptConfig, build_prompt, extract_action, render_prompt


class PolicyActor:
    """Keeps each slot's (observation, action) history; exposes prompt text and response token data of the
    last turn in `last_info` so that trainers can rebuild per-step samples."""

    def __init__(self, engine: GenerationEngine, prompt_cfg: PromptConfig, params: SamplingParams,
                 normalize: Callable[[str], str]):
        """`params.stop` ends an action (the env's `action_stop`); `normalize` is the env's `normalize_action`."""
        self.engine = engine
        self.normalize = normalize
        self.prompt_cfg = prompt_cfg
        self.params = params
        self.last_info: list[dict | None] = []

    def begin(self, tasks: Sequence[Task]) -> None:
        self.tasks = list(tasks)
        self.history: list[list[tuple[str, str]]] = [[] for _ in self.tasks]

    def act(self, observations: Sequence[Observation | None]) -> list[str | None]:
        idx = [i for i, o in enumerate(observations) if o is not None]
        prompts = [build_prompt(self.tasks[i], self.history[i], observations[i], self.prompt_cfg) for i in idx]
        tok = getattr(self.engine, "tokenizer", None)
        if tok is not None:  # Instruct models: the chat template's user turn (prompt.chat_template), as in training
            prompts = [render_prompt(tok, p, self.prompt_cfg.chat_template) for p in prompts]
        comps = self.engine.generate(prompts, self.params) if prompts else []
        actions: list[str | None] = [None] * len(observations)
        self.last_info = [None] * len(observations)
        for i, p, c in zip(idx, prompts, comps):
            a = self.normalize(extract_action(c.text, self.params.stop, self.prompt_cfg.think))
            actions[i] = a
            self.history[i].append((observations[i].text, a))
            self.last_info[i] = {"prompt": p, "response_ids": c.token_ids, "gen_logprobs": c.logprobs}
        return actions


def policy_actor(engine: GenerationEngine, prompt_cfg: PromptConfig, env, temperature: float, max_new_tokens: int,
                 top_p: float = 1.0) -> PolicyActor:
    """The policy as an actor in `env`: generation stops at the env's action stop strings and actions are
    normalised the env's way. temperature 0 = greedy."""
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, stop=list(env.action_stop))
    return PolicyActor(engine, prompt_cfg, params, env.normalize_action)
