"""The paper's prompts and ICL score for pretrained models (Ji-An et al. 2024): prompts of the most frequent tokens of
a text, or of a token list, and the ICL score on 512-token text windows (loss at token 500 minus token 50, as the
authors' ablation counts it), checked against the model's own logits; every bad combination is one line."""

from __future__ import annotations

import gzip
import json

import pytest
import torch
import transformers
from support.cli import refused_in_one_line, run_command
from support.pretrained import SPECIAL, V, save_model, word_tokenizer

from primacy.analysis.heads.natural_text import frequent_tokens, text_windows, token_mask
from primacy.errors import UsageError
from primacy.workflows.induction.hf_models import load_pretrained
from primacy.workflows.induction.texts import TextSettings, read_texts

WORDS = len(SPECIAL), V - 6  # the tokenizer's ordinary words are w3 .. w89, ids 3 .. 89


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A tiny GPT-2 with 512 positions (room for the paper's windows) and a word-level tokenizer with BOS <s> = 0."""
    path = tmp_path_factory.mktemp("hf") / "gpt2-512"
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=512, vocab_size=V, bos_token_id=0,
                                     eos_token_id=1)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    word_tokenizer(bos=True).save_pretrained(path)
    return path


def _document(ids) -> str:
    return " ".join(f"w{i}" for i in ids)


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """C4-style JSON lines, gzipped: 6 documents of 600 random words, one of 100 (too short for a window), and a
    frequency ranking built in: word w(10 + k) is added 200 - 5k times to the end of the first document for k < 20."""
    generator = torch.Generator().manual_seed(1)
    documents = [torch.randint(*WORDS, (600,), generator=generator).tolist() for _ in range(6)]
    documents.insert(2, torch.randint(*WORDS, (100,), generator=generator).tolist())
    documents[0] += [10 + k for k in range(20) for _ in range(200 - 5 * k)]
    path = tmp_path_factory.mktemp("texts") / "c4-validation.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for ids in documents:
            f.write(json.dumps({"text": _document(ids), "url": "https://example.org"}) + "\n")
    return path, documents


def test_frequent_tokens_rank_by_count_then_id_and_skip_disallowed():
    documents = [torch.tensor([5, 5, 5, 2, 2, 7, 7, 9]), torch.tensor([9, 0, 0, 0, 0])]
    assert frequent_tokens(documents, 10, 3).tolist() == [0, 5, 2], "0 four times, 5 three, then 2 before 7 and 9"
    allowed = torch.ones(10, dtype=torch.bool)
    allowed[0] = False
    assert frequent_tokens(documents, 10, 4, allowed).tolist() == [5, 2, 7, 9]
    with pytest.raises(UsageError, match="texts hold 4 distinct prompt tokens: 5 most frequent ones were asked for"):
        frequent_tokens(documents, 10, 5, allowed)
    with pytest.raises(UsageError, match=r"outside \[0, 8\]"):
        frequent_tokens(documents, 9, 2)


def test_text_windows_put_bos_first_skip_short_documents_and_stop_at_the_limit():
    documents = [torch.arange(10, 20), torch.arange(3), torch.arange(30, 37), torch.arange(40, 46)]
    windows = text_windows(documents, bos=0, length=6)
    assert windows.tolist() == [[0, 10, 11, 12, 13, 14], [0, 30, 31, 32, 33, 34], [0, 40, 41, 42, 43, 44]]
    assert text_windows(documents, bos=None, length=6, limit=1).tolist() == [[10, 11, 12, 13, 14, 15]]
    with pytest.raises(UsageError, match="no document of at least 11 tokens \\(the longest has 10\\)"):
        text_windows(documents, bos=0, length=12)


