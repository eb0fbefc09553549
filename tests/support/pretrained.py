"""Tiny randomly initialised Hugging Face models (GPT-2, GPT-NeoX, Llama with grouped-query attention, Qwen2) and a
word-level tokenizer, built from config objects and saved with save_pretrained as a user's pretrained model: no hub."""

import torch
import transformers

V, D, LAYERS, HEADS = 96, 32, 2, 4
SPECIAL = ("<s>", "</s>", "<pad>")


def hf_config(kind: str):
    common = {"vocab_size": V, "bos_token_id": 0, "eos_token_id": 1}
    if kind == "gpt2":
        return transformers.GPT2Config(n_embd=D, n_layer=LAYERS, n_head=HEADS, n_positions=128, **common)
    if kind == "neox":
        return transformers.GPTNeoXConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                          intermediate_size=64, max_position_embeddings=128, **common)
    if kind == "llama":  # grouped-query: 4 query heads share 2 key/value heads
        return transformers.LlamaConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
                                        tie_word_embeddings=True, **common)
    return transformers.Qwen2Config(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                    num_key_value_heads=1, intermediate_size=64, max_position_embeddings=128, **common)


def word_tokenizer(bos: bool):
    """A word-level tokenizer: the special tokens first, then ordinary words up to V - 6 (the embedding keeps 6
    rows no token uses, as real models pad theirs); text is split at white space, so "w5 w7" is [5, 7]."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(SPECIAL)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL), V - 6)})
    fast = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    fast.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=fast, bos_token="<s>" if bos else None,
                                                eos_token="</s>", pad_token="<pad>")


def save_model(kind: str, path, tokenizer: bool | str = False, seed: int = 0):
    """A tiny model of ``kind`` in ``path``; ``tokenizer`` True saves one with a BOS token, "no-bos" one without."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(kind))
    model.save_pretrained(path)
    if tokenizer:
        word_tokenizer(bos=tokenizer is True).save_pretrained(path)
    return path
