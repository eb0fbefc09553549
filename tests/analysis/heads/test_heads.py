"""Head scores on hand-built attention matrices: a perfect pattern scores 1, a uniform one about 1/position."""

import pytest
import torch

from primacy.analysis.heads.scores import (
    attention_lag_crp,
    copying_score,
    duplicate_token_score,
    induction_score,
    lag_profile,
    previous_token_score,
    second_repeat,
)
from primacy.errors import UsageError
from primacy.tasks.prompts import repeated_prompt

N = 11
T = 2 * N + 1


def pattern(key_of_query) -> torch.Tensor:
    """A (T, T) attention matrix that puts all weight of query q on key_of_query(q) (clamped to be causal)."""
    weights = torch.zeros(T, T)
    for q in range(T):
        weights[q, min(max(key_of_query(q), 0), q)] = 1.0
    return weights


def uniform() -> torch.Tensor:
    return torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]


def test_prompt_is_bos_then_distinct_tokens_twice():
    prompt = repeated_prompt(N, vocab_size=30, bos=0, batch=5, generator=torch.Generator().manual_seed(0))
    assert prompt.shape == (5, T) and (prompt[:, 0] == 0).all()
    assert torch.equal(prompt[:, 1 : N + 1], prompt[:, N + 1 :])
    assert all(len(set(row[1 : N + 1].tolist())) == N and 0 not in row[1:].tolist() for row in prompt)
    with pytest.raises(UsageError, match="n=30 is invalid"):
        repeated_prompt(30, vocab_size=30, bos=0, batch=1, generator=torch.Generator())


def test_perfect_heads_score_one_on_their_own_score_and_zero_on_the_others():
    induction = pattern(lambda q: q - N + 1)
    duplicate = pattern(lambda q: q - N)
    previous = pattern(lambda q: q - 1)
    assert induction_score(induction, N) == 1 and duplicate_token_score(induction, N) == 0
    assert duplicate_token_score(duplicate, N) == 1 and induction_score(duplicate, N) == 0
    assert previous_token_score(previous) == 1 and induction_score(previous, N) == 0


def test_uniform_attention_scores_about_one_over_position():
    expected = (1 / (second_repeat(N) + 1).double()).mean()
    assert induction_score(uniform(), N).item() == pytest.approx(expected.item())
    assert induction_score(uniform(), N) < 0.1


def test_scores_broadcast_over_batch_layer_and_head():
    stacked = torch.stack([pattern(lambda q: q - N + 1), uniform()])[None].expand(3, 2, T, T)  # B h T T
    assert induction_score(stacked, N).shape == (3, 2)
    assert torch.allclose(induction_score(stacked, N)[:, 0], torch.ones(3))


def test_lag_crp_of_an_induction_pattern_peaks_at_plus_one():
    scores = torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))  # causal
    for q in second_repeat(N).tolist():
        for lag in range(-5, 6):
            k = q - N + lag
            if 1 <= k <= q:
                scores[q, k] = 3.0 - abs(lag - 1)  # peak at +1, forward-asymmetric around it
    lags, crp = attention_lag_crp(scores, N)
    assert lags.tolist() == list(range(-5, 6))
    assert lags[crp.argmax()] == 1
    assert torch.isfinite(crp).all(), "masked (-inf) entries never enter"
    assert torch.allclose(crp, 3.0 - (lags - 1).abs().float())


def test_lag_profile_keeps_only_queries_where_every_lag_is_valid():
    scores = torch.arange(T * T, dtype=torch.float32).view(T, T)
    queries, anchors = torch.tensor([3, 8]), torch.tensor([1, 6])
    profile = lag_profile(scores, queries, anchors, torch.tensor([-1, 0, 1]))
    # query 3 with anchor 1: key 0 (BOS) is not allowed, so only query 8 (keys 5, 6, 7) enters
    assert torch.equal(profile, scores[8, 5:8])
    with pytest.raises(ValueError, match="no query has every lag"):
        lag_profile(scores, torch.tensor([3]), torch.tensor([1]), torch.tensor([-1, 0, 1]))


def test_copying_score_is_one_for_copying_minus_one_for_suppression_and_zero_for_rotation():
    torch.manual_seed(0)
    vocab, width, d_head = 20, 8, 2
    w_e = torch.randn(vocab, width)
    w_u = torch.linalg.pinv(w_e)  # D V: unembedding reads back the embedded token
    w_v = torch.randn(width, d_head)
    w_o = torch.linalg.pinv(w_v)  # d_head D: W_V W_O projects onto the value subspace
    assert copying_score(w_e, w_v, w_o, w_u).item() == pytest.approx(1.0, abs=1e-5)
    assert copying_score(w_e, w_v, -w_o, w_u).item() == pytest.approx(-1.0, abs=1e-5)
    rotation = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    assert copying_score(w_e, w_v, rotation @ w_o, w_u).item() == pytest.approx(0.0, abs=1e-5)


def test_the_papers_query_window_gives_each_lag_its_own_queries():
    """Ji-An et al.'s appendix: at lag k, the tokens whose first occurrence s (1-based in the repeat) lies in
    (|k|, n - |k|], so the key s + k stays in the first repeat. With n = 11 after BOS and a score equal to the key's
    position, lag k averages keys s + k over s = |k| + 1 .. 11 - |k|, whose mean is 6 + k; the common window (one
    query set, every lag's key at or before the query) takes s = 6 .. 11 for every lag: 8.5 + k."""
    n = 11
    key = torch.arange(2 * n + 1, dtype=torch.float64)
    scores = key.expand(2 * n + 1, 2 * n + 1)  # T T: score = key position
    lags, paper = attention_lag_crp(scores, n)
    _, common = attention_lag_crp(scores, n, window="common")
    torch.testing.assert_close(paper, 6.0 + lags.double(), rtol=0, atol=1e-12)
    torch.testing.assert_close(common, 8.5 + lags.double(), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="n=10 is too short for the paper's query window at lags ±5: it needs n >= 11"):
        attention_lag_crp(scores[:21, :21], 10)
