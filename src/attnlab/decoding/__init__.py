"""Greedy and beam search through the model protocol (``encode`` / ``init_state`` / ``step``), notes §22.

One implementation serves every model kind (through the protocol of docs/DESIGN.md, The main contracts). Both searches are batched, run under
``torch.inference_mode()``, drop finished rows with ``DecoderState.select``, never emit
``<pad> <bos> <unk>``, and return :class:`Hypothesis` objects (ids without ``<bos>``/``<eos>``).
"""

from attnlab.decoding.beam import beam_search
from attnlab.decoding.greedy import greedy_search
from attnlab.decoding.hypothesis import BANNED_IDS, Hypothesis, gnmt_length_penalty, length_cap, max_lengths
from attnlab.decoding.sampling import Sampler

__all__ = ["BANNED_IDS", "Hypothesis", "Sampler", "beam_search", "gnmt_length_penalty", "greedy_search",
           "length_cap", "max_lengths"]
