# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a tiny Qwen3 (dense), Qwen3-MoE or Qwen2 model in Hugging Face layout that vLLM can serve.

The weights are random (seeded) and the replies meaningless; the model exists
so the real vLLM engine (its CPU build) can load, tokenize, apply the chat
template, schedule, stream and report metrics in a minute on two cores,
without downloading anything. The directory holds what a Hub snapshot holds:
config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json (with the ChatML template of Qwen).

Shape: hidden 128, 2 layers, 4 attention heads over 2 KV heads of head_dim 64
(vLLM's CPU attention refuses head_dim 16), vocabulary 512 from a byte-level
BPE trained here on a few sentences. The MoE variant has 4 experts, 2 per token,
and one KV head; the Qwen2 one (Qwen2.5, QwQ) 3 layers and hidden 256, as
Qwen2 derives head_dim from it. Each KV cache figure is thus its own.

Usage: python tests/hf_model/make_tiny_qwen.py OUT_DIR [--arch qwen3|qwen3_moe|qwen2] [--seed N]
Needs torch, transformers and tokenizers (the vLLM CPU venv has them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

VOCAB_SIZE = 512
HIDDEN = 128
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
CONTEXT = 2048
DEFAULT_SEED = 20240601
SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']

# Qwen's ChatML template, without tools or thinking: enough for the OpenAI
# chat endpoint to build prompts the way it does for the real models.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# What the tokenizer is trained on: the words the tests send.
CORPUS = [
    "Hello world, this is a tiny model for testing the serving path.",
    "The quick brown fox jumps over the lazy dog.",
    "Say hello and count to ten: one two three four five six seven eight nine ten.",
    "A home server with two GPUs serves a language model behind a proxy.",
    "Stream the answer token by token, then stop at the end of the message.",
    "What is the capital of France? Paris is the capital of France.",
    "Write a short poem about the sea, the wind and the light.",
] * 8


def train_tokenizer(out_dir):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token='<|im_end|>', pad_token='<|endoftext|>',
                                   unk_token=None, bos_token=None, model_max_length=CONTEXT)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def model_config(arch, tokenizer):
    common = dict(
        vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=CONTEXT,
        tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1000000.0,
        bos_token_id=tokenizer.convert_tokens_to_ids('<|endoftext|>'),
        eos_token_id=tokenizer.convert_tokens_to_ids('<|im_end|>'),
        pad_token_id=tokenizer.convert_tokens_to_ids('<|endoftext|>'),
    )
    if arch == 'qwen3':
        from transformers import Qwen3Config
        return Qwen3Config(intermediate_size=256, **common)
    if arch == 'qwen2':
        # Qwen2 (Qwen2.5, QwQ) has no head_dim of its own: hidden / heads, so
        # twice the hidden size keeps the CPU attention's head_dim of 64.
        from transformers import Qwen2Config
        common.pop('head_dim')
        common['hidden_size'] = HEAD_DIM * HEADS
        # Shapes differ between the models so that each one's KV cache figure
        # (vLLM's against the planner's) is its own: 3 layers here.
        common['num_hidden_layers'] = 3
        return Qwen2Config(intermediate_size=512, **common)
    from transformers import Qwen3MoeConfig
    common['num_key_value_heads'] = 1  # one KV head: half the dense model's KV bytes a token
    return Qwen3MoeConfig(intermediate_size=256, moe_intermediate_size=64, num_experts=4, num_experts_per_tok=2,
                          decoder_sparse_step=1, norm_topk_prob=True, **common)


def build(out_dir, arch, seed):
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.manual_seed(seed)
    tokenizer = train_tokenizer(out_dir)
    if len(tokenizer) > VOCAB_SIZE:
        raise SystemExit(f'tokenizer has {len(tokenizer)} tokens, more than the vocabulary of {VOCAB_SIZE}')
    config = model_config(arch, tokenizer)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    # Random init puts the weights near zero: scale them so the logits vary
    # and generation does not sit on one token.
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0.0, 0.08)
    model.save_pretrained(out_dir, safe_serialization=True)
    GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
                     bos_token_id=config.bos_token_id).save_pretrained(out_dir)
    # config.json stays as transformers 5 writes it (dtype, num_local_experts):
    # the planner must read it as users' downloads will spell it.


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out_dir')
    parser.add_argument('--arch', choices=['qwen3', 'qwen3_moe', 'qwen2'], default='qwen3')
    parser.add_argument('--seed', type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)

    # Written beside the target and renamed into place: an interrupted run
    # leaves no half model that a later make would take as done.
    parent = os.path.dirname(os.path.abspath(args.out_dir))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix='.tiny-qwen-', dir=parent)
    try:
        build(work, args.arch, args.seed)
        # mkdtemp makes 0700: the engine's unprivileged user reads the copy.
        os.chmod(work, 0o755)
        for name in os.listdir(work):
            os.chmod(os.path.join(work, name), 0o644)
        with open(os.path.join(work, 'config.json'), encoding='utf-8') as handle:
            config = json.load(handle)
        if os.path.exists(args.out_dir):
            shutil.rmtree(args.out_dir)
        os.rename(work, args.out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    print(f"wrote {args.out_dir}: {config['architectures'][0]}, {config['num_hidden_layers']} layers, "
          f"{config['num_key_value_heads']} KV heads of head_dim "
          f"{config.get('head_dim') or config['hidden_size'] // config['num_attention_heads']}, vocab {config['vocab_size']}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
