"""ddp_trainer: the torchrun DDP trainer harness bundled in the DDPJob trainer image."""

__version__ = "0.1.0"
