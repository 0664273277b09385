"""Prompts for a turn: task, the last k observation/action pairs, step count, the current observation
(optionally with the tracked state), the admissible actions, and the think/action format request,
rendered through the tokenizer's chat template. The template is configurable."""

from __future__ import annotations

import dataclasses

DEFAULT_TEMPLATE = (
    "You are an expert agent operating in the ALFRED embodied environment. Your task is to: {task}\n"
    "Before this step you have taken {step_count} step(s). Your most recent {history_length} observations "
    "and the actions you took:\n{history}\n"
    "You are now at step {current_step}. Your current observation is: {observation}\n"
    "Your admissible actions in the current situation are: [{admissible}].\n\n"
    "Now it is your turn to act. First reason step by step about the situation inside <think> </think> tags. "
    "Then choose one admissible action for this step and give it inside <action> </action> tags."
)
FIRST_TURN_TEMPLATE = (
    "You are an expert agent operating in the ALFRED embodied environment.\n"
    "Your current observation is: {observation}\n"
    "Your admissible actions in the current situation are: [{admissible}].\n\n"
    "Now it is your turn to act. First reason step by step about the situation inside <think> </think> tags. "
    "Then choose one admissible action for this step and give it inside <action> </action> tags."
)

CHOICE_TEMPLATE = (
    "Your task is to: {task}\n"
    "Your most recent {history_length} observations and actions:\n{history}\n"
    "Step {current_step}. {observation}\n"
    "Actions: {admissible}.\n"
    "Answer with the number of one action."
)
CHOICE_FIRST_TURN_TEMPLATE = "{observation}\nActions: {admissible}.\nAnswer with the number of one action."


def task_of(observation: str) -> str:
    marker = "Your task is to: "
    i = observation.find(marker)
    return observation[i + len(marker) :].strip() if i >= 0 else ""


@dataclasses.dataclass(frozen=True)
class PromptBuilder:
    history_length: int = 2
    template: str = DEFAULT_TEMPLATE
    first_turn_template: str = FIRST_TURN_TEMPLATE
    show_tracked_state: bool = False  # a config choice independent of the estimator (ALGORITHMS.md §7)
    numbered: bool = False  # list the admissible actions as "1: ..., 2: ..." (the ``choice`` action format)

    def text(
        self,
        task: str,
        history: list[tuple[str, str]],
        observation: str,
        admissible: list[str],
        tracked_state: str = "",
    ) -> str:
        current = observation.strip()
        if self.show_tracked_state and tracked_state:
            current = f"{current}\n[{tracked_state}]"
        if self.numbered:
            listed = ", ".join(f"{i}: {a}" for i, a in enumerate(admissible, 1))
        else:
            listed = ", ".join(f"'{a}'" for a in admissible)
        if not history:
            return self.first_turn_template.format(observation=current, admissible=listed)
        recent = history[-self.history_length :] if self.history_length > 0 else []
        lines = "\n".join(
            f"[Observation {len(history) - len(recent) + i + 1}: '{o.strip()}', Action: '{a}']"
            for i, (o, a) in enumerate(recent)
        )
        return self.template.format(
            task=task,
            step_count=len(history),
            history_length=len(recent),
            history=lines,
            current_step=len(history) + 1,
            observation=current,
            admissible=listed,
        )


def prompt_builder(action_format: str, history_length: int, show_tracked_state: bool = False) -> PromptBuilder:
    """The reference prompt for the ``tags`` format; a short numbered-choice prompt for ``choice``."""
    if action_format == "choice":
        return PromptBuilder(
            history_length, CHOICE_TEMPLATE, CHOICE_FIRST_TURN_TEMPLATE, show_tracked_state, numbered=True
        )
    return PromptBuilder(history_length, show_tracked_state=show_tracked_state)
