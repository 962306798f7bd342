"""A GPT-style decoder (pre-norm, causal self-attention through scaled_dot_product_attention, tied embeddings)
on synthetic tokens, for throughput and MFU. Each sequence is an arithmetic progression modulo the vocabulary
with its own start and stride, so there is something to learn in context and the loss falls."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .base import IndexableTensors, Workload

PRESETS = {
    "tiny": dict(layers=2, width=64, heads=4, seq_len=64, vocab_size=256, train_samples=512),
    "small": dict(layers=12, width=768, heads=12, seq_len=1024, vocab_size=50304, train_samples=4096),  # GPT-2 124M
}


def synthetic_tokens(n: int, seq_len: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    stride = torch.randint(1, 8, (n, 1), generator=g)
    return (start + stride * torch.arange(seq_len + 1)) % vocab


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(
        self, layers: int, width: int, heads: int, seq_len: int, vocab_size: int, activation_checkpointing=False
    ):
        super().__init__()
        # Recompute each block's activations in the backward instead of keeping them: about a third more compute
        # for memory that no longer grows with depth (non-reentrant checkpoint, which DDP supports).
        self.activation_checkpointing = activation_checkpointing
        self.token = nn.Embedding(vocab_size, width)
        self.position = nn.Embedding(seq_len, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)
        self.head.weight = self.token.weight  # tied, as GPT-2
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token(tokens) + self.position(positions)
        for block in self.blocks:
            if self.activation_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.ln_f(x))


def flops_per_token(model: GPT, layers: int, width: int, seq_len: int) -> float:
    """6N for the weights' forward + backward, plus attention's 12 L T d (PaLM appendix B). N excludes the
    position embedding, which does no multiplies."""
    n = sum(p.numel() for p in model.parameters()) - model.position.weight.numel()
    return 6.0 * n + 12.0 * layers * seq_len * width


# Tokens per piece of the loss. GPT-2's 50,304-word logits in fp32 for a 16 x 1024 micro-batch are 3.3 GB; a piece
# of 4,096 tokens is 0.8 GB, made in the forward, dropped, and made again in the backward.
LOSS_CHUNK_TOKENS = 4096


def _token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), targets, reduction="none")  # the softmax in fp32, whatever autocast says


def sequence_losses(logits: torch.Tensor, targets: torch.Tensor, chunk_tokens: int = LOSS_CHUNK_TOKENS) -> torch.Tensor:
    """Each sequence's mean token loss, never holding the whole logits tensor in fp32: the loss is taken a piece of
    `chunk_tokens` tokens at a time, and under autograd each piece is recomputed in the backward (checkpointed), so
    only the logits as the model made them (bf16 under autocast) are kept. The same values and gradients as one
    cross-entropy over the upcast logits (tests/trainer/test_chunked_loss.py)."""
    flat_logits, flat_targets = logits.flatten(0, 1), targets.flatten()
    pieces = zip(flat_logits.split(chunk_tokens), flat_targets.split(chunk_tokens), strict=True)
    if torch.is_grad_enabled() and flat_logits.requires_grad:
        losses = [checkpoint(_token_losses, part, goal, use_reentrant=False) for part, goal in pieces]
    else:
        losses = [_token_losses(part, goal) for part, goal in pieces]
    return torch.cat(losses).view(targets.shape).mean(1)


def plain_sequence_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """sequence_losses as one cross-entropy over the upcast logits, for the compiled step: traced in one graph with
    the model, inductor fuses the upcast, the softmax and the loss, and the fp32 logits are never all held at once as
    eager's would be (eager keeps its chunks)."""
    losses = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return losses.view(targets.shape).mean(1)


def build(cfg) -> Workload:
    p = dict(PRESETS.get(cfg.model.preset, PRESETS["tiny"]))
    for key in p:
        p[key] = getattr(cfg.model, key) or p[key]
    tokens = synthetic_tokens(p["train_samples"], p["seq_len"], p["vocab_size"], seed=cfg.train.seed)
    held_out = synthetic_tokens(64, p["seq_len"], p["vocab_size"], seed=cfg.train.seed + 1)
    model = GPT(p["layers"], p["width"], p["heads"], p["seq_len"], p["vocab_size"], cfg.model.activation_checkpointing)

    def evaluate(module: nn.Module, device: torch.device) -> float:
        module.eval()
        losses = []
        with torch.no_grad():
            for chunk in held_out.split(8):  # GPT-small's logits for 64 x 1024 tokens would not fit at once
                x = chunk.to(device)
                losses.append(sequence_losses(module(x[:, :-1]), x[:, 1:]))
        module.train()
        return torch.cat(losses).mean().item()

    return Workload(
        name="gpt",
        model=model,
        train_set=IndexableTensors(tokens[:, :-1], tokens[:, 1:]),
        sample_losses=sequence_losses,
        compiled_sample_losses=plain_sequence_losses,
        evaluate=evaluate,
        final_metric="eval_loss",
        flops_per_sample=p["seq_len"] * flops_per_token(model, p["layers"], p["width"], p["seq_len"]),
        tokens_per_sample=p["seq_len"],
    )
