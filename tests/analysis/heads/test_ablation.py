"""Head ablation: it equals zeroing the head's value weights, nests and restores; the ICL score is the token loss
at two positions; paired statistics give known answers; the ablation study ablates the heads it reports."""

import copy
import json

import numpy as np
import pytest
import torch

from primacy.analysis.heads.ablation import (
    ablated_count,
    ablation_study,
    icl_positions,
    icl_scores,
    paired_stats,
    repeated_tokens,
)
from primacy.backbones.lstm import LSTMBackbone
from primacy.backbones.transformer import TransformerBackbone, sinusoidal_positions
from primacy.errors import UsageError
from primacy.models.language import LanguageModel
from primacy.tasks.prompts import repeated_prompt

V = 20


def _zero_values(model: TransformerBackbone, layer: int, head: int) -> None:
    """Zero one head's slice of W_V and b_V in the fused qkv Linear (rows laid out [q | k | v], heads of d_head)."""
    d, d_head = model.d_model, model.d_model // model.n_heads
    rows = slice(2 * d + head * d_head, 2 * d + (head + 1) * d_head)
    with torch.no_grad():
        model.blocks[layer].attn.qkv.weight[rows] = 0
        model.blocks[layer].attn.qkv.bias[rows] = 0


def _language_model(seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel(TransformerBackbone(d_model=16, n_layers=2, n_heads=4), vocab_size=V).eval()


def _tokens(n: int = 4, repeats: int = 3, batch: int = 8) -> torch.Tensor:
    return repeated_tokens(n, repeats, vocab_size=V, bos=0, batch=batch, generator=torch.Generator().manual_seed(1))


# ablate_heads


def test_ablating_heads_equals_zeroing_their_value_weights_on_both_paths():
    torch.manual_seed(0)
    model = TransformerBackbone(d_model=16, n_layers=2, n_heads=4).eval()
    reference = copy.deepcopy(model)
    _zero_values(reference, 1, 2)
    _zero_values(reference, 0, 0)
    x = torch.randn(2, 9, 16)
    expected = reference(x)
    with model.ablate_heads([(1, 2), (0, 0)]):
        fused = model(x)
        with model.capture_attention() as layers:
            explicit = model(x)
    assert torch.allclose(fused, expected, atol=1e-6) and torch.allclose(explicit, expected, atol=1e-5)
    assert not torch.allclose(model(x), expected, atol=1e-3), "the ablation ends with the block"
    with reference.capture_attention() as reference_layers:
        reference(x)
    assert torch.allclose(layers[0].weights, reference_layers[0].weights), "ablated heads still attend"


def test_ablating_every_head_of_an_attention_only_model_leaves_input_positions_and_biases():
    torch.manual_seed(0)
    model = TransformerBackbone(d_model=8, n_layers=3, n_heads=2, mlp=False, layer_norm=False)
    x = torch.randn(2, 7, 8)
    biases = sum(block.attn.proj.bias for block in model.blocks)  # D
    with model.ablate_heads(model.heads()):
        out = model(x)
    assert torch.allclose(out, x + sinusoidal_positions(7, 8) + biases, atol=1e-6)
    assert model.heads() == [(layer, head) for layer in range(3) for head in range(2)]


def test_ablation_blocks_nest_and_restore_even_on_exceptions():
    model = TransformerBackbone(d_model=8, n_layers=2, n_heads=2)

    def ablated():
        return [block.attn.ablated for block in model.blocks]

    with model.ablate_heads([(0, 1)]):
        assert ablated() == [{1}, set()]
        with pytest.raises(RuntimeError, match="inside"):
            with model.ablate_heads(iter([(1, 0), (0, 0)])):
                assert ablated() == [{0, 1}, {0}]
                raise RuntimeError("inside")
        assert ablated() == [{1}, set()]
        with model.ablate_heads([]):
            assert ablated() == [{1}, set()]
    assert ablated() == [set(), set()]


@pytest.mark.parametrize("heads,message", [
    ([(0, 0), (2, 0)], r"head \(layer, head\)=\(2, 0\) is invalid: layer must lie in \[0, 1\] and head in \[0, 3\]"),
    ([(0, 0), (0, 4)], r"\(0, 4\) is invalid"),
    ([(0, 0), (0, -1)], r"\(0, -1\) is invalid"),
    ([(0, 0), (0, 1, 2)], r"head \(0, 1, 2\) is invalid: it must be a \(layer, head\) pair"),
    ([(0, 0), (0, 1.5)], r"head \(0, 1.5\) is invalid"),
    ((0, 1), r"head 0 is invalid"),  # one pair instead of a list of pairs
])
def test_bad_heads_are_rejected_and_nothing_is_ablated(heads, message):
    model = TransformerBackbone(d_model=8, n_layers=2, n_heads=4)
    with pytest.raises(UsageError, match=message):
        with model.ablate_heads(heads):
            pass
    assert all(not block.attn.ablated for block in model.blocks)


# evaluation sequences and the ICL score


def test_repeated_tokens_docstring_example():
    """The docstring's example, read from the docstring: its call gives its output, which is BOS and three copies
    of three distinct tokens (the structure, checked apart from the generator's draw)."""
    call, shown = [line.strip().removeprefix("== ") for line in repeated_tokens.__doc__.split("Example::")[1]
                   .strip().splitlines()[:2]]
    tokens = eval(call, {"repeated_tokens": repeated_tokens, "torch": torch})  # noqa: S307 - the docstring's own code
    assert torch.equal(tokens, eval(shown, {"tensor": torch.tensor}))  # noqa: S307
    assert tokens[0, 0] == 0 and len(set(tokens[0, 1:4].tolist()) - {0}) == 3
    assert torch.equal(tokens[0, 1:], tokens[0, 1:4].repeat(3))


def test_repeated_tokens_repeat_distinct_tokens_and_extend_the_prompt():
    tokens = _tokens(n=5, repeats=4, batch=6)
    assert tokens.shape == (6, 21) and (tokens[:, 0] == 0).all() and (tokens[:, 1:] != 0).all()
    assert all(torch.equal(tokens[:, 1:6], tokens[:, 1 + 5 * i : 6 + 5 * i]) for i in range(4))
    assert all(len(set(row[1:6].tolist())) == 5 for row in tokens)
    pair = repeated_tokens(5, 2, vocab_size=V, bos=0, batch=6, generator=torch.Generator().manual_seed(3))
    assert torch.equal(pair, repeated_prompt(5, V, 0, 6, torch.Generator().manual_seed(3)))
    with pytest.raises(UsageError, match="repeats=1 is invalid"):
        repeated_tokens(5, 1, vocab_size=V, bos=0, batch=1, generator=torch.Generator())


def test_icl_positions_are_the_end_of_the_first_repeat_and_the_last_token():
    assert icl_positions(_tokens(n=4, repeats=3)) == (4, 12)
    assert icl_positions(_tokens(n=4, repeats=3)[:, :-1]) == (4, 11), "a last repeat cut short still counts"
    with pytest.raises(UsageError, match="pass early and late explicitly"):
        icl_positions(torch.randint(1, V, (4, 13), generator=torch.Generator().manual_seed(0)))


def test_icl_scores_are_token_losses_at_the_two_positions_and_keep_the_mode():
    model, tokens = _language_model(), _tokens()
    model.train()
    scores = icl_scores(model, tokens, early=4, late=12)
    assert model.training, "the model's mode is restored"
    model.eval()
    with torch.no_grad():
        loss, _ = model.token_losses({"tokens": tokens})  # B T-1; column i predicts token i + 1
    assert scores.shape == (8,) and torch.allclose(scores, loss[:, 11] - loss[:, 3])
    with pytest.raises(UsageError, match=r"late=13 is invalid: it must lie in \[1, 12\]"):
        icl_scores(model, tokens, early=4, late=13)
    with pytest.raises(UsageError, match="early=0 is invalid"):
        icl_scores(model, tokens, early=0, late=12)


def test_ablating_nothing_equals_the_intact_model():
    model, tokens = _language_model(), _tokens()
    intact = icl_scores(model, tokens, 4, 12)
    with model.backbone.ablate_heads([]):
        assert torch.equal(icl_scores(model, tokens, 4, 12), intact)
    with model.backbone.ablate_heads([(1, 3)]):
        assert not torch.allclose(icl_scores(model, tokens, 4, 12), intact)


# paired statistics


def test_identical_scores_differ_by_nothing():
    a = np.random.default_rng(0).normal(size=30)
    stats = paired_stats(a, a.copy())
    assert stats.mean_difference == 0 and stats.standard_error == 0
    assert stats.ci_low == stats.ci_high == 0 and stats.p_value == 1 and stats.n == 30


def test_a_constant_shift_is_significant_with_a_point_interval():
    a = np.random.default_rng(0).normal(size=30)
    stats = paired_stats(a, a + 0.5, resamples=2000)
    assert stats.mean_difference == pytest.approx(0.5) and stats.standard_error == pytest.approx(0, abs=1e-12)
    assert stats.ci_low == pytest.approx(0.5) and stats.ci_high == pytest.approx(0.5)
    assert stats.p_value == pytest.approx(1 / 2001), "only the observed signs reach the observed mean"


def test_small_samples_get_the_exact_sign_flip_p_value():
    stats = paired_stats(np.zeros(4), np.array([1.0, 2.0, 3.0, 4.0]))
    assert stats.mean_difference == 2.5 and stats.standard_error == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    assert stats.p_value == 2 / 16, "only all-plus and all-minus reach |mean| = 2.5"
    assert paired_stats(np.zeros(3), np.array([1.0, -1.0, 0.5])).p_value == 1.0, "every pattern reaches 1/6"


def test_monte_carlo_p_approximates_the_exact_one_and_direction_only_flips_the_sign():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=12), rng.normal(size=12) + 0.4
    exact, sampled = paired_stats(a, b, resamples=2**12), paired_stats(a, b, resamples=2000)
    assert sampled.p_value == pytest.approx(exact.p_value, abs=0.03)
    assert exact.ci_low < exact.mean_difference < exact.ci_high
    swapped = paired_stats(b, a, resamples=2**12)
    assert swapped.mean_difference == pytest.approx(-exact.mean_difference) and swapped.p_value == exact.p_value


