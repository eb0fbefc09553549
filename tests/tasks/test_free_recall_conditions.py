"""Free recall's classic conditions (issue 71): a filled delay and the continual-distractor schedule put distractor
tokens, ids the items never use, into the study phase; the model reads them, is never scored on them and recalls
studied items; the default is immediate recall, with the data of a task without the manipulations; the task keeps the
conformance kit's guarantees and a run resumes bitwise; bad settings are refused in one line."""

import copy
import json

import pytest
import torch
from support.free_recall_results import random_free_recall_run
from support.resume import assert_resumes_bitwise

from primacy.backbones.s4d import S4DBackbone
from primacy.errors import UsageError
from primacy.figures.style import describe
from primacy.models.free_recall import FreeRecallModel
from primacy.tasks import free_recall
from primacy.tasks.free_recall import FreeRecallTask, Tokens, trials
from primacy.testing import WithoutStep, check_task, tiny_fit, tiny_settings
from primacy.workflows.aggregate import load_runs

SMALL = {"n_items": 4, "vocab_size": 16, "num_held_out": 12, "num_test_sets": 3, "num_val_sets": 2}
DELAYED = {"delay": 3, "distractor_vocab": 2}
CONTINUAL = {"delay": 2, "gap": 2, "distractor_vocab": 3}


def task(**kwargs) -> FreeRecallTask:
    return FreeRecallTask(**{**SMALL, **kwargs})


def test_module_docstring_example_of_distractors():
    batch = trials(torch.tensor([[5, 1, 6]]), torch.tensor([[2, 0, 1]]), torch.tensor([0]), Tokens(8, 2),
                   torch.tensor([[1, 0, 1, 1]]), gap=1)
    assert batch["tokens"].tolist() == [[5, 9, 1, 8, 6, 9, 9, 10, 6, 5, 1]]
    doc = free_recall.__doc__
    assert "tokens = [5, 9, 1, 8, 6,  9, 9,  10,  6, 5, 1]   study = [5, 1, 6]   order = [2, 0, 1]" in doc
    assert "(L = 3, K = 8, M = 2, gap 1, delay 2; distractors 8 and 9, cue 10, stop 11)" in doc
    assert (Tokens(8, 2).cue, Tokens(8, 2).stop, len(Tokens(8, 2))) == (10, 11, 12)


@pytest.mark.parametrize("settings", [DELAYED, CONTINUAL], ids=["delayed", "continual"])
def test_a_trial_is_the_list_with_its_distractors_then_the_cue_then_the_fed_items(settings):
    t = task(**settings)
    n, k, m = t.n_items, t.vocab_size, t.distractor_vocab
    gap, delay = settings.get("gap", 0), settings["delay"]
    length = 2 * n + 1 + (n - 1) * gap + delay
    assert FreeRecallTask.sequence_length(t.hparams) == length
    assert FreeRecallTask.model_vocabulary(t.hparams) == k + m + 2 == t.tokens.stop + 1
    for batch in (t.stream_batch(0, 256), next(iter(t.test_dataloader()))):
        tokens, study = batch["tokens"], batch["study"]
        assert tokens.shape[1] == length
        at_items = torch.arange(n) * (gap + 1)  # L: where the study items stand
        assert torch.equal(tokens[:, at_items], study)
        phase = tokens[:, : length - n - 1]  # B: the study phase
        others = torch.ones(phase.shape[1], dtype=torch.bool)
        others[at_items] = False
        assert ((phase[:, others] >= k) & (phase[:, others] < k + m)).all(), "distractors are their own ids"
        assert set(phase[:, others].unique().tolist()) == set(range(k, k + m)), "every distractor id is drawn"
        assert (tokens[:, length - n - 1] == t.tokens.cue).all()
        assert torch.equal(tokens[:, length - n :], study.gather(1, batch["order"]))
        assert not (tokens == t.tokens.stop).any()


