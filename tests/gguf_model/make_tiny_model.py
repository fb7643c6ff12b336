# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a tiny llama-architecture GGUF model that llama-server can load and serve.

The weights are random (seeded, so the file is the same on every run) and the
model says nothing sensible; it exists so the serving path (model loading,
tokenizer, chat template, OpenAI-compatible endpoints, streaming) can be tested
in seconds on a CPU without downloading a model. See README.md.

Usage: python tests/gguf_model/make_tiny_model.py OUTPUT.gguf [--seed N]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import gguf

ARCH = 'llama'
CONTEXT_LENGTH = 2048
N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 4
N_FF = 128
RMS_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0
DEFAULT_SEED = 20240601

# The words the BPE merges build, each left to right from its first character
# (' the' from ' '+'t', ' t'+'h', ' th'+'e'), so no merge of one word splits
# another; one token per merge, in this order (the merge's rank).
WORDS = [' the', ' and', ' hello', ' world', ' is', ' of', 'er', 'ing']
# The words the model prefers to say, so replies are readable text.
SPOKEN_WORDS = WORDS[:6]
SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']

# ChatML, the format of Qwen and many other instruction-tuned models.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def byte_to_unicode():
    """GPT-2's reversible map from bytes to printable characters (byte-level BPE token text)."""
    printable = (list(range(ord('!'), ord('~') + 1)) + list(range(ord('\u00a1'), ord('\u00ac') + 1))
                 + list(range(ord('\u00ae'), ord('\u00ff') + 1)))
    chars = list(printable)
    shift = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shift)
            shift += 1
    return {byte: chr(char) for byte, char in zip(printable, chars)}


def bpe(text, ranks):
    """Split text (already in token characters) into tokens the way byte-level BPE does."""
    parts = list(text)
    while len(parts) > 1:
        pairs = [(ranks.get((left, right)), i) for i, (left, right) in enumerate(zip(parts, parts[1:]))]
        pairs = [(rank, i) for rank, i in pairs if rank is not None]
        if not pairs:
            break
        _rank, i = min(pairs)
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def merge_pairs():
    """The merges that build WORDS, as (left, right) plain-text pairs in rank order."""
    pairs = []
    for word in WORDS:
        for end in range(1, len(word)):
            pair = (word[:end], word[end])
            if pair not in pairs:
                pairs.append(pair)
    return pairs


def encode(text):
    """text in byte-level BPE token characters."""
    to_text = byte_to_unicode()
    return ''.join(to_text[b] for b in text.encode('utf-8'))


def vocabulary():
    """Return (tokens, token_types, merges) in the form GGUF stores them.

    Token ids: 0-255 are the single bytes in byte order, then one token per
    merge in merge_pairs() order, then SPECIAL_TOKENS.
    """
    to_text = byte_to_unicode()
    tokens = [to_text[b] for b in range(256)]
    known = set(tokens)
    merges = []
    for left, right in merge_pairs():
        left_text, right_text = encode(left), encode(right)
        if left_text not in known or right_text not in known:
            raise ValueError('merge %r + %r uses a token not yet in the vocabulary' % (left, right))
        merged = left_text + right_text
        if merged in known:
            raise ValueError('merge %r + %r gives a token that already exists' % (left, right))
        tokens.append(merged)
        known.add(merged)
        merges.append('%s %s' % (left_text, right_text))
    ranks = {tuple(merge.split(' ')): rank for rank, merge in enumerate(merges)}
    for token in tokens[256:]:
        if bpe(token, ranks) != [token]:
            raise ValueError('token %r is unreachable: it encodes as %r' % (token, bpe(token, ranks)))
    token_types = [gguf.TokenType.NORMAL] * len(tokens)
    tokens += SPECIAL_TOKENS
    token_types += [gguf.TokenType.CONTROL] * len(SPECIAL_TOKENS)
    return tokens, token_types, merges


def tensors(tokens, seed):
    """Random weights for every tensor the llama architecture needs, as (name, array) pairs.

    numpy shapes are (rows, columns) = (out, in); GGUF stores them reversed.
    One embedding dimension is a constant 1 for every token: it runs through
    the residual stream to the output, where its column of output.weight acts
    as a per-token bias towards SPOKEN_WORDS. The other weights decide which
    of those words comes next.
    """
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def matrix(rows, cols):
        return rng.normal(0.0, 0.02, size=(rows, cols)).astype(np.float16)

    def norm():
        return np.ones(N_EMBD, dtype=np.float32)

    n_embd_kv = N_EMBD // N_HEAD * N_HEAD_KV
    token_embd = matrix(n_vocab, N_EMBD)
    token_embd[:, 0] = 1.0
    out = [('token_embd.weight', token_embd)]
    for layer in range(N_LAYER):
        prefix = 'blk.%d.' % layer
        out += [
            (prefix + 'attn_norm.weight', norm()),
            (prefix + 'attn_q.weight', matrix(N_EMBD, N_EMBD)),
            (prefix + 'attn_k.weight', matrix(n_embd_kv, N_EMBD)),
            (prefix + 'attn_v.weight', matrix(n_embd_kv, N_EMBD)),
            (prefix + 'attn_output.weight', matrix(N_EMBD, N_EMBD)),
            (prefix + 'ffn_norm.weight', norm()),
            (prefix + 'ffn_gate.weight', matrix(N_FF, N_EMBD)),
            (prefix + 'ffn_up.weight', matrix(N_FF, N_EMBD)),
            (prefix + 'ffn_down.weight', matrix(N_EMBD, N_FF)),
        ]
    output = matrix(n_vocab, N_EMBD)
    spoken = {encode(word) for word in SPOKEN_WORDS}
    # After the final RMS norm the constant dimension is about 8, so this is
    # about +-2.4 on the logits: sampled replies, too, are nearly all words.
    output[:, 0] = [0.3 if token in spoken else -0.3 for token in tokens]
    out += [('output_norm.weight', norm()), ('output.weight', output)]
    return out


def write_model(path, seed=DEFAULT_SEED):
    """Write the model to path; the same seed always gives the same bytes."""
    tokens, token_types, merges = vocabulary()
    special = {text: tokens.index(text) for text in SPECIAL_TOKENS}

    writer = gguf.GGUFWriter(path, ARCH)
    writer.add_name('tiny-chat')
    writer.add_description('Random weights for tests of the serving path; produces no meaningful text.')
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_vocab_size(len(tokens))

    writer.add_tokenizer_model('gpt2')
    writer.add_tokenizer_pre('default')
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(special['<|endoftext|>'])
    writer.add_eos_token_id(special['<|im_end|>'])
    writer.add_eot_token_id(special['<|im_end|>'])
    writer.add_pad_token_id(special['<|endoftext|>'])
    # ChatML models start the prompt with <|im_start|>, not a BOS token.
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    for name, data in tensors(tokens, seed):
        writer.add_tensor(name, data)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('output', help='path of the .gguf file to write')
    parser.add_argument('--seed', type=int, default=DEFAULT_SEED, help='seed of the random weights')
    args = parser.parse_args(argv)
    directory = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(directory, exist_ok=True)
    # Write next to the target and rename, so an interrupted run leaves no half file for make.
    partial = args.output + '.partial'
    write_model(partial, args.seed)
    os.replace(partial, args.output)
    print('wrote %s (%d bytes)' % (args.output, os.path.getsize(args.output)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
