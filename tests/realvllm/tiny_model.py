"""Build a tiny random Llama and a tokenizer trained on the spot, for the real vLLM test.

Run by the vLLM virtualenv's Python (it needs torch, transformers and tokenizers, which the
project's own virtualenv does not have): ``python tiny_model.py OUT_DIR``. Nothing is
downloaded: the tokenizer is trained here on a few lines of text, the weights are random
(seeded, so two builds are the same model). A model this small answers in milliseconds on a CPU,
and what it says is noise: the test counts tokens, it does not read them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
VOCAB = 384  # byte-level: the 256 bytes, the specials, and some merges
TEXT = [
    "gpuwatch watches the GPUs of an inference box and counts what they cost.",
    "The engine serves completions; every token it generates is counted once.",
    "A request that finishes is useful work; a stream the client abandons is not.",
    "Counters go up, restarts reset them, and the increase over a window survives it.",
] * 20
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


def tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXT, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=4096,
        chat_template=CHAT_TEMPLATE,
    )


def model(vocab_size: int, bos: int, eos: int, pad: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head size 64: one the CPU attention backend supports
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    return LlamaForCausalLM(config).to(torch.bfloat16)


def main(out: Path) -> None:
    tok = tokenizer()
    tok.save_pretrained(out)
    ids = [tok.convert_tokens_to_ids(t) for t in ("<s>", "</s>", "<pad>")]
    model(len(tok), *ids).save_pretrained(out, safe_serialization=True)
    print(f"tiny model in {out}: vocabulary {len(tok)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