def test_every_condition_sees_the_same_lists_and_orders_and_immediate_recall_is_the_old_task():
    plain, wide, delayed, continual = task(), task(distractor_vocab=3), task(**DELAYED), task(**CONTINUAL)
    for index in range(3):
        batches = [t.stream_batch(index, 16) for t in (plain, wide, delayed, continual)]
        for key in ("study", "order", "index"):
            assert all(torch.equal(batches[0][key], b[key]) for b in batches[1:]), key
        cue = batches[1]["tokens"][:, 4]
        assert (cue == 16 + 3).all() and torch.equal(batches[1]["tokens"][:, 5:], batches[0]["tokens"][:, 5:])
    for stage in ("test_dataloader", "val_dataloader"):
        batches = [next(iter(getattr(t, stage)())) for t in (plain, delayed, continual)]
        for key in ("study", "order", "index"):
            assert all(torch.equal(batches[0][key], b[key]) for b in batches[1:]), (stage, key)


@pytest.mark.parametrize("settings", [DELAYED, CONTINUAL], ids=["delayed", "continual"])
def test_the_conditions_keep_the_task_contract(settings):
    check_task(FreeRecallTask, study_items=lambda batch: batch["study"], **{**tiny_settings("FreeRecallTask"),
                                                                             **settings})
    crowded = {"n_items": 2, "vocab_size": 5, "num_held_out": 5, "num_test_sets": 3, "num_val_sets": 2}
    check_task(FreeRecallTask, study_items=lambda batch: batch["study"], batches=10,
               **{**tiny_settings("FreeRecallTask"), **crowded, **settings})


@pytest.mark.parametrize("settings,message", [
    ({"delay": -1, "distractor_vocab": 2}, "delay=-1 is invalid: it must be at least 0"),
    ({"gap": -2, "distractor_vocab": 2}, "gap=-2 is invalid: it must be at least 0"),
    ({"distractor_vocab": -1}, "distractor_vocab=-1 is invalid: it must be at least 0"),
    ({"delay": 3}, "delay=3 needs distractor tokens, but distractor_vocab=0: set distractor_vocab >= 1 (the "
                   "distractors' own token ids, never items)"),
    ({"gap": 1}, "gap=1 needs distractor tokens, but distractor_vocab=0: set distractor_vocab >= 1"),
])
def test_bad_conditions_are_refused_in_one_line(settings, message):
    with pytest.raises(UsageError) as refused:
        task(**settings)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_the_command_line_refuses_a_delay_without_distractor_tokens_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        tiny_fit(tmp_path / "run", "FreeRecallModel", "FreeRecallTask", data_settings={"delay": 2})
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("primacy: error: ") and "delay=2 needs distractor tokens" in err[-1]


def model_and_batch(settings: dict, backbone=None) -> tuple[FreeRecallModel, dict]:
    t = task(**settings)
    torch.manual_seed(0)
    backbone = backbone or S4DBackbone(d_model=8, d_state=8)
    m = FreeRecallModel(backbone, vocab_size=FreeRecallTask.model_vocabulary(t.hparams), n_items=t.n_items,
                        decoding="sampled").double()
    return m, t.stream_batch(0, 6)


def test_the_model_reads_the_distractors_and_is_scored_at_the_cue_and_after_only():
    m, batch = model_and_batch(CONTINUAL)
    tokens, n = batch["tokens"], 4
    logits = m(tokens)
    assert logits.shape == (6, n + 1, m.stop + 1)
    whole = m.unembedding(m.backbone(m.embedding(tokens)))  # B T V: every position
    assert torch.allclose(logits, whole[:, tokens.shape[1] - n - 1 :]), "outputs are read at the cue and the fed items"
    loss, right = m.order_agnostic_loss(tokens)
    fed = tokens[:, -n:]
    logp = logits.float().log_softmax(-1)
    reference = torch.stack([-logp[:, r].gather(1, fed[:, r:]).logsumexp(-1) for r in range(n)]
                            + [-logp[:, n, m.stop]], dim=1).mean()
    assert torch.allclose(loss, reference) and right.shape == (6, n + 1)
    other = tokens.clone()
    phase = torch.ones(tokens.shape[1], dtype=torch.bool)
    phase[torch.arange(n) * 3] = False
    phase[tokens.shape[1] - n - 1 :] = False  # the distractors alone
    other[:, phase] = 16 + (other[:, phase] - 16 + 1) % 3  # other distractors, the same lists
    assert not torch.allclose(m(other), logits), "the model sees the distractors"


