"""PaliGemma for Pi: loading a local transformers-format directory, and a tiny one for tests.

Nothing here downloads: a directory is read with `local_files_only=True`. The same loading
code serves the real PaliGemma 3B directory and the tiny one `make_tiny_paligemma` writes
(config.json, model.safetensors and a byte-level tokenizer that `AutoTokenizer` loads).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch

TINY_DIRNAME = "paligemma-tiny"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
_TINY_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<image>")  # ids 0..4, as in Gemma's vocabulary


def check_paligemma_path(path: str | os.PathLike[str], *, weights: bool) -> Path:
    """The directory, or FileNotFoundError naming it (before anything heavy is built)."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(
            f"paligemma_path: {directory} does not exist or is not a directory (a local "
            "PaliGemma in the transformers format: config.json, weights, tokenizer)"
        )
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"paligemma_path: {directory} has no config.json")
    if weights and not any((directory / f).is_file() for f in WEIGHT_FILES):
        raise FileNotFoundError(
            f"paligemma_path: {directory} has no weights (none of {list(WEIGHT_FILES)}); "
            "pass load_base_weights=False when a checkpoint supplies them (a resume)"
        )
    return directory


def paligemma_config(path: str | os.PathLike[str]) -> Any:
    """The PaliGemmaConfig of a directory (reads config.json only)."""
    from transformers import PaliGemmaConfig

    return PaliGemmaConfig.from_pretrained(check_paligemma_path(path, weights=False))


def build_paligemma(config: Any) -> Any:
    """A PaliGemmaForConditionalGeneration from a config alone, in float32 (random weights).

    Honours an enclosing `torch.device(...)` context, e.g. "meta" to count parameters.
    """
    from transformers import PaliGemmaForConditionalGeneration

    config._attn_implementation = "sdpa"
    config.vision_config._attn_implementation = "sdpa"
    config.text_config._attn_implementation = "sdpa"
    return PaliGemmaForConditionalGeneration(config).float()


def load_paligemma(path: str | os.PathLike[str], *, load_base_weights: bool = True) -> Any:
    """PaliGemma from a local directory: its weights, or (a resume) its config alone.

    With `load_base_weights=False` the weights file is never opened. Either way the model
    is in training mode, as a freshly built module is (from_pretrained leaves it in eval
    mode, which would make a resumed run differ from a fresh one wherever dropout is set).
    """
    from transformers import PaliGemmaForConditionalGeneration

    directory = check_paligemma_path(path, weights=load_base_weights)
    if not load_base_weights:
        return build_paligemma(paligemma_config(directory)).train()
    return PaliGemmaForConditionalGeneration.from_pretrained(
        directory, local_files_only=True, dtype=torch.float32, attn_implementation="sdpa"
    ).train()


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The directory's own tokenizer, padding on the right."""
    from transformers import AutoTokenizer

    directory = check_paligemma_path(path, weights=False)
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    tokenizer.padding_side = "right"
    if tokenizer.pad_token_id is None:
        raise ValueError(f"paligemma_path: the tokenizer in {directory} has no pad token")
    return tokenizer


def paligemma_3b_config() -> Any:
    """PaliGemma 3B at 224 px: SigLIP So400m/14 and Gemma 2B (for counting, never weights)."""
    from transformers import PaliGemmaConfig

    return PaliGemmaConfig(
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
            "patch_size": 14,
            "image_size": 224,
            "vision_use_head": False,
            "projector_hidden_act": "gelu_fast",
        },
        text_config={
            "model_type": "gemma",
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_hidden_layers": 18,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "vocab_size": 257152,
            "hidden_activation": "gelu_pytorch_tanh",
        },
        projection_dim=2048,
        hidden_size=2048,
        vocab_size=257152,
        image_token_index=257152,
    )


def _tiny_tokenizer() -> Any:
    """A byte-level tokenizer (every byte one token; no merges), Gemma's special ids first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {token: i for i, token in enumerate(_SPECIALS)}
    for char in sorted(alphabet):
        vocab[char] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=["<image>"],
        padding_side="right",
    )


def _tiny_config(vocab_size: int) -> Any:
    from transformers import PaliGemmaConfig

    options: dict[str, Any] = {"pad_token_id": 0}  # a PretrainedConfig keyword

    return PaliGemmaConfig(
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "patch_size": 8,
            "image_size": 32,
            "vision_use_head": False,
        },
        text_config={
            "model_type": "gemma",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "vocab_size": vocab_size,
            "pad_token_id": 0,
            "eos_token_id": 1,
            "bos_token_id": 2,
            "hidden_activation": "gelu_pytorch_tanh",
        },
        projection_dim=64,
        hidden_size=64,
        vocab_size=vocab_size,
        image_token_index=_SPECIALS.index("<image>"),
        **options,
    )


def _complete(directory: Path) -> bool:
    return all((directory / f).is_file() for f in _TINY_FILES)


def make_tiny_paligemma(directory: str | Path) -> Path:
    """Write a tiny random PaliGemma (SigLIP 32 px / patch 8, Gemma 2 x 64) with a tokenizer.

    Idempotent: a complete directory is left as it is. Written into a temporary sibling and
    renamed into place, so a reader never sees half a directory.
    """
    directory = Path(directory)
    if _complete(directory):
        return directory
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory}: exists but is not a complete tiny PaliGemma")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.parent / f".{directory.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tokenizer = _tiny_tokenizer()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = build_paligemma(_tiny_config(len(tokenizer)))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if directory.exists():
            directory.rmdir()  # empty (checked above)
        try:
            tmp.rename(directory)
        except OSError:
            if not _complete(directory):  # not another writer's finished copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return directory


def ensure_tiny_paligemma(cache_dir: str | Path) -> Path:
    """`<cache_dir>/paligemma-tiny`, made on first use."""
    return make_tiny_paligemma(Path(cache_dir) / TINY_DIRNAME)
