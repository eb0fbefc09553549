"""What ``analyze icl|ablation`` read besides a model: natural text (the paper's ICL score and its most frequent
tokens) and token lists, and the prompt vocabulary and ICL-score sequences they give a model (Ji-An et al. 2024)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from primacy.analysis.heads.model import HeadModel, check_length
from primacy.analysis.heads.natural_text import (
    PAPER_EARLY,
    PAPER_LATE,
    WINDOW,
    frequent_tokens,
    text_windows,
    token_mask,
)
from primacy.analysis.heads.pretrained import PretrainedHeads
from primacy.errors import UsageError

PROMPT_VOCABULARIES = ("all", "frequent", "unembedding_bias")  # or a file of token ids
ICL_SCORES = ("repeats", "paper")


def read_texts(path: str | Path) -> list[str]:
    """Documents of a text file: JSON lines with a ``text`` field (C4's format; ``.jsonl``, ``.json``, optionally
    ``.gz``), or plain UTF-8 text with one document per line; blank documents are dropped."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"texts={path} does not exist: give a text file (JSON lines with a 'text' field, or one "
                         f"document per line)")
    opener = gzip.open if path.suffix == ".gz" else open
    json_lines = path.name.removesuffix(".gz").endswith((".jsonl", ".json"))
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise UsageError(f"texts={path} could not be read as UTF-8 text: {error}") from None
    if not json_lines:
        return [line for line in lines if line.strip()]
    documents = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)["text"]
        except (json.JSONDecodeError, KeyError, TypeError):
            text = None
        if not isinstance(text, str):
            raise UsageError(f"texts={path} line {number} is not a JSON object with a 'text' string")
        if text.strip():
            documents.append(text)
    return documents


def read_token_ids(path: str | Path) -> torch.Tensor:
    """Token ids from a file of integers separated by white space (one per line, say): (k,) int64."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"prompt_vocabulary={path} is neither {' nor '.join(PROMPT_VOCABULARIES)} nor a file of "
                         f"token ids")
    ids = []
    for word in path.read_text().split():
        try:
            ids.append(int(word))
        except ValueError:
            raise UsageError(f"prompt_vocabulary={path} holds {word!r}: it must hold token ids (integers) "
                             "only") from None
    return torch.tensor(ids, dtype=torch.long)


def check_text_options(prompt_vocabulary: str, icl_score: str, texts: str | None, pretrained: bool) -> None:
    """The prompt vocabulary, ICL score and texts agree with each other and with the model's source."""
    if icl_score not in ICL_SCORES:
        raise UsageError(f"icl_score={icl_score} is unknown: choose one of {', '.join(ICL_SCORES)}")
    needs_texts = [f"{name}={value}" for name, value in (("prompt_vocabulary", prompt_vocabulary),
                                                          ("icl_score", icl_score)) if value in ("frequent", "paper")]
    if needs_texts and texts is None:
        raise UsageError(f"{needs_texts[0]} needs natural text: give --texts (JSON lines with a 'text' field, e.g. "
                         f"C4's files, or one document per line)")
    if texts is not None and not needs_texts:
        raise UsageError(f"texts={texts} is unused: it is read for --prompt_vocabulary frequent or --icl_score paper")
    if needs_texts and not pretrained:
        raise UsageError(f"{needs_texts[0]} needs a tokenizer: it is for --hf_model, not a run trained here")
    if prompt_vocabulary == "unembedding_bias" and not pretrained:
        raise UsageError("prompt_vocabulary=unembedding_bias needs a tokenizer and an unembedding: it is for "
                         "--hf_model, not a run trained here")
    if prompt_vocabulary not in PROMPT_VOCABULARIES:
        read_token_ids(prompt_vocabulary)  # a bad file is an error now, before any model is loaded


@dataclass(frozen=True)
class TextSettings:
    """Which tokens prompts draw from (``prompt_vocabulary``: all, frequent, unembedding_bias or a token-id file),
    which ICL score is computed (``icl_score``: repeats or paper), on which ``texts``, and how many paper windows at
    most."""

    prompt_vocabulary: str = "all"
    icl_score: str = "repeats"
    texts: str | None = None
    sequences: int | None = None  # paper ICL score: windows used (None: every document long enough)

    def recorded(self) -> dict:
        return {"prompt_vocabulary": self.prompt_vocabulary, "icl_score_kind": self.icl_score,
                "texts": self.texts}

    def prompt_tokens(self, model: HeadModel, n: int, documents: Sequence[torch.Tensor] | None) -> torch.Tensor | None:
        """The (vocab_size,) mask of the tokens prompts of n items draw from (None: the model's own vocabulary)."""
        if self.prompt_vocabulary == "all":
            return None
        if self.prompt_vocabulary == "frequent":
            chosen = frequent_tokens(documents, model.vocab_size, n, model.allowed)
        elif self.prompt_vocabulary == "unembedding_bias":
            chosen = model.paper_prompt_tokens(n)
        else:
            chosen = read_token_ids(self.prompt_vocabulary)
        mask = token_mask(chosen, model.vocab_size, model.allowed, "prompt_vocabulary")
        if model.bos is not None and mask[model.bos]:
            raise UsageError(f"prompt_vocabulary holds the BOS token {model.bos}, which starts every prompt")
        return mask

    def documents(self, model: PretrainedHeads) -> list[torch.Tensor] | None:
        """The texts as the model's tokens, when a setting needs them (``check_text_options``: only for a pretrained
        model)."""
        if self.texts is None:
            return None
        return model.tokenize(read_texts(self.texts))

    def paper_windows(self, model: HeadModel, documents: Sequence[torch.Tensor]) -> tuple[torch.Tensor, int, int]:
        """The paper's ICL-score windows (B, 512) of the documents and its (early, late) positions."""
        check_length(model, WINDOW, "the paper's ICL-score windows")
        return text_windows(documents, model.bos, WINDOW, self.sequences), PAPER_EARLY, PAPER_LATE