def test_paired_stats_reject_bad_input():
    with pytest.raises(UsageError, match="same length"):
        paired_stats(np.zeros(3), np.zeros(4))
    with pytest.raises(UsageError, match="at least 2"):
        paired_stats(np.zeros(1), np.zeros(1))
    with pytest.raises(UsageError, match="resamples=0"):
        paired_stats(np.zeros(3), np.ones(3), resamples=0)


# the ablation study


def test_study_reports_the_scores_of_the_heads_it_ablates():
    model, tokens = _language_model(), _tokens()
    ranked = [(1, 3), (0, 2), (1, 0), (0, 1), (0, 0)]
    result = ablation_study(model, tokens, ranked, fraction=0.4, n_random=3, seed=5, resamples=500)
    json.dumps(result)
    assert result["k"] == 2 and result["top_heads"] == [[1, 3], [0, 2]]  # 0.4 · 5
    assert (result["early"], result["late"]) == (4, 12)
    intact = icl_scores(model, tokens, 4, 12)
    with model.backbone.ablate_heads(ranked[:2]):
        top = icl_scores(model, tokens, 4, 12)
    draws = result["random_heads"]
    assert len(draws) == 3 and all(len(draw) == 2 and len({tuple(h) for h in draw}) == 2 for draw in draws)
    random = []
    for draw in draws:
        with model.backbone.ablate_heads(draw):
            random.append(icl_scores(model, tokens, 4, 12))
    single, draw_means = random[0], torch.stack(random).mean(1)
    random = torch.stack(random).mean(0)
    for name, expected in (("intact", intact), ("top", top), ("random", random), ("random_single", single)):
        assert np.allclose(result["scores"][name], expected.numpy(), atol=1e-6)
        assert result["summary"][name]["mean"] == pytest.approx(expected.mean().item(), abs=1e-6)
        assert result["summary"][name]["se"] == pytest.approx(expected.std().item() / 8**0.5, abs=1e-6)
    assert result["comparisons"]["top_minus_intact"]["mean_difference"] == pytest.approx(
        (top - intact).mean().item(), abs=1e-6)
    assert result["comparisons"]["top_minus_random"]["mean_difference"] == pytest.approx(
        (top - random).mean().item(), abs=1e-6)
    assert result["comparisons"]["top_minus_random_single"]["mean_difference"] == pytest.approx(
        (top - single).mean().item(), abs=1e-6)
    spread = result["random_draws"]  # the baseline over draws: each draw's mean, their mean and SE
    np.testing.assert_allclose(spread["per_draw"], draw_means.numpy(), atol=1e-6)
    assert spread["n"] == 3 and spread["mean"] == pytest.approx(draw_means.mean().item(), abs=1e-6)
    assert spread["se"] == pytest.approx(draw_means.std().item() / 3**0.5, abs=1e-6)
    again = ablation_study(model, tokens, ranked, fraction=0.4, n_random=3, seed=5, resamples=500)
    assert again == result, "reproducible from the seed"
    other = ablation_study(model, tokens, ranked, fraction=0.4, n_random=3, seed=6, resamples=500)
    assert other["random_heads"] != draws