@pytest.mark.parametrize("settings", [DELAYED, CONTINUAL], ids=["delayed", "continual"])
def test_recall_reads_the_study_phase_and_steps_as_passes_over_the_sequence_do(settings):
    stepped, batch = model_and_batch(settings)
    passes = copy.deepcopy(stepped)
    passes.backbone = WithoutStep(passes.backbone)
    tokens, study, index = batch["tokens"], batch["study"], batch["index"]
    prompt = tokens[:, : tokens.shape[1] - 4]
    assert torch.equal(stepped.greedy_order(tokens, study), passes.greedy_order(tokens, study))
    fed = stepped.greedy_order(tokens, study)
    assert torch.equal(fed[:, : prompt.shape[1]], prompt)
    assert torch.equal(fed[:, prompt.shape[1] :].sort(1).values, study.sort(1).values), "it feeds the list's items"
    for decoding in ("sampled", "greedy"):
        stepped.decoding = passes.decoding = decoding
        recalls = stepped.recall(study, index, prompt)
        assert torch.equal(recalls, passes.recall(study, index, prompt)), decoding
    with pytest.raises(UsageError, match="needs their study lists"):
        stepped.greedy_order(tokens)


RUN = {"model": "FreeRecallModel", "data": "FreeRecallTask", "steps": 8,
       "data_settings": CONTINUAL, "model_settings": {"decoding": "sampled", "warmup_steps": 2},
       "args": ["--test_after_fit", "false"]}


def test_a_continual_distractor_run_resumes_bitwise(tmp_path):
    assert_resumes_bitwise(tmp_path, RUN)


def test_aggregate_takes_runs_from_before_the_conditions_with_immediate_ones_but_not_delayed_ones(tmp_path):
    old = random_free_recall_run(tmp_path, "old", 0)
    new = random_free_recall_run(tmp_path, "new", 1)
    delayed = random_free_recall_run(tmp_path, "delayed", 2)
    for run, added in ((new, {"delay": 0, "gap": 0, "distractor_vocab": 0}),
                       (delayed, {"delay": 4, "gap": 0, "distractor_vocab": 8})):
        path = run / "results" / "summary.json"
        summary = json.loads(path.read_text())
        summary["data_args"].update(added)
        path.write_text(json.dumps(summary))
    assert len(load_runs([old, new])) == 2
    with pytest.raises(UsageError, match=r"data_args\.delay \(None vs 4\)"):
        load_runs([old, delayed])


def test_a_run_from_the_command_line_with_distractors_tests_and_writes_its_results(tmp_path):
    run = tiny_fit(tmp_path / "run", "FreeRecallModel", "FreeRecallTask", data_settings=DELAYED, steps=2)
    summary = json.loads((run / "results" / "summary.json").read_text())
    assert summary["data_args"]["delay"] == 3 and summary["model_args"]["vocab_size"] == 16 + 2 + 2
    assert 0 <= summary["mean_recalled"] <= 4


def test_a_figure_title_names_the_distractors_and_an_immediate_run_s_title_is_as_before():
    settings = {"task": "free_recall", "backbone": "S4DBackbone", "n_items": 32, "vocab_size": 512, "condition": None}
    immediate = {**settings, "data_args": {"n_items": 32, "delay": 0, "gap": 0, "distractor_vocab": 0}}
    continual = {**settings, "data_args": {"n_items": 32, "delay": 4, "gap": 4, "distractor_vocab": 8}}
    assert describe(immediate) == describe(settings) == "S4DBackbone · free_recall · L=32 · K=512"
    assert describe(continual) == "S4DBackbone · free_recall · L=32 · K=512 · gap 4 · delay 4"
