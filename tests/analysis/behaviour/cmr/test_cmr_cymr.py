"""cymr (Morton & Polyn's CMR, compiled from C) as an independent check of the context maths that primacy's
canonical CMR variant shares with it: the study contexts (each studied item's own context unit drifted in with
β_enc) and the drift during recall towards a recalled item's unit with β_rec. They coincide when cymr's items have
localist context units (Afc = 0, Dfc = 1) and learn no item-to-context associations (Lfc = 0), which is primacy's
γ_FT = 0. Elsewhere the models differ by design: cymr samples without replacement with a stop probability,
primacy's chains with replacement and no stop, and cymr associates an item with the context after it was studied,
primacy with the one before (primacy.analysis.cmr.simulate), so their choice probabilities are not compared here."""

import numpy as np
import pytest
import torch
from conftest import extra_module

from primacy.analysis.behaviour.cmr.simulate import drift, study_contexts


def cymr_network(n_items: int, beta_enc: float):
    """cymr's network after studying items 0..n-1 in order (B_start = 0: the end-of-list context is kept)."""
    cmr = extra_module("cymr.cmr")
    param_def, patterns = cmr.config_loc_cmr(n_items)
    param = {"B_enc": beta_enc, "B_start": 0.0, "B_rec": 0.5, "Lfc": 0.0, "Lcf": 1.0, "P1": 0.0, "P2": 1.0, "T": 0.1,
             "X1": 0.0, "X2": 0.0, "Afc": 0.0, "Dfc": 1.0, "Acf": 0.0, "Dcf": 0.0}
    lists = cmr.prepare_list_param(n_items, 1, param, param_def)
    return cmr.study_list(param_def, lists, np.arange(n_items), np.arange(n_items), patterns, None)


def in_cymr_units(context: torch.Tensor) -> np.ndarray:
    """Our context (d_0 = start, then one unit per item) in cymr's unit order (the items, then start)."""
    return np.concatenate([context[1:].numpy(), context[:1].numpy()])


@pytest.mark.parametrize("beta_enc", [0.3, 0.6, 0.95])
def test_study_contexts_equal_cymrs(beta_enc):
    """cymr learns item i -> context with the context right after item i was studied (Lcf = 1, no pre-experimental
    weights), so its context-to-item rows are the study contexts; the last is its current context."""
    n = 7
    net = cymr_network(n, beta_enc)
    ours = study_contexts(n, beta_enc)  # row i + 1: the context after item i
    items = slice(*net.get_segment("f", "task", "item"))
    for i, row in enumerate(net.w_cf_exp[items]):
        np.testing.assert_allclose(row, in_cymr_units(ours[i + 1]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(net.c, in_cymr_units(ours[n]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("beta_rec", [0.2, 0.8])
def test_recall_drift_equals_cymrs(beta_rec):
    """Recalling items 4, 1, 5, 4 drifts the context towards each one's unit as cymr's integrate does."""
    n, beta_enc = 7, 0.6
    net = cymr_network(n, beta_enc)
    ours = study_contexts(n, beta_enc)[n]
    for item in (4, 1, 5, 4):
        net.integrate(("task", "item", item), net.c_sublayers, beta_rec)
        ours = drift(ours, torch.eye(n + 1, dtype=torch.float64)[item + 1], beta_rec)
        np.testing.assert_allclose(net.c, in_cymr_units(ours), rtol=0, atol=1e-12)
        assert float(ours.norm()) == pytest.approx(1.0, abs=1e-12)