def test_the_ablated_share_is_counted_as_the_authors_count_it():
    assert [ablated_count(0.1, n) for n in (144, 48, 128, 384, 8, 30)] == [14, 4, 12, 38, 1, 3]


def test_ablating_a_silent_head_changes_nothing():
    model, tokens = _language_model(), _tokens()
    _zero_values(model.backbone, 0, 1)  # the head already writes nothing
    result = ablation_study(model, tokens, [(0, 1), (1, 1)], fraction=0.5, n_random=1, early=2, late=11,
                            resamples=500)
    assert (result["early"], result["late"]) == (2, 11)
    assert result["scores"]["top"] == result["scores"]["intact"]
    comparison = result["comparisons"]["top_minus_intact"]
    assert comparison["mean_difference"] == 0 and comparison["p_value"] == 1


@pytest.mark.parametrize("kwargs,message", [
    ({"ranked_heads": []}, "ranked_heads is empty"),
    ({"ranked_heads": [(0, 1), (0, 1)]}, r"ranked_heads is invalid: it names \[\(0, 1\)\] more than once"),
    ({"ranked_heads": [(0, 1), (2, 0)]}, r"names \[\(2, 0\)\], not heads of this model: layer must lie in \[0, 1\]"),
    ({"ranked_heads": [0, 1]}, r"must be a list of \(layer, head\) pairs of integers"),
    ({"ranked_heads": [(0, 1.5)]}, "pairs of integers"),
    ({"fraction": 0.0}, r"fraction=0.0 is invalid: it must lie in \(0, 1\]"),
    ({"n_random": 0}, "n_random=0 is invalid"),
    ({"tokens": torch.randint(1, V, (4, 13), generator=torch.Generator().manual_seed(0))},
     "pass early and late explicitly"),
    ({"tokens": _tokens(batch=1)}, "at least 2"),
])
def test_study_rejects_bad_input(kwargs, message):
    arguments = {"model": _language_model(), "tokens": _tokens(), "ranked_heads": [(0, 1)], **kwargs}
    with pytest.raises(UsageError, match=message):
        ablation_study(**arguments)


def test_study_needs_attention_or_an_exact_influence():
    model = LanguageModel(LSTMBackbone(d_model=8), vocab_size=V)
    with pytest.raises(UsageError, match="backbone LSTMBackbone has no exact token-to-token influence: the head "
                                         "analyses need attention or an exact mixing form"):
        ablation_study(model, _tokens(), [(0, 0)])
