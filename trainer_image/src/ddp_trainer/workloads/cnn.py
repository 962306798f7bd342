"""A small residual CNN on synthetic images, for throughput. Each class adds its own fixed pattern to noise, so
the loss falls and the accuracy means something, without a download."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import IndexableTensors, Workload

PRESETS = {  # image size, width, residual blocks, training samples
    "tiny": dict(image_size=16, width=16, layers=2, train_samples=1024),
    "small": dict(image_size=32, width=64, layers=4, train_samples=8192),
}
CLASSES = 10


def synthetic_images(n: int, size: int, seed: int, split: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Class templates depend on `seed` only; labels and noise also on `split`, so train and test differ."""
    templates = torch.randn(CLASSES, 3, size, size, generator=torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed * 1000 + split + 1)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    images = 0.7 * templates[labels] + torch.randn(n, 3, size, size, generator=g)
    return images, labels


class ResidualBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class SmallResNet(nn.Module):
    def __init__(self, width: int, blocks: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.Sequential(*[ResidualBlock(width) for _ in range(blocks)])
        self.head = nn.Linear(width, CLASSES)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def conv_flops_per_sample(model: nn.Module, size: int) -> float:
    """3x the forward multiply-adds x 2 (forward + backward), counted for convolutions and linears at full
    resolution (no striding in this model)."""
    macs = sum(m.weight.numel() * size * size for m in model.modules() if isinstance(m, nn.Conv2d))
    macs += sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    return 6.0 * macs


def build(cfg) -> Workload:
    p = dict(PRESETS.get(cfg.model.preset, PRESETS["tiny"]))
    for key in p:
        p[key] = getattr(cfg.model, key) or p[key]
    images, labels = synthetic_images(p["train_samples"], p["image_size"], cfg.train.seed, split=0)
    test_images, test_labels = synthetic_images(512, p["image_size"], cfg.train.seed, split=1)
    model = SmallResNet(p["width"], p["layers"])

    def evaluate(module: nn.Module, device: torch.device) -> float:
        module.eval()
        with torch.no_grad():
            predicted = module(test_images.to(device)).argmax(1).cpu()
        module.train()
        return (predicted == test_labels).float().mean().item()

    return Workload(
        name="cnn",
        model=model,
        train_set=IndexableTensors(images, labels),
        sample_losses=lambda out, y: F.cross_entropy(out.float(), y, reduction="none"),
        evaluate=evaluate,
        final_metric="test_accuracy",
        flops_per_sample=conv_flops_per_sample(model, p["image_size"]),
    )
