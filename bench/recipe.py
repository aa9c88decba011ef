"""The plain-PyTorch baseline: a careful 30-line training loop, to hold attnlab's presets against.

    python bench/recipe.py --minutes 12 [--like-peak 64] --data ../shared/data

The recipe, as a practitioner would write it with nothing but PyTorch: ``nn.Transformer`` 2+2 layers,
d=256, 4 heads, FFN 1024, pre-norm; word vocabularies with min-frequency 3; the output layer tied to
the target embedding, both initialised N(0, d^-1/2); Adam lr 1.5e-3, linear warm-up over 300 updates,
then 1/sqrt(t); 800-token length-bucketed batches; label smoothing 0.1; greedy decoding. Only the data
(splits, tokenisation) and the scoring (sacreBLEU, all references) come from attnlab, so both are
scored on the same test sentences. Used by ``bench/quality.py --baseline``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnlab import config as C  # noqa: E402
from attnlab.data import corpus  # noqa: E402
from attnlab.data.batching import TokenBatchSampler, collate  # noqa: E402
from attnlab.data.text import detokenize  # noqa: E402
from attnlab.data.vocab import BOS, EOS, PAD  # noqa: E402
from attnlab.evaluation.bleu import corpus_scores  # noqa: E402


class Recipe(nn.Module):
    def __init__(self, src_v: int, tgt_v: int, d: int = 256, max_len: int = 64) -> None:
        super().__init__()
        self.d = d
        self.src_emb, self.tgt_emb = nn.Embedding(src_v, d), nn.Embedding(tgt_v, d)
        self.pos = nn.Embedding(max_len, d)
        for e in (self.src_emb, self.tgt_emb, self.pos):
            nn.init.normal_(e.weight, std=d ** -0.5)
        self.core = nn.Transformer(d, 4, 2, 2, 1024, 0.1, batch_first=True, norm_first=True)
        self.out = nn.Linear(d, tgt_v)
        self.out.weight = self.tgt_emb.weight  # tied

    def embed(self, emb: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        return emb(ids) * math.sqrt(self.d) + self.pos(torch.arange(ids.shape[1]))

    def forward(self, src, tgt_in):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])
        h = self.core(self.embed(self.src_emb, src), self.embed(self.tgt_emb, tgt_in), tgt_mask=causal,
                      src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt_in == PAD,
                      memory_key_padding_mask=src == PAD, tgt_is_causal=True)
        return self.out(h)


@torch.no_grad()
def greedy(model: Recipe, src: torch.Tensor, max_len: int) -> list[list[int]]:
    model.eval()
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        nxt = model(src, ys)[:, -1].argmax(-1).masked_fill(done, PAD)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == EOS
        if done.all():
            break
    return [[t for t in row[1:].tolist() if t not in (PAD,)] for row in ys]


def run(minutes: float, data: str | None, threads: int, seed: int = 0) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    cfg = C.apply_overrides(C.Config(), ["data.tokenizer=word", "data.min_freq=3", "data.dataset=fra-eng",
                                         *([f"data.data_path={data}"] if data else [])]).data
    prep = corpus.prepare(cfg)
    train = prep.splits["train"]
    model = Recipe(len(prep.src_tok), len(prep.tgt_tok))
    opt = torch.optim.Adam(model.parameters(), lr=1.5e-3, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / 300, math.sqrt(300 / (s + 1))))
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
    sampler = TokenBatchSampler([len(s) for s in train.src], [len(t) for t in train.tgt], 800, 512, True, seed)
    t0, steps, tokens, epoch = time.monotonic(), 0, 0, 0
    while time.monotonic() - t0 < minutes * 60:
        for idx in sampler.epoch(epoch):
            if time.monotonic() - t0 >= minutes * 60:
                break
            b = collate([train.src[i] for i in idx], [train.tgt[i] for i in idx], idx)
            model.train()
            logits = model(b.src, b.tgt_in)
            loss = loss_fn(logits.flatten(0, 1), b.tgt_out.flatten())
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            steps, tokens = steps + 1, tokens + b.num_tgt_tokens
        epoch += 1
    train_s = time.monotonic() - t0
    test = prep.splits["test"]
    rows = test.unique_sources()
    hyps: list[str] = []
    for i in range(0, len(rows), 256):
        chunk = rows[i:i + 256]
        b = collate([test.src[j] for j in chunk], [test.tgt[j] for j in chunk])
        for ids in greedy(model, b.src, int(1.5 * b.src.shape[1]) + 10):
            hyps.append(prep.tgt_tok.decode(ids))
    refs = [[detokenize(r.split(), "fr") for r in test.references[j]] for j in rows]
    scores = corpus_scores(hyps, refs)
    return {"model": "plain recipe", "minutes": minutes, "updates": steps, "tokens_per_s": tokens / train_s,
            "train_s": train_s, "params": sum(p.numel() for p in model.parameters()),
            "bleu_greedy": scores["bleu"], "chrf": scores["chrf"], "signature": scores.get("bleu_signature", "")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=12.0, help="wall-clock training budget (before --like-peak)")
    p.add_argument("--like-peak", type=float, default=0.0, metavar="GFLOPS",
                   help="spend what the budget buys on a machine of this fp32 matmul peak (the budget shrinks by "
                        "the ratio of the peaks)")
    p.add_argument("--data", default=os.environ.get("ATTNLAB_DATA_DIR"))
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    minutes = args.minutes
    if args.like_peak:
        from attnlab import device

        minutes = args.minutes * args.like_peak / device.measure_peak_gflops()
    print(json.dumps(run(minutes, args.data, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