def test_a_token_list_becomes_a_mask_of_the_vocabulary():
    assert token_mask(torch.tensor([4, 1, 4]), 6).tolist() == [False, True, False, False, True, False]
    with pytest.raises(UsageError, match=r"holds token 6, outside the model's vocabulary \[0, 5\]"):
        token_mask(torch.tensor([1, 6]), 6)
    allowed = torch.tensor([False, True, True, True, True, True])
    with pytest.raises(UsageError, match="holds token 0, which prompts may not use"):
        token_mask(torch.tensor([0, 2]), 6, allowed)


def test_texts_are_json_lines_with_text_or_one_document_per_line(tmp_path):
    (tmp_path / "plain.txt").write_text("first document\n\nsecond one\n")
    assert read_texts(tmp_path / "plain.txt") == ["first document", "second one"]
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"body": "no text"}\n')
    with pytest.raises(UsageError, match="bad.jsonl line 2 is not a JSON object with a 'text' string"):
        read_texts(tmp_path / "bad.jsonl")


def test_frequent_prompts_are_the_n_most_frequent_words_of_the_texts(gpt2, texts):
    path, documents = texts
    model = load_pretrained(str(gpt2))
    settings = TextSettings("frequent", "repeats", str(path))
    tokens = settings.documents(model)
    assert [t.tolist() for t in tokens] == documents, "the texts' words are the tokenizer's ids"
    counts = torch.bincount(torch.cat([torch.tensor(d) for d in documents]), minlength=V)
    expected = sorted(range(V), key=lambda i: (-int(counts[i]), i))[:11]
    mask = settings.prompt_tokens(model, 11, tokens)
    assert torch.nonzero(mask)[:, 0].tolist() == sorted(expected)
    assert set(range(10, 20)) <= set(expected), "the words added 200 - 5k times lead the ranking"


def _paper_icl_score(path, windows: torch.Tensor) -> float:
    """The authors' ICL score, written from their description: per-token losses of the whole window (index i
    predicts token i + 1), index 500 minus index 50, averaged over windows."""
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        logits = model(windows).logits
    losses = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), windows[:, 1:], reduction="none")
    return float((losses[:, 500] - losses[:, 50]).mean())


def test_the_paper_icl_score_on_text_windows_is_loss_500_minus_loss_50(gpt2, texts, tmp_path):
    path, documents = texts
    windows = torch.tensor([[0, *d[:511]] for d in documents if len(d) >= 511])  # BOS, then the text
    assert len(windows) == 6, "the short document gives no window"
    out = tmp_path / "icl"
    run_command("analyze", "icl", "--hf_model", gpt2, "--out", out, "--n_items", 11, "--prompts", 4, "--formats",
                "--icl_score", "paper", "--texts", path, "--prompt_vocabulary", "frequent", "--sequences", 5)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["icl_sequences"] == 5 and summary["icl_score_kind"] == "paper"
    assert summary["icl_score"] == pytest.approx(_paper_icl_score(gpt2, windows[:5]), abs=1e-5)
    assert summary["prompt_vocabulary"] == "frequent" and summary["prompt_tokens"] == 11
    assert len(summary["prompt_token_ids"]) == 11
    ablation = tmp_path / "ablation"
    run_command("analyze", "ablation", "--hf_model", gpt2, "--heads", out / "heads.csv", "--out", ablation,
                "--random", 2, "--icl_score", "paper", "--texts", path, "--formats")
    result = json.loads((ablation / "ablation.json").read_text())
    assert (result["early"], result["late"]) == (51, 501) and result["n_items"] is None
    assert sum(result["scores"]["intact"]) / 6 == pytest.approx(_paper_icl_score(gpt2, windows), abs=1e-5)


def test_prompts_from_a_token_file(gpt2, tmp_path):
    (tmp_path / "tokens.txt").write_text("\n".join(str(i) for i in range(20, 31)))
    out = tmp_path / "icl"
    run_command("analyze", "icl", "--hf_model", gpt2, "--out", out, "--n_items", 11, "--prompts", 3, "--formats",
                "--prompt_vocabulary", tmp_path / "tokens.txt")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prompt_token_ids"] == list(range(20, 31)) and summary["icl_score_kind"] == "repeats"


