"""The GPT workload's loss, taken a piece at a time and never upcasting the whole logits tensor to fp32, equals one
cross-entropy over the upcast logits: values and gradients, in bf16 and fp32, pieces that divide the tokens and
pieces that do not (issue 38)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ddp_trainer.workloads.gpt import sequence_losses


def reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    per_token = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return per_token.view(targets.shape).mean(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [7, 64, 10_000])  # uneven pieces, even pieces, one piece
def test_the_chunked_loss_equals_the_full_one(dtype, chunk):
    torch.manual_seed(0)
    batch, seq, vocab = 4, 32, 257
    raw = torch.randn(batch, seq, vocab) * 3
    targets = torch.randint(0, vocab, (batch, seq))
    weights = torch.rand(batch)  # a weighted mean, as per-sample losses are used
    grads = []
    for loss_fn in (reference, lambda x, y: sequence_losses(x, y, chunk_tokens=chunk)):
        logits = raw.to(dtype).requires_grad_()
        out = loss_fn(logits, targets)
        (out * weights).sum().backward()
        grads.append((out.detach(), logits.grad))
    (want, want_grad), (got, got_grad) = grads
    assert got.dtype == torch.float32 and got.shape == (batch,)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert got_grad.dtype == dtype
    torch.testing.assert_close(got_grad.float(), want_grad.float(), rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-2)


def test_without_autograd_no_graph_is_kept():
    logits, targets = torch.randn(2, 8, 11), torch.randint(0, 11, (2, 8))
    with torch.no_grad():
        out = sequence_losses(logits, targets, chunk_tokens=5)
    assert not out.requires_grad
    torch.testing.assert_close(out, reference(logits, targets))
