"""`analyze icl|ablation --hf_model`: tiny randomly initialised GPT-2, GPT-NeoX, Llama (grouped-query), Qwen2 and
Mamba models built from config objects, saved with save_pretrained and loaded through the code a user runs; no hub."""

from __future__ import annotations

import csv
import json
import re
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers
from support.cli import refused_in_one_line, run_command
from support.pretrained import HEADS, LAYERS, SPECIAL, D, V, hf_config, save_model

from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.analysis import analyze_heads
from primacy.analysis.heads.pretrained import family, mamba_mixer_influence
from primacy.cli import main
from primacy.errors import UsageError
from primacy.tasks.prompts import repeated_prompt
from primacy.workflows.induction.hf_models import checkpoint_name_step, load_pretrained


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {"gpt2": save_model("gpt2", root / "gpt2", tokenizer=True),
            "neox": save_model("neox", root / "neox"),
            "llama": save_model("llama", root / "llama"),
            "qwen2": save_model("qwen2", root / "qwen2", tokenizer="no-bos")}


def _prompts(heads, n=11, batch=5):
    return repeated_prompt(n, heads.vocab_size, heads.bos, batch, torch.Generator().manual_seed(0), heads.allowed)


@pytest.mark.parametrize("kind", ["gpt2", "neox", "llama", "qwen2"])
def test_captured_attention_is_the_models_own(models, kind):
    heads = load_pretrained(str(models[kind]))
    tokens = _prompts(heads)
    scores, weights = heads.attention(tokens, [0, 1])  # layers B heads T T
    with torch.no_grad():
        own = heads.model(tokens, output_attentions=True, use_cache=False).attentions
    for layer in range(LAYERS):
        assert torch.equal(weights[layer], own[layer]), "the weights the model itself returns"
        assert torch.allclose(scores[layer].softmax(-1), own[layer], atol=1e-6), "scores are their softmax input"
    later, _ = heads.attention(tokens, [1])
    assert torch.equal(later[0], scores[1]), "one layer alone is the same layer"


