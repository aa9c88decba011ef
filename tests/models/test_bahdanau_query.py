"""``model.attention_query=current`` (Luong et al. 2015's order in the Bahdanau model): the one-call
teacher-forced pass equals step-by-step decoding, padding changes nothing, and the option is validated."""

import pytest
import torch

from attnlab import config as C
from attnlab.models import build_model


def _model(*overrides: str):
    cfg = C.apply_overrides(C.preset("bahdanau"), ["model.num_hiddens=16", "model.embed_size=16", "model.dropout=0",
                                                   "model.attention_query=current", *overrides])
    torch.manual_seed(0)
    return build_model(cfg.model, 30, 40).eval()


@pytest.mark.parametrize("scratch", [False, True])
def test_forward_equals_steps(scratch):
    m = _model(f"model.scratch_gru={scratch}")
    src, lens, tgt = torch.randint(4, 30, (3, 6)), torch.tensor([6, 4, 2]), torch.randint(4, 40, (3, 5))
    out = m(src, lens, tgt, need_weights=True)
    state, logits, weights = m.init_state(m.encode(src, lens), lens), [], []
    for t in range(tgt.shape[1]):
        step = m.step(tgt[:, t], state, need_weights=True)
        state = step.state
        logits.append(step.logits)
        weights.append(step.attention["cross"])
    torch.testing.assert_close(out.logits, torch.stack(logits, dim=1))
    torch.testing.assert_close(out.attention["cross"], torch.cat(weights, dim=3))  # (B, 1, 1, T, S)
    assert m.combine is not None and m.decoder.input_size == 16  # the GRU reads the embedding alone


def test_padding_changes_nothing():
    m = _model()
    src, lens, tgt = torch.randint(4, 30, (2, 6)), torch.tensor([6, 3]), torch.randint(4, 40, (2, 4))
    torch.testing.assert_close(m(src, lens, tgt).logits[1], m(src[1:, :3], lens[1:], tgt[1:]).logits[0])


def test_validated():
    with pytest.raises(C.ConfigError, match="model.attention_query='after'"):
        C.apply_overrides(C.preset("bahdanau"), ["model.attention_query=after"])
    from attnlab.models import build_model

    with pytest.raises(C.ConfigError, match="is for the bahdanau model, not transformer"):
        build_model(C.apply_overrides(C.preset("transformer"), ["model.attention_query=current"]).model, 9, 9)
