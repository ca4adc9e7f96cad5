"""A tiny Llama model with random weights and a locally trained tokenizer, written to a directory.

Head size 64: the size every paged-attention kernel supports, so TGI takes its flash path with this model too.

The runtime check serves it: no hub download (images may have no network), seconds to make, and the same
bytes every run (fixed seed). Special tokens get zero output rows, so greedy decoding never picks the
end-of-sequence token and a healthy server always returns the tokens asked for.
"""

from __future__ import annotations

from pathlib import Path

# Words the tokenizer is trained on; the prompt the check sends is made of them.
_CORPUS = [
    "the image serves a tiny model on the smoke run",
    "tokens come back over http from the serving runtime",
    "a kernel for every arch and a server that starts",
    "hello world from the imagebuild smoke suite",
]
PROMPT = "hello world from the image"
SPECIAL = ["<unk>", "<s>", "</s>"]
# A chat template, so `/v1/chat/completions` serves it (without one transformers answers 500): each message as
# `role: content` on its own line, then `assistant:` when a reply is asked for. Roles and content are the words
# the tokenizer knows, or bytes it splits; no special token is needed.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: "
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{{ part['text'] }}{% endfor %}{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def build(dest: Path, *, layers: int = 2, hidden: int = 128, heads: int = 2, kv_heads: int = 1) -> Path:
    """Write config, safetensors weights, generation config and a fast tokenizer to ``dest``; returns it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    dest.mkdir(parents=True, exist_ok=True)
    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=SPECIAL,
        show_progress=False,
    )
    raw.train_from_iterator(_CORPUS, trainer)  # no byte alphabet: every token decodes to whole characters
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(dest))

    ids = {tok: raw.token_to_id(tok) for tok in SPECIAL}
    config = LlamaConfig(
        vocab_size=raw.get_vocab_size(),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=256,
        bos_token_id=ids["<s>"],
        eos_token_id=ids["</s>"],
        pad_token_id=ids["<unk>"],
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for token_id in ids.values():
            model.lm_head.weight[token_id].zero_()
    model.save_pretrained(str(dest), safe_serialization=True)
    GenerationConfig(
        do_sample=False, bos_token_id=ids["<s>"], eos_token_id=ids["</s>"], pad_token_id=ids["<unk>"]
    ).save_pretrained(str(dest))
    return dest


def main(argv: list[str] | None = None) -> int:
    """``python -m smoke.tiny_model DEST``: the runtime check runs this in a child process with a timeout."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m smoke.tiny_model DEST", file=sys.stderr)
        return 2
    build(Path(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
