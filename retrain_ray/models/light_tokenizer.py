"""The built-in character tokenizer on `tokenizers.Tokenizer` alone, without transformers.

`transformers.PreTrainedTokenizerFast` costs about a second of imports; `tokenizers` costs milliseconds.
`LightTokenizer` reads the same two files (`tokenizer.json`, `tokenizer_config.json`) and answers the
calls a run makes of a Hugging Face tokenizer (`encode`, `decode`, `batch_decode`,
`convert_ids_to_tokens`, the special tokens and their ids, `padding_side`, `chat_template`, `len`,
`save_pretrained`) with the same results, because transformers' fast tokenizer forwards each of them to
the same `tokenizers.Tokenizer` (tests/models/test_lean_llama.py compares them). A chat template
(`chat_template.jinja`, or the config's `chat_template` string) is rendered as transformers renders it: a
sandboxed Jinja environment with `trim_blocks` and `lstrip_blocks`, its `raise_exception`, `strftime_now` and
`tojson`, the special tokens as variables, and the text encoded without added special tokens (compared
with transformers on SmolLM2 in tests/models/test_lean_real_llama.py). It refuses folders whose config
asks for what it does not do (clean-up of spaces, extra special tokens, another tokenizer class, a
template's `{% generation %}` blocks or a template per name): those load through transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from retrain_ray.models.chat_template import compile_chat_template, template_problem

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast"}
_SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")


def light_tokenizer_problem(folder: Path) -> str | None:
    """Why `folder`'s tokenizer needs transformers, or None when `LightTokenizer` reproduces it."""
    if not (folder / TOKENIZER_FILE).is_file() or not (folder / CONFIG_FILE).is_file():
        return f"{folder} has no {TOKENIZER_FILE} and {CONFIG_FILE}"
    config = json.loads((folder / CONFIG_FILE).read_text())
    if config.get("tokenizer_class") not in _CLASSES:
        return f"tokenizer class {config.get('tokenizer_class')!r} is not one of {sorted(_CLASSES)}"
    problem = template_problem(chat_template_text(folder, config))
    if problem is not None:
        return problem
    if config.get("clean_up_tokenization_spaces"):
        return "it cleans up tokenization spaces"
    if config.get("extra_special_tokens") or config.get("additional_special_tokens"):
        return "it has extra special tokens"
    return None


def chat_template_text(folder: Path, config: dict[str, Any]) -> object:
    """The folder's chat template: `chat_template.jinja`, else the config's `chat_template` (None if neither)."""
    path = folder / TEMPLATE_FILE
    return path.read_text() if path.is_file() else config.get("chat_template")


def _content(token: object) -> str | None:
    if isinstance(token, dict):
        return str(token.get("content"))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return token if isinstance(token, str) else None


class LightTokenizer:
    """A Hugging Face fast tokenizer's run-time calls over a `tokenizers.Tokenizer` (see the module doc)."""

    def __init__(self, core: Tokenizer, config: dict[str, Any], *, padding_side: str = "left",
                 chat_template: str | None = None) -> None:
        self._tokenizer = core
        self._config = dict(config)
        self.chat_template = chat_template
        self._template = compile_chat_template(chat_template) if chat_template else None
        self.padding_side = padding_side
        tokens = {name: _content(config.get(name)) for name in _SPECIAL}
        self.bos_token, self.eos_token = tokens["bos_token"], tokens["eos_token"]
        self.pad_token, self.unk_token = tokens["pad_token"], tokens["unk_token"]
        if self.pad_token is None:  # as `load_tokenizer`: EOS pads when the tokenizer has no pad token
            self.pad_token = self.eos_token

    @classmethod
    def from_folder(cls, folder: str | Path, *, padding_side: str = "left") -> LightTokenizer:
        folder = Path(folder)
        problem = light_tokenizer_problem(folder)
        if problem is not None:
            raise ValueError(f"the tokenizer in {folder} needs transformers: {problem}")
        config = json.loads((folder / CONFIG_FILE).read_text())
        template = chat_template_text(folder, config)
        return cls(Tokenizer.from_file(str(folder / TOKENIZER_FILE)), config, padding_side=padding_side,
                   chat_template=template if isinstance(template, str) else None)

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self._tokenizer.token_to_id(token)

    @property
    def bos_token_id(self) -> int | None:
        return self._id(self.bos_token)

    @property
    def eos_token_id(self) -> int | None:
        return self._id(self.eos_token)

    @property
    def pad_token_id(self) -> int | None:
        return self._id(self.pad_token)

    @property
    def unk_token_id(self) -> int | None:
        return self._id(self.unk_token)

    @property
    def all_special_ids(self) -> list[int]:
        tokens = (self.bos_token, self.eos_token, self.unk_token, self.pad_token)
        return sorted({i for i in map(self._id, tokens) if i is not None})

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, token_ids: int | list[int], skip_special_tokens: bool = False) -> str:
        ids = [token_ids] if isinstance(token_ids, int) else [int(i) for i in token_ids]
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def batch_decode(self, sequences: list[list[int]], skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(seq, skip_special_tokens=skip_special_tokens) for seq in sequences]

    def convert_ids_to_tokens(self, ids: int | list[int]) -> str | None | list[str | None]:
        if isinstance(ids, int):
            return self._tokenizer.id_to_token(ids)
        return [self._tokenizer.id_to_token(int(i)) for i in ids]

    def apply_chat_template(
        self, conversation: list[dict[str, str]], *, tokenize: bool = True, add_generation_prompt: bool = False
    ) -> str | list[int]:
        """transformers' rendering of one conversation: the text, or its ids (no special tokens added)."""
        if self._template is None:
            raise ValueError("this tokenizer has no chat template")
        specials = {name: getattr(self, name) for name in _SPECIAL if getattr(self, name) is not None}
        text = self._template.render(messages=conversation, tools=None, documents=None,
                                     add_generation_prompt=add_generation_prompt, **specials)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def save_pretrained(self, directory: str | Path) -> None:
        """tokenizer.json and tokenizer_config.json, loadable by `AutoTokenizer.from_pretrained`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._tokenizer.save(str(directory / TOKENIZER_FILE))
        config = {**self._config, "padding_side": self.padding_side}
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if self.chat_template and "chat_template" not in config:
            (directory / TEMPLATE_FILE).write_text(self.chat_template)
