"""A backend plugin written to the original's signature (tests/test_plugin_backend.py): `factory(config)`
returns a `TrainHelper` that samples and trains on token lists (spec 1.6). Its own imports aside (it
builds the tiny model with retrain_ray's local parts, where the original's plugin would use its own),
it is what a user of the original has: checkpoint / sample / train_step / save_adapter / load_state.
"""

from __future__ import annotations

from pathlib import Path

CALLS: list[str] = []  # the helper methods called, in order (checkpoint names included)
ENTROPY = 0.375  # what sample_with_entropy reports for every token
TRAIN_ARGS: list[dict] = []  # per train_step call: its token, logprob and advantage lists, lr and weight decay


class TinyHelper:
    def __init__(self, config):
        from retrain_ray.backends.local import LoraSettings, PolicySettings, build_shared_policy

        settings = PolicySettings(lora=LoraSettings(rank=config.lora_rank), seed=7)
        self.engine, self.backend, self.tokenizer = build_shared_policy(config.model, settings, device="cpu")
        self.adapter_path = config.adapter_path

    def checkpoint(self, name):
        CALLS.append(f"checkpoint:{name}")

    def sample(self, prompt_ids_list, num_samples, max_tokens, temperature, top_p):
        from retrain_ray.engines.types import SamplingParams

        CALLS.append("sample")
        groups = self.engine.generate(prompt_ids_list, num_samples, SamplingParams(max_tokens, temperature, top_p))
        return [[(list(r.token_ids), list(r.logprobs)) for r in group] for group in groups]

    def sample_with_entropy(self, prompt_ids_list, num_samples, max_tokens, temperature, top_p):
        """Triples with every token's entropy `ENTROPY` (used only when the run asks for entropies)."""
        CALLS.append("sample_with_entropy")
        groups = self.sample(prompt_ids_list, num_samples, max_tokens, temperature, top_p)
        CALLS.pop()  # the "sample" entry of the call above
        return [[(ids, lps, [ENTROPY] * len(ids)) for ids, lps in group] for group in groups]

    def train_step(self, all_tokens, all_logprobs, all_advantages, lr, weight_decay):
        from retrain_ray.backends.types import TrainBatch

        CALLS.append("train_step")
        TRAIN_ARGS.append({"tokens": all_tokens, "logprobs": all_logprobs, "advantages": all_advantages,
                           "lr": lr, "weight_decay": weight_decay})
        # prompt positions carry logprob and advantage 0.0 (the original's alignment); a sampled token's
        # logprob is never exactly 0, an SFT target's advantage (all-zero logprobs: the SFT fallback) is 1
        prompt_lens = [next((i for i, (lp, adv) in enumerate(zip(lps, advs, strict=True)) if lp != 0.0 or adv != 0.0),
                            len(lps)) for lps, advs in zip(all_logprobs, all_advantages, strict=True)]
        batch = TrainBatch(all_tokens, all_logprobs, all_advantages, prompt_lens)
        return self.backend.train_step(batch, lr=lr, weight_decay=weight_decay).loss

    def save_adapter(self, path, name):
        CALLS.append("save_adapter")
        target = Path(path) / name
        target.mkdir(parents=True, exist_ok=True)
        self.backend.save_checkpoint(target)
        return str(target)

    def load_state(self, name):
        CALLS.append("load_state")
        self.backend.load_checkpoint(Path(name))


def make_helper(config):
    return TinyHelper(config)


def make_entropy_helper(config):
    return TinyHelper(config)


# declares what the helper returns: token advantages reach its train_step, sample_with_entropy gives entropies
make_entropy_helper.retrain_backend_capabilities = {"preserves_token_advantages": True}
make_entropy_helper.retrain_engine_capabilities = {"returns_token_entropies": True}
