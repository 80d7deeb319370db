"""Tiny randomly initialised checkpoints of every supported family, with real tokenizers.

Each is built from the family's own transformers config class (2-4 layers, width 64),
saved as a Hugging Face folder (safetensors, config, tokenizer) and loaded through
kebench's own loader, as a user's checkpoint folder would be. Quality is not what they
test: module paths, weight layouts, tokenizer kinds and padding are.

Tokenizers are real:
    byte-level BPE (GPT-2, Llama-3, Qwen, OPT, OLMo 2, StarCoder2 style): SmolLM2's,
        from its GGUF;
    SentencePiece (Llama-2, Mistral, Gemma, Phi-3 style): trained here, offline, with
        ``tokenizers`` on the demo's texts, in Llama-2's legacy mode: a "▁" is prepended
        to the text and every space becomes "▁", with BOS and no pad token.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import torch
from tokenizers import SentencePieceBPETokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.processors import TemplateProcessing
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from kebench.models.loading import LoadedModel, load_model
from kebench.models.registry import resolve_model
from kebench.project import PROJECT_ROOT

DEMO = PROJECT_ROOT / "data" / "01_raw" / "demo"
N_LAYERS = 4
WIDTH = 64
# model_type -> (tokenizer kind, the config's size keys)
_DECODER = {
    "hidden_size": WIDTH,
    "num_hidden_layers": N_LAYERS,
    "num_attention_heads": 4,
    "intermediate_size": 2 * WIDTH,
    "max_position_embeddings": 512,
}
_GQA = {**_DECODER, "num_key_value_heads": 2}
FAMILIES: dict[str, tuple[str, dict]] = {
    "gpt2": (
        "bpe",
        {"n_embd": WIDTH, "n_layer": N_LAYERS, "n_head": 4, "n_positions": 512},
    ),
    "gptj": (
        "bpe",
        {
            "n_embd": WIDTH,
            "n_layer": N_LAYERS,
            "n_head": 4,
            "n_positions": 512,
            "rotary_dim": 8,
        },
    ),
    "gpt_neox": ("bpe", _DECODER),
    "llama": ("sentencepiece", _GQA),
    "mistral": ("sentencepiece", _GQA),
    "qwen2": ("bpe", _GQA),
    "qwen3": ("bpe", {**_GQA, "head_dim": 16}),
    "gemma2": ("sentencepiece", {**_GQA, "head_dim": 16}),
    "gemma3_text": ("sentencepiece", {**_GQA, "head_dim": 16}),
    "phi3": ("sentencepiece", _GQA),
    # OLMo 2: norms after each sublayer, q/k norms; StarCoder2: GPT-2's c_fc/c_proj MLP
    "olmo2": ("bpe", _GQA),
    "starcoder2": ("bpe", _GQA),
    "opt": (
        "bpe",
        {
            "hidden_size": WIDTH,
            "num_hidden_layers": N_LAYERS,
            "num_attention_heads": 4,
            "ffn_dim": 2 * WIDTH,
            "max_position_embeddings": 512,
            "word_embed_proj_dim": WIDTH,
        },
    ),
}


def demo_texts() -> list[str]:
    """Every prompt of the demo's edit cases, with its true and new answers."""
    texts = []
    for case in json.loads((DEMO / "edit_cases.json").read_text(encoding="utf-8")):
        for rewrite in case["requested_rewrite"]:
            prompt = rewrite["prompt"].format(rewrite["subject"])
            texts.append(f"{prompt} {rewrite['target_true']['str']}")
            texts.append(f"{prompt} {rewrite['target_new']['str']}")
        texts += case.get("questions", [])
    return texts


@cache
def sentencepiece_tokenizer() -> PreTrainedTokenizerBase:
    """A SentencePiece BPE tokenizer trained on the demo's texts, Llama-2 style."""
    trainer = SentencePieceBPETokenizer(unk_token="<unk>", replacement="▁")
    trainer.train_from_iterator(
        demo_texts(),
        vocab_size=800,
        special_tokens=["<unk>", "<s>", "</s>"],
        show_progress=False,
    )
    raw = trainer._tokenizer  # noqa: SLF001 - the trained tokenizers.Tokenizer
    # Llama-2's legacy SentencePiece mode: "▁" before the text and for every space,
    # pieces never cross a "▁"; so " Paris" alone becomes "▁", "▁Paris".
    raw.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
    )
    raw.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    raw.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    raw.post_processor = TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def tokenizer_of(kind: str, bpe: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    return sentencepiece_tokenizer() if kind == "sentencepiece" else bpe


def build_checkpoint(
    model_type: str, folder: Path, bpe: PreTrainedTokenizerBase, seed: int = 0
) -> Path:
    """A tiny random ``model_type`` checkpoint folder, written once."""
    if (folder / "config.json").is_file():
        return folder
    kind, sizes = FAMILIES[model_type]
    tokenizer = tokenizer_of(kind, bpe)
    special = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = AutoConfig.for_model(
        model_type, vocab_size=len(tokenizer), **sizes, **special
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def load_checkpoint(folder: Path) -> LoadedModel:
    """The folder loaded as ``--params model=<folder>`` would load it."""
    return load_model(resolve_model(str(folder), {}), folder)