def test_gpt2_scores_are_scaled_query_key_products(models):
    heads = load_pretrained(str(models["gpt2"]))
    tokens = _prompts(heads)
    scores, _ = heads.attention(tokens, [0])
    with torch.no_grad():
        x = heads.model.transformer.h[0].ln_1(heads.model.transformer.wte(tokens) + heads.model.transformer.wpe(
            torch.arange(tokens.shape[1])))
        q, k, _ = heads.model.transformer.h[0].attn.c_attn(x).split(D, dim=2)
        q, k = (t.view(*t.shape[:2], HEADS, D // HEADS).transpose(1, 2) for t in (q, k))
        expected = q @ k.transpose(-1, -2) / (D // HEADS) ** 0.5  # B heads T T
    causal = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool).tril()
    assert torch.allclose(scores[0][..., causal], expected[..., causal], atol=1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "neox", "llama"])
def test_ablation_zeroes_the_heads_slice_of_the_output_projection_input(models, kind):
    heads = load_pretrained(str(models[kind]))
    projection = {"gpt2": "c_proj", "neox": "dense", "llama": "o_proj"}[kind]
    module = getattr(heads.attention_modules[1], projection)
    seen = []
    handle = module.register_forward_hook(lambda m, args, out: seen.append((args[0].clone(), out.clone())))
    tokens = _prompts(heads)
    before = {k: v.clone() for k, v in heads.model.state_dict().items()}
    try:
        intact = heads.token_losses(tokens)
        with heads.ablate_heads([(1, 2)]):
            ablated = heads.token_losses(tokens)
        again = heads.token_losses(tokens)
    finally:
        handle.remove()
    (x, _), (_, y_ablated) = seen[0], seen[1]
    by_hand = x.clone().view(*x.shape[:-1], HEADS, D // HEADS)
    by_hand[..., 2, :] = 0
    expected = module(by_hand.view(*x.shape))  # the layer-1 input is unchanged by a layer-1 ablation
    assert torch.allclose(y_ablated, expected, atol=1e-6)
    assert not torch.allclose(ablated, intact) and torch.equal(again, intact), "undone when the block closes"
    assert torch.allclose(heads.token_losses(tokens, (3, 7)), intact[:, [2, 6]], atol=1e-5), "only some positions"
    assert all(torch.equal(v, before[k]) for k, v in heads.model.state_dict().items()), "no weight is touched"


def _dense_ov(heads, kind: str, layer: int, head: int) -> torch.Tensor:
    """The head's full OV circuit (V, V) in float64, computed through the model's own modules as its forward pass
    splits heads (and, for grouped-query attention, transformers' repeat_kv), biases removed."""
    model = heads.model.double()
    attn = heads.attention_modules[layer]
    w_e = model.get_input_embeddings().weight  # V D
    d = D // HEADS
    zero = torch.zeros(1, D, dtype=torch.float64)
    with torch.no_grad():
        if kind == "gpt2":
            value = (attn.c_attn(w_e) - attn.c_attn(zero)).split(D, dim=-1)[2].view(V, HEADS, d)[:, head]
            out = attn.c_proj
        elif kind == "neox":
            value = (attn.query_key_value(w_e) - attn.query_key_value(zero)).view(V, HEADS, 3 * d)[:, head, 2 * d :]
            out = attn.dense
        else:
            from transformers.models.llama.modeling_llama import repeat_kv

            kv = (attn.v_proj(w_e) - attn.v_proj(zero)).view(1, V, -1, d).transpose(1, 2)  # 1 kv V d
            value = repeat_kv(kv, HEADS // kv.shape[1])[0, head]  # V d
            out = attn.o_proj
        slot = torch.zeros(V, HEADS, d, dtype=torch.float64)
        slot[:, head] = value
        written = out(slot.view(V, D)) - out(torch.zeros(1, D, dtype=torch.float64))  # V D
        return written @ model.get_output_embeddings().weight.T  # V V


@pytest.mark.parametrize("kind", ["gpt2", "neox", "llama"])
def test_copying_score_is_the_eigenvalue_ratio_of_the_dense_ov_circuit(models, kind):
    heads = load_pretrained(str(models[kind]))
    analysis = analyze_heads(heads, _prompts(heads), 11, CMRGrid.paper())
    dense = load_pretrained(str(models[kind]))
    for result in analysis.heads:
        eig = torch.linalg.eigvals(_dense_ov(dense, kind, result.layer, result.head))
        assert result.copying == pytest.approx(float(eig.sum().real / eig.abs().sum()), abs=1e-5)


def test_grouped_query_heads_share_their_key_value_head(models):
    heads = load_pretrained(str(models["llama"]))  # 4 query heads, 2 key/value heads
    values = [heads.ov_circuit(0, head)[1] for head in range(HEADS)]
    assert torch.equal(values[0], values[1]) and torch.equal(values[2], values[3])
    assert not torch.equal(values[1], values[2])
    w_e, _, _, w_u = heads.ov_circuit(0, 0)
    assert w_e.data_ptr() == w_u.T.data_ptr(), "tied embeddings: W_U is W_E transposed"


def test_prompts_use_the_tokenizer_vocabulary_or_the_config(models):
    gpt2 = load_pretrained(str(models["gpt2"]))
    assert gpt2.vocab.source == "tokenizer" and gpt2.bos == 0
    tokens = _prompts(gpt2, n=20, batch=50)
    assert (tokens[:, 0] == 0).all()
    body = tokens[:, 1:]
    assert body.min() >= len(SPECIAL) and body.max() < V - 6, "no special token, no id without a token"
    neox = load_pretrained(str(models["neox"]))  # no tokenizer files
    assert neox.vocab.source == "config" and neox.bos == 0 and neox.allowed is None
    qwen = load_pretrained(str(models["qwen2"]))  # a tokenizer without BOS
    assert qwen.bos is None
    assert _prompts(qwen, n=11).shape == (5, 22), "r r without BOS"


def _space_word_model(path, kind: str = "gpt2"):
    """A tiny model whose byte-level tokenizer has words with a leading space ('Ġw...' decodes to ' w...'), words
    without one, digits and punctuation; its final norm's bias set so that the unembedding bias is known."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = [f"Ġ{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(40)]  # 'Ġaa', 'Ġba', ...: letters only
    others = ["Ġ12", "Ġa1", "Ġ.", "plain", "Ġ"]
    vocab = {token: i for i, token in enumerate([*SPECIAL, *words, *others])}
    fast = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    fast.pre_tokenizer, fast.decoder = pre_tokenizers.WhitespaceSplit(), decoders.ByteLevel()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=fast, bos_token="<s>", eos_token="</s>",
                                                     pad_token="<pad>")
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(kind))
    norm = model.base_model.ln_f if kind == "gpt2" else model.base_model.norm
    if getattr(norm, "bias", None) is not None:
        with torch.no_grad():
            norm.bias.normal_()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, [vocab[w] for w in words], model


def test_the_papers_prompt_tokens_are_the_space_words_of_largest_unembedding_bias(tmp_path):
    """App. D: words with a leading space, chosen by the unembedding bias b_U = ln_f.bias · W_U (TransformerLens's
    b_U after folding the final LayerNorm); never a special token, digits, punctuation or a word without a space."""
    path, words, model = _space_word_model(tmp_path / "gpt2")
    heads = load_pretrained(str(path))
    expected_bias = model.lm_head.weight.detach() @ model.base_model.ln_f.bias.detach()  # V
    torch.testing.assert_close(heads.unembedding_bias(), expected_bias)
    assert heads.space_words().nonzero().flatten().tolist() == words
    chosen = heads.paper_prompt_tokens(11)
    assert chosen.tolist() == sorted(words, key=lambda i: -expected_bias[i].item())[:11]
    out = tmp_path / "icl"
    run_command("analyze", "icl", "--hf_model", path, "--prompt_vocabulary", "unembedding_bias", "--out", out,
                "--prompts", 2, "--n_items", 11, "--formats")  # the tables alone
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["prompt_token_ids"]) == sorted(chosen.tolist())


def test_the_papers_prompt_tokens_need_an_unembedding_bias(tmp_path, capsys):
    """Llama's RMSNorm has no bias and its output layer none: the criterion is undefined there, and says what stands
    in; a run trained here has no tokenizer to say which tokens are words."""
    path, _, _ = _space_word_model(tmp_path / "llama", kind="llama")
    refused_in_one_line(["analyze", "icl", "--hf_model", path, "--prompt_vocabulary", "unembedding_bias",
                         "--out", tmp_path / "out", "--n_items", 11],
                        "its final norm and output layer have no bias; use --prompt_vocabulary frequent", capsys)
    assert not (tmp_path / "out").exists()


def test_analyze_icl_and_ablation_on_a_saved_model(models, tmp_path, capsys):
    out = tmp_path / "icl"
    run_command("analyze", "icl", "--hf_model", models["gpt2"], "--out", out, "--n_items", 11, "--prompts", 8,
                "--batch_size", 3, "--formats", "png")
    for name in ("heads.csv", "summary.json", "lag_crps.npz", "attention_pattern.png", "lag_crp_fits.png",
                 "cmr_distance_vs_induction.png", "cmr_like_share.png", "cmr_families.png"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hf_model"] == str(models["gpt2"]) and summary["vocabulary"] == "tokenizer"
    assert summary["step"] is None, "the 2 of gpt2 is not a training step"
    assert summary["bos_token"] == 0 and summary["prompt_tokens"] == V - 6 - len(SPECIAL)
    assert np.isfinite(summary["icl_score"])
    with (out / "heads.csv").open() as f:
        assert len(list(csv.DictReader(f))) == LAYERS * HEADS
    ablation = tmp_path / "ablation"
    run_command("analyze", "ablation", "--hf_model", models["gpt2"], "--heads", out / "heads.csv", "--out", ablation,
                "--n_items", 8, "--sequences", 12, "--random", 3, "--formats", "png")
    result = json.loads((ablation / "ablation.json").read_text())
    assert set(result["summary"]) == {"intact", "top", "random", "random_single"}
    assert len(result["scores"]["intact"]) == 12
    assert {"p_value", "ci_low", "ci_high"} <= set(result["comparisons"]["top_minus_random"])
    printed = capsys.readouterr().out
    assert "intact" in printed and "random ablated" in printed


def test_layers_restrict_the_analysis(models, tmp_path):
    run_command("analyze", "icl", "--hf_model", models["llama"], "--out", tmp_path, "--layers", 1, "--n_items", 11,
                "--prompts", 4, "--formats")
    with (tmp_path / "heads.csv").open() as f:
        assert {row["layer"] for row in csv.DictReader(f)} == {"1"}
    assert json.loads((tmp_path / "summary.json").read_text())["layers"] == [1]
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".png", ".pdf")], "--formats with none: tables alone"


def test_a_checkpoint_series_gives_the_emergence_table(models, tmp_path):
    series = [save_model("neox", tmp_path / f"pythia-step{step}", seed=step) for step in (2000, 1000)]
    out = tmp_path / "out"
    run_command("analyze", "icl", "--hf_model", *series, "--out", out, "--n_items", 11, "--prompts", 4, "--formats",
                "png")
    with (out / "emergence.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [1000, 2000]
    assert {"top_induction", "top_cmr_distance", "beta_enc", "cmr_like_share", "icl_score"} <= set(rows[0])
    assert (out / "emergence.png").is_file()
    assert json.loads((out / "step1000" / "summary.json").read_text())["step"] == 1000


def test_checkpoint_steps_come_from_names():
    assert checkpoint_name_step("step143000") == 143000
    assert checkpoint_name_step("/models/pythia-70m-step512/") == 512
    assert checkpoint_name_step("runs/checkpoint-500") == 500
    assert checkpoint_name_step("ckpt-7") == 7, "a series' names need a step: their last number"
    assert checkpoint_name_step("pythia-70m", required=False) is None, "a model's size is not its step"
    assert checkpoint_name_step("gpt2", required=False) is None


@pytest.mark.parametrize(("case", "expected"), [
    ("not-a-model", "is a directory without config.json"),
    ("file", "is a file"),
    ("missing", "does not exist"),
    ("hub-offline", "hf_model=nobody/no-such-model could not be loaded"),
    ("no-attention", "hf_model={tmp}/mamba (falcon_mamba) has no attention heads primacy can read"),
    ("layers", "layers=[2] is invalid: the model has 2 layers"),
    ("two-sources", "hf_model and config/ckpt_path are two sources"),
    ("series-grid", "give several revisions of one model, or several directories"),
    ("qwen-v1", "is Qwen (v1, model_type qwen), whose architecture is remote code that primacy does not run"),
])
def test_bad_models_get_one_line(models, tmp_path, case, expected, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no hub here: fail at once, no retries
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "weights.bin").write_text("x")
    if case == "no-attention":  # FalconMamba's norms on B, C and Δ are not read: neither attention nor plain Mamba
        torch.manual_seed(0)
        config = transformers.FalconMambaConfig(vocab_size=V, hidden_size=16, state_size=4, num_hidden_layers=1)
        transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "mamba")
        capsys.readouterr()  # saving may draw a progress bar: only the command's error is read
    if case == "qwen-v1":  # the config of Qwen-7B (v1): its model class is remote code
        (tmp_path / "qwen").mkdir()
        (tmp_path / "qwen" / "config.json").write_text(json.dumps(
            {"model_type": "qwen", "architectures": ["QWenLMHeadModel"],
             "auto_map": {"AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel"}}))
    source = {"not-a-model": ["--hf_model", empty], "qwen-v1": ["--hf_model", tmp_path / "qwen"],
              "file": ["--hf_model", tmp_path / "weights.bin"],
              "missing": ["--hf_model", tmp_path / "nowhere"], "hub-offline": ["--hf_model", "nobody/no-such-model"],
              "no-attention": ["--hf_model", tmp_path / "mamba"],
              "layers": ["--hf_model", models["llama"], "--layers", 2],
              "two-sources": ["--hf_model", models["llama"], "--config", tmp_path / "config.yaml"],
              "series-grid": ["--hf_model", models["llama"], models["neox"], "--revision", "step1", "step2"]}[case]
    refused_in_one_line(["analyze", "icl", *source, "--out", tmp_path / "out", "--prompts", 2, "--n_items", 11],
                        expected.format(tmp=tmp_path), capsys)
    assert not (tmp_path / "out").exists(), "nothing written"


def test_a_fused_linear_c_attn_is_not_read_as_gpt2():
    """Qwen v1's attention has GPT-2's child names, but its c_attn is an nn.Linear (weight (3D, D), not Conv1D's
    (D, 3D)): slicing it as GPT-2 would read the wrong weights, so it is no family primacy knows."""
    gpt2 = transformers.AutoModelForCausalLM.from_config(hf_config("gpt2"))
    assert family(gpt2.transformer.h[0].attn) == "gpt2"
    qwen_like = torch.nn.Module()
    qwen_like.c_attn, qwen_like.c_proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D, bias=False)
    assert family(qwen_like) is None


def test_missing_transformers_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)  # what `import transformers` meets when not installed
    refused_in_one_line(["analyze", "icl", "--hf_model", "gpt2", "--out", tmp_path / "out"],
                        "needs the transformers library, which is not installed: pip install -e \".[hf]\"", capsys)


def _train_copier(path, steps: int = 200, n: int = 16):
    """A tiny GPT-2 trained on [BOS] r r with |r| = n: predicting the second r needs a head that looks back to the
    token after the earlier occurrence (with one period, position alone tells where)."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=64, n_positions=64, bos_token_id=0,
                                     eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        tokens = repeated_prompt(n, 64, 0, 32, generator)
        loss = model(tokens, labels=tokens).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.save_pretrained(path)
    return path


@pytest.mark.slow  # 11 s: trains a copier first; the analyses of a saved Hugging Face model stay in the default run
def test_the_analysis_finds_the_head_a_trained_model_copies_with(tmp_path):
    path = _train_copier(tmp_path / "copier")
    main(["analyze", "icl", "--hf_model", str(path), "--out", str(tmp_path / "icl"), "--n_items", "16",
          "--prompts", "16", "--formats", "png"])
    with (tmp_path / "icl" / "heads.csv").open() as f:
        rows = sorted(csv.DictReader(f), key=lambda r: -float(r["induction"]))
    best = (int(rows[0]["layer"]), int(rows[0]["head"]))
    assert float(rows[0]["induction"]) > 0.5 and int(rows[0]["lag_crp_peak"]) == 1
    heads = load_pretrained(str(path))
    tokens = repeated_prompt(16, 64, 0, 32, torch.Generator().manual_seed(1))
    copy_loss = {}
    for head in [(layer, h) for layer in range(2) for h in range(4)]:
        with heads.ablate_heads([head]):
            copy_loss[head] = float(heads.token_losses(tokens)[:, 17:].mean())  # the second r after its first token
    assert max(copy_loss, key=copy_loss.get) == best, f"ablating {best} must hurt copying most: {copy_loss}"


def _mamba(path):
    """A tiny Hugging Face Mamba (2 layers, 32 inner channels each) saved in ``path``."""
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=V, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2,
                                      conv_kernel=3, bos_token_id=0, eos_token_id=1)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    return path


def test_a_hugging_face_mambas_influence_rebuilds_each_mixers_output_in_float64(tmp_path):
    """out_proj((Σ_s weights · u) · silu(z)) is the mixer's own output: the influence is exact, not an attribution."""
    heads = load_pretrained(str(_mamba(tmp_path / "mamba")))
    heads.model.double()
    tokens = _prompts(heads, batch=2)
    seen = {}
    hooks = [m.register_forward_hook(lambda module, args, out, i=i: seen.__setitem__(i, (args[0], out)))
             for i, m in enumerate(heads.mixers)]
    with torch.no_grad():
        heads.model(tokens, use_cache=False)
    for hook in hooks:
        hook.remove()
    for i, mixer in enumerate(heads.mixers):
        x, out = seen[i]
        weights, u, gate = mamba_mixer_influence(mixer, x)  # B E T T, B E T, B E T
        assert weights.dtype == torch.float64 and (weights.triu(1) == 0).all()
        mixed = torch.einsum("bets,bes->bet", weights, u) * F.silu(gate)  # B E T
        rebuilt = mixer.out_proj(mixed.transpose(1, 2))
        assert (rebuilt - out).abs().max() <= 1e-10


def test_analyze_icl_and_ablation_read_a_hugging_face_mambas_inner_channels(tmp_path, capsys):
    model = _mamba(tmp_path / "mamba")
    out = tmp_path / "icl"
    run_command("analyze", "icl", "--hf_model", model, "--out", out, "--n_items", 11, "--prompts", 4, "--group", 8,
                "--formats")
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["model_type"], summary["unit"], summary["units_per_head"]) == ("mamba", "inner channel", 8)
    assert (summary["n_layers"], summary["n_heads"]) == (2, 4) and np.isfinite(summary["icl_score"])
    ablation = tmp_path / "ablation"
    run_command("analyze", "ablation", "--hf_model", model, "--heads", out / "heads.csv", "--out", ablation,
                "--n_items", 8, "--sequences", 6, "--random", 2, "--group", 8, "--formats")
    assert json.loads((ablation / "ablation.json").read_text())["k"] == 1
    capsys.readouterr()


def test_ablating_a_mamba_head_zeroes_its_channels_at_the_output_projection(tmp_path):
    heads = load_pretrained(str(_mamba(tmp_path / "mamba")), group=8)
    heads.model.double()
    tokens = _prompts(heads, batch=3)
    with heads.ablate_heads([(1, 2)]):
        ablated = heads.token_losses(tokens)
    with torch.no_grad():
        heads.mixers[1].out_proj.weight[:, 16:24] = 0.0
    torch.testing.assert_close(ablated, heads.token_losses(tokens), rtol=0, atol=1e-12)


@pytest.mark.parametrize("group,message", [
    (5, "group=5 is invalid for hf_model={path}: it must divide the 32 inner channels of a layer"),
    (2, None),
])
def test_a_group_is_for_mamba_channels_only(models, tmp_path, group, message):
    mamba = str(_mamba(tmp_path / "mamba"))
    if message is not None:
        with pytest.raises(UsageError, match=re.escape(message.format(path=mamba))):
            load_pretrained(mamba, group=group)
    with pytest.raises(UsageError, match=re.escape(f"group={group} is invalid for hf_model={models['gpt2']}: its "
                                                   "heads are its attention heads (group 1)")):
        load_pretrained(str(models["gpt2"]), group=group)
