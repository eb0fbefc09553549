"""primacy_xlstm.slstm: the sLSTM loop equals xlstm's vanilla cell (outputs, final state, gradients) in float64, and
XLSTMBackbone builds it for the PyTorch backend."""

import pytest
import torch
from xlstm.blocks.slstm.cell import sLSTMCell_vanilla, sLSTMCellConfig

from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.slstm import FastsLSTMCell


def cell_pair(hidden: int = 8, heads: int = 2) -> tuple[sLSTMCell_vanilla, FastsLSTMCell]:
    """xlstm's cell and ours in float64 with the same parameters, moved at random (the recurrent kernel starts at
    zero, the biases are structured): every term of the recurrence is then used."""
    torch.manual_seed(0)
    config = {"hidden_size": hidden, "num_heads": heads, "backend": "vanilla", "recurrent_weight_init": "standard"}
    theirs = sLSTMCell_vanilla(sLSTMCellConfig(**config)).double()
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(0.5 * torch.randn_like(p))
    ours = FastsLSTMCell(sLSTMCellConfig(**config)).double()
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def run(cell: sLSTMCell_vanilla, x: torch.Tensor, state: torch.Tensor | None):
    """The cell's output and final state on x (B, T, 4H), and the gradients of a loss that weighs every output and
    final state entry differently with respect to x, the initial state (if given) and every parameter."""
    x = x.clone().requires_grad_()
    inputs = [x, *cell.parameters()]
    if state is not None:
        state = state.clone().requires_grad_()
        inputs.append(state)
    output, final = cell(x, state)
    weights = torch.linspace(-1.0, 2.0, output.numel(), dtype=output.dtype).view_as(output)
    loss = (weights * output).sum() + (final * final.flip(-1)).sum()
    return output, final, torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("initial", ["zeros", "random"])
def test_the_loop_is_xlstms_vanilla_cell_with_its_gradients_in_float64(initial):
    """From xlstm's zero state (its first step sets m = ĩ) and from a random one (n > 0, m of any sign)."""
    theirs, ours = cell_pair()
    x = torch.randn(3, 9, 4 * 8, dtype=torch.float64)
    state = None
    if initial == "random":
        state = torch.randn(4, 3, 8, dtype=torch.float64)
        state[2] = state[2].abs() + 0.1  # n, the normaliser, is positive
    out_theirs, final_theirs, grads_theirs = run(theirs, x, state)
    out_ours, final_ours, grads_ours = run(ours, x, state)
    torch.testing.assert_close(out_ours, out_theirs, rtol=0, atol=1e-12)
    torch.testing.assert_close(final_ours, final_theirs, rtol=0, atol=1e-12)
    assert len(grads_ours) == len(grads_theirs) == 3 + int(state is not None)  # x, R, b (, state)
    for mine, reference in zip(grads_ours, grads_theirs):
        assert reference.abs().max() > 0
        torch.testing.assert_close(mine, reference, rtol=0, atol=1e-10)


def test_one_head_and_saturated_gates_agree_too():
    """One head, and inputs so large that the gates' stabiliser switches between ĩ and log σ(f̃) + m often."""
    theirs, ours = cell_pair(hidden=4, heads=1)
    x = 20 * torch.randn(2, 7, 4 * 4, dtype=torch.float64)
    for mine, reference in zip(run(ours, x, None)[2], run(theirs, x, None)[2]):
        torch.testing.assert_close(mine, reference, rtol=0, atol=1e-10)


def test_the_backbone_builds_our_cell_for_the_pytorch_backend_and_loads_xlstms_state_dict():
    torch.manual_seed(0)
    model = XLSTMBackbone(d_model=8, blocks=["slstm", "mlstm", "slstm"], slstm_heads=2, backend="vanilla")
    cells = [m for m in model.modules() if isinstance(m, sLSTMCell_vanilla)]
    assert len(cells) == 2 and all(type(cell) is FastsLSTMCell for cell in cells)
    theirs = sLSTMCell_vanilla(sLSTMCellConfig(hidden_size=8, num_heads=2, backend="vanilla"))
    assert cells[0].state_dict().keys() == theirs.state_dict().keys()
    cells[0].load_state_dict(theirs.state_dict())
    model(torch.randn(2, 5, 8)).sum().backward()
    assert all(p.grad is not None for p in cells[0].parameters())
