"""Hugging Face causal language models loaded for ``primacy analyze icl|ablation --hf_model``: from a hub id or a
local directory, with the ``transformers`` library (the optional extra ``primacy[hf]``) and eager attention, as
``PretrainedHeads`` (``primacy.analysis.heads.pretrained``); every failure is a one-line UsageError."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from primacy.analysis.heads.pretrained import MAMBA_TYPES, PretrainedHeads, PretrainedMamba, vocabulary
from primacy.checks import one_of
from primacy.errors import UsageError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICES = ("cpu", "cuda")
INSTALL = "pip install -e \".[hf]\" (or pip install transformers)"
# Architectures only their authors' remote code implements (transformers needs trust_remote_code), which primacy
# never runs: Qwen-7B (v1), one of the paper's models, fuses q, k, v into a `c_attn` that is an nn.Linear, not
# GPT-2's Conv1D, so reading it as GPT-2 would slice the wrong weights.
REMOTE_CODE = {"qwen": "Qwen (v1, model_type qwen)"}


def transformers_module():
    """The ``transformers`` package, or a one-line UsageError saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise UsageError(f"hf_model needs the transformers library, which is not installed: {INSTALL}") from None
    return transformers


def check_source(name: str, revisions: list[str] | None = None) -> None:
    """A one-line error for a local path that cannot be a model directory (a hub id is left to the hub), whose
    safetensors files do not open, or that is given ``revisions``: a directory holds one checkpoint, and transformers
    would load it whatever the revision."""
    path = Path(name).expanduser()
    if path.is_file():
        raise UsageError(f"hf_model={name} is a file: give a model directory (saved with save_pretrained) or a hub id")
    if path.is_dir() and not (path / "config.json").is_file():
        raise UsageError(f"hf_model={name} is a directory without config.json: give a model directory saved with "
                         f"save_pretrained, or a hub id")
    if not path.exists() and name.startswith(("/", ".", "~")):
        raise UsageError(f"hf_model={name} does not exist: give a model directory or a hub id such as gpt2")
    if path.is_dir():
        try:
            model_type = json.loads((path / "config.json").read_text()).get("model_type")
        except (OSError, ValueError, AttributeError):
            model_type = None  # transformers says what is wrong with it
        if model_type in REMOTE_CODE:
            raise UsageError(f"hf_model={name} is {REMOTE_CODE[model_type]}, whose architecture is remote code that "
                             f"primacy does not run (trust_remote_code): use a model transformers implements, such "
                             f"as Qwen2 or later for Qwen")
        _check_weights(name, path)
        if revisions:
            raise UsageError(f"revision={' '.join(revisions)} is for a hub id, not the local directory hf_model={name},"
                             f" which holds one checkpoint whatever the revision: leave out --revision, or give one "
                             f"directory per checkpoint (--hf_model DIR DIR ...)")


def load_pretrained(name: str, revision: str | None = None, dtype: str = "float32",
                    device: str = "cpu", group: int = 1) -> PretrainedHeads | PretrainedMamba:
    """A causal LM from a hub id or local directory, with eager attention, its tokenizer's vocabulary (or the
    config's without one): its attention heads, or a Mamba's inner channels ``group`` to a head; every failure is a
    one-line UsageError naming the parameter."""
    transformers = transformers_module()
    one_of("dtype", dtype, DTYPES)
    one_of("device", device, DEVICES)
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("device=cuda is invalid: this machine has no CUDA device, use --device cpu")
    check_source(name, [revision] if revision else None)
    transformers.utils.logging.disable_progress_bar()  # one model, one line of output: no per-shard progress bars
    where = f"hf_model={name}" + (f" (revision={revision})" if revision else "")
    from safetensors import SafetensorError  # a dependency of transformers

    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            name, revision=revision, dtype=DTYPES[dtype], attn_implementation="eager")
    except SafetensorError as err:  # a hub download's (a directory's were checked): safetensors names no file
        raise _unreadable(where, "its weights", err) from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"{where} could not be loaded: {_first_line(err)}") from None
    model.to(device).eval()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(name, revision=revision)
    except (OSError, ValueError, KeyError, TypeError):  # no tokenizer files: token ids from the config
        tokenizer = None
    vocab = vocabulary(tokenizer, model.config, model.get_input_embeddings().weight.shape[0])
    if getattr(model.config, "model_type", None) in MAMBA_TYPES:
        return PretrainedMamba(model, vocab, where, tokenizer, group)
    if group != 1:
        raise UsageError(f"group={group} is invalid for {where}: its heads are its attention heads (group 1)")
    return PretrainedHeads(model, vocab, where, tokenizer)


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _check_weights(name: str, directory: Path) -> None:
    """Every safetensors file of a model directory opens (its header is read, not its tensors): a damaged or cut
    short one is refused before any model of a series loads."""
    from safetensors import SafetensorError, safe_open  # a dependency of transformers

    for file in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(file, "pt"):
                pass
        except (SafetensorError, OSError) as err:
            raise _unreadable(f"hf_model={name}", str(file), err) from None


def _unreadable(where: str, file: str, error: BaseException) -> UsageError:
    return UsageError(f"{where} could not be loaded: {file} is not a readable safetensors file, damaged or cut short "
                      f"({_first_line(error)}): save or download the model again")


def checkpoint_name_step(name: str, required: bool = True) -> int | None:
    """The training step in a revision or directory name: the number after ``step`` or ``checkpoint-``
    (``step143000``, ``pythia-70m-step512``, ``checkpoint-500``), else, if ``required``, its last number; None when
    not required and the name says no step (``gpt2``, ``pythia-70m``)."""
    label = Path(name).name or name
    marked = re.findall(r"(?:step|checkpoint)[-_]?(\d+)", label)
    if marked:
        return int(marked[-1])
    numbers = re.findall(r"\d+", label) if required else []
    if required and not numbers:
        raise UsageError(f"checkpoint {name} names no training step: give revisions or directories whose names end "
                         f"in their step (e.g. step1000)")
    return int(numbers[-1]) if numbers else None
