"""The judge reward's prompt template and request kinds, checked when a config loads (the reward
itself is `retrain_ray.rewards.judge`). It imports nothing, so the config and the reward share it without
the reward (and so the CLI front) loading the config package and pydantic."""

from __future__ import annotations

DEFAULT_JUDGE_PROMPT = (
    "Given a ground truth answer and a response, determine if the response is correct.\n\n"
    "Question:\n```\n{question}\n```\n\n"
    "Ground truth answer:\n```\n{answer}\n```\n\n"
    "Response:\n```\n{response}\n```\n\n"
    'Respond either "yes" or "no" only.'
)
JUDGE_APIS = ("chat", "completions")
PLACEHOLDERS = ("question", "answer", "response")


def check_prompt(template: str) -> None:
    """Raise a ValueError naming `[reward] judge_prompt` when the template cannot be filled."""
    try:
        template.format(question="", answer="", response="")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"[reward] judge_prompt cannot be filled ({type(exc).__name__}: {exc}); use the placeholders "
            f"{{question}}, {{answer}} and {{response}} and write literal braces as {{{{ and }}}}"
        ) from None
    if "{response}" not in template:
        raise ValueError("[reward] judge_prompt has no {response} placeholder: the judge would not see the completion")
