"""polymimic-strategies: distributed strategies and gradient communication hooks for Lightning."""

from polymimic_strategies.comm_hooks import make_bf16_compress_hook

__all__ = ["make_bf16_compress_hook"]