@pytest.mark.parametrize(("case", "expected"), [
    ("frequent-without-texts", "prompt_vocabulary=frequent needs natural text: give --texts"),
    ("texts-unused", "is unused: it is read for --prompt_vocabulary frequent or --icl_score paper"),
    ("missing-texts", "does not exist: give a text file"),
    ("not-a-vocabulary",
     "prompt_vocabulary=most is neither all nor frequent nor unembedding_bias nor a file of token ids"),
    ("words-in-token-file", "holds 'w3': it must hold token ids (integers) only"),
    ("token-outside", "prompt_vocabulary holds token 500, outside the model's vocabulary [0, 95]"),
    ("special-token", "prompt_vocabulary holds token 1, which prompts may not use"),
    ("sequences-unused", "sequences=5 is unused: it counts the text windows of --icl_score paper"),
    ("default-n-too-long", "prompts of n_items=100 have 201 tokens: the model's positions allow at most 128"),
    ("windows-too-long", "the paper's ICL-score windows have 512 tokens: the model's positions allow at most 128"),
])
def test_bad_text_settings_get_one_line(gpt2, texts, tmp_path, case, expected, capsys):
    (tmp_path / "words.txt").write_text("w3 w4")
    (tmp_path / "outside.txt").write_text("3 500")
    (tmp_path / "special.txt").write_text("1 3")
    short = save_model("gpt2", tmp_path / "gpt2-128", tokenizer=True) if case.endswith("too-long") else gpt2
    extra = {"frequent-without-texts": ["--prompt_vocabulary", "frequent"],
             "texts-unused": ["--texts", texts[0]],
             "missing-texts": ["--icl_score", "paper", "--texts", tmp_path / "nowhere.jsonl"],
             "not-a-vocabulary": ["--prompt_vocabulary", "most"],
             "words-in-token-file": ["--prompt_vocabulary", tmp_path / "words.txt"],
             "token-outside": ["--prompt_vocabulary", tmp_path / "outside.txt"],
             "special-token": ["--prompt_vocabulary", tmp_path / "special.txt"],
             "sequences-unused": ["--sequences", 5],
             "default-n-too-long": [],
             "windows-too-long": ["--icl_score", "paper", "--texts", texts[0], "--n_items", 11]}[case]
    refused_in_one_line(["analyze", "icl", "--hf_model", short, "--out", tmp_path / "out", "--prompts", 2, *extra],
                        expected, capsys)
    assert not (tmp_path / "out").exists(), "nothing written"


def test_texts_are_refused_for_a_run_trained_here_and_for_ablation_settings_they_replace(tmp_path, capsys):
    refused_in_one_line(["analyze", "icl", "--config", tmp_path / "config.yaml", "--ckpt_path", tmp_path / "last.ckpt",
                         "--out", tmp_path / "out", "--icl_score", "paper", "--texts", tmp_path / "t.txt"],
                        "icl_score=paper needs a tokenizer: it is for --hf_model, not a run trained here", capsys)
    refused_in_one_line(["analyze", "icl", "--config", tmp_path / "config.yaml", "--ckpt_path", tmp_path / "last.ckpt",
                         "--out", tmp_path / "out", "--prompt_vocabulary", "unembedding_bias"],
                        "prompt_vocabulary=unembedding_bias needs a tokenizer and an unembedding: it is for --hf_model",
                        capsys)
    refused_in_one_line(["analyze", "ablation", "--hf_model", tmp_path, "--heads", tmp_path / "heads.csv", "--out",
                         tmp_path / "out", "--icl_score", "paper", "--texts", tmp_path / "t.txt", "--repeats", 3],
                        "repeats=3 is unused with --icl_score paper: its sequences are text windows", capsys)
