"""The optimizer of `attnlab train`: Adam(W) (the notes' §10 "optimizer updates the parameters"), or Muon
for the hidden weight matrices with AdamW for the rest (``train.optimizer="muon"``).

Weight decay goes on matrices only: decaying biases, LayerNorm gains and embeddings hurts small models
(AdamW's decay is decoupled, so the split matters).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnlab.config import TrainConfig


def _split(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter], list[nn.Parameter]]:
    """(hidden matrices, other matrices: embeddings and W_o, vectors), each parameter once (tied ones too)."""
    hidden, tables, vectors, seen = [], [], [], set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if p.dim() < 2:
            vectors.append(p)
        elif "embedding" in name or name.startswith("output."):
            tables.append(p)
        else:
            hidden.append(p)
    return hidden, tables, vectors


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    hidden, tables, vectors = _split(model)
    kwargs: dict[str, Any] = {"lr": cfg.lr, "betas": tuple(cfg.betas)}
    # Fused Adam(W): one kernel over all parameters, a faster optimizer step (bench/RESULTS.md, "Figures moved out of the source").
    kwargs["fused"] = True
    if cfg.optimizer == "adam":
        return torch.optim.Adam([{"params": _unique(model), "weight_decay": 0.0}], **kwargs)
    if cfg.optimizer == "adamw":  # parameters in model order (the order saved optimizer states rely on)
        decay_ids = {id(p) for p in hidden} | {id(p) for p in tables if not _is_embedding(model, p)}
        ordered = _unique(model)
        return torch.optim.AdamW([{"params": [p for p in ordered if id(p) in decay_ids], "weight_decay": cfg.weight_decay},
                                  {"params": [p for p in ordered if id(p) not in decay_ids], "weight_decay": 0.0}],
                                 **kwargs)
    # Muon (Jordan et al. 2024, torch.optim.Muon): orthogonalised momentum for the hidden matrices, its
    # update rescaled to AdamW's RMS so that one lr serves both; AdamW for embeddings, W_o and vectors.
    muon = torch.optim.Muon(hidden, lr=cfg.lr, weight_decay=cfg.weight_decay, adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW([{"params": tables + vectors, "weight_decay": 0.0}], **kwargs)
    return OptimizerPair(muon, adamw)


def _unique(model: nn.Module) -> list[nn.Parameter]:
    seen: set[int] = set()
    return [p for p in model.parameters() if p.requires_grad and not (id(p) in seen or seen.add(id(p)))]


def _is_embedding(model: nn.Module, p: nn.Parameter) -> bool:
    return any(p is m.weight for m in model.modules() if isinstance(m, nn.Embedding))


class OptimizerPair(torch.optim.Optimizer):
    """Two optimizers stepped as one: ``param_groups`` spans both, so the lr plan sets both."""

    def __init__(self, first: torch.optim.Optimizer, second: torch.optim.Optimizer) -> None:
        self.parts = (first, second)
        self.defaults = {}
        self.state = {}

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.parts[0].param_groups + self.parts[1].param_groups

    def step(self, closure=None):  # noqa: ARG002
        for opt in self.parts:
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"parts": [opt.state_dict() for opt in self.parts]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "parts" not in state_dict or len(state_dict["parts"]) != 2:
            raise ValueError("the saved optimizer state is not a Muon + AdamW pair")
        for opt, st in zip(self.parts, state_dict["parts"]):
            opt.load_state_dict(st)
