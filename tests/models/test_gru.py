"""The from-scratch GRU equals nn.GRU / nn.GRUCell, exposes its gates, and swaps in for nn.GRU."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.config import ConfigError, ModelConfig
from attnlab.models import build_model
from attnlab.models.gru import GRUCell, ScratchGRU

TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_cell_equals_nn_grucell_and_gates_compose():
    ref = nn.GRUCell(5, 7)
    cell = GRUCell(5, 7)
    cell.load_state_dict(ref.state_dict())
    x, h = torch.randn(4, 5), torch.randn(4, 7)
    h_new, g = cell(x, h)
    torch.testing.assert_close(h_new, ref(x, h), **TOL)
    # notes §7: h_t = z ⊙ h_{t-1} + (1 − z) ⊙ h̃
    torch.testing.assert_close(h_new, g.z * h + (1 - g.z) * g.h_tilde, **TOL)
    assert ((g.z > 0) & (g.z < 1)).all() and ((g.r > 0) & (g.r < 1)).all() and (g.h_tilde.abs() < 1).all()


def test_scratch_gru_equals_nn_gru_multilayer_with_initial_state():
    ref = nn.GRU(5, 8, num_layers=3, batch_first=True)
    ours = ScratchGRU(5, 8, num_layers=3)
    ours.load_state_dict(ref.state_dict())  # same parameter names
    x, h0 = torch.randn(2, 6, 5), torch.randn(3, 2, 8)
    out, h_n = ours(x, h0)
    ref_out, ref_h = ref(x, h0)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(h_n, ref_h, **TOL)


def _equal_to_packed(ours: ScratchGRU, ref: nn.GRU):
    """Load ref's weights into ours; check outputs and h_n on a padded batch against packed nn.GRU.
    Returns ``(x, gates)``: the batch ``(3, 5, 4)`` (valid lengths 5, 2, 3) and our gates."""
    ours.load_state_dict(ref.state_dict())
    x, lens = torch.randn(3, 5, 4), torch.tensor([5, 2, 3])
    out, h_n, gates = ours(x, None, lens, return_gates=True)
    packed = pack_padded_sequence(x, lens, batch_first=True, enforce_sorted=False)
    ref_packed, ref_h = ref(packed)
    ref_out, _ = pad_packed_sequence(ref_packed, batch_first=True, total_length=5)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(h_n, ref_h, **TOL)
    return x, gates


def test_scratch_gru_with_valid_lens_equals_packed_nn_gru_and_returns_gates():
    ref = nn.GRU(4, 6, num_layers=2, batch_first=True)
    ours = ScratchGRU(4, 6, num_layers=2)
    x, gates = _equal_to_packed(ours, ref)
    assert gates.z.shape == (3, 2, 5, 6)
    assert torch.all(gates.z[1, :, 2:] == 0) and torch.all(gates.h_tilde[2, :, 3:] == 0)
    assert (gates.r[0] > 0).all()


@pytest.mark.parametrize("layers", [1, 2])
def test_bidirectional_scratch_gru_equals_packed_bidirectional_nn_gru(layers):
    """The backward direction starts at each row's last valid step, as packing makes nn.GRU do."""
    ref = nn.GRU(4, 6, num_layers=layers, batch_first=True, bidirectional=True)
    ours = ScratchGRU(4, 6, num_layers=layers, bidirectional=True)
    x, gates = _equal_to_packed(ours, ref)  # weight_ih_l0_reverse, … : the same names
    assert gates.z.shape == (3, 2 * layers, 5, 6) and torch.all(gates.z[1, :, 2:] == 0)
    out_full, h_full = ours(x)  # no lengths: the whole rows, like an unpacked nn.GRU
    torch.testing.assert_close(out_full, ref(x)[0], **TOL)


def test_reverse_padded_reverses_valid_steps_only_and_is_its_own_inverse():
    from attnlab.models.gru import reverse_padded

    x = torch.arange(12.0).view(2, 6, 1)
    lens = torch.tensor([4, 6])
    r = reverse_padded(x, lens)
    assert r[0, :, 0].tolist() == [3, 2, 1, 0, 4, 5] and r[1, :, 0].tolist() == [11, 10, 9, 8, 7, 6]
    assert torch.equal(reverse_padded(r, lens), x)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("kind", ["seq2seq", "bahdanau"])
def test_models_with_scratch_gru_equal_nn_gru_after_loading_its_weights(kind, bidirectional):
    common = dict(kind=kind, num_hiddens=12, embed_size=8, num_layers=2, dropout=0.0, tie_embeddings=False,
                  bidirectional=bidirectional)
    fast = build_model(ModelConfig(**common), 11, 9).eval()
    scratch = build_model(ModelConfig(**common, scratch_gru=True), 11, 9).eval()
    scratch.load_state_dict(fast.state_dict())  # a checkpoint trained with nn.GRU loads for gate inspection
    src, vl = torch.randint(4, 11, (3, 6)), torch.tensor([6, 2, 4])
    tgt = torch.randint(4, 9, (3, 5))
    torch.testing.assert_close(scratch(src, vl, tgt).logits, fast(src, vl, tgt).logits, **TOL)


def test_gru_tied_embeddings_need_equal_sizes():
    with pytest.raises(ConfigError, match="embed_size"):
        build_model(ModelConfig(kind="bahdanau", num_hiddens=16, embed_size=8, tie_embeddings=True), 10, 10)
    m = build_model(ModelConfig(kind="seq2seq", num_hiddens=16, embed_size=16, tie_embeddings=True), 10, 10)
    assert m.output.weight is m.tgt_embedding.weight
