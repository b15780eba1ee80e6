#!/usr/bin/env python3
"""An independent reader and forward pass of an exported LLaMA model, sharing no code with hdp:
the safetensors layout is read from its specification (8-byte little-endian header length, a JSON
header of dtype, shape and data_offsets per tensor, the data after it), the config from
config.json's Hugging Face field names, and the forward is LlamaForCausalLM's as its paper and
Hugging Face's documentation describe it (pre-norm RMSNorm, RoPE in rotate-half layout, grouped
query attention with a causal mask, SwiGLU MLP, untied lm_head), in float64.

usage: numpy_llama.py EXPORT_DIR DOCUMENTS_JSON OUT_LOGITS
DOCUMENTS_JSON: a list of documents (lists of token ids); each is run on its own, positions from 0.
OUT_LOGITS: the logits of every token of every document, in order, as little-endian float64.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8")}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    data = blob[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if info["dtype"] == "BF16":  # the upper 16 bits of an f32
            raw = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
            values = raw.view(np.float32)
        else:
            values = np.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]])
        tensors[name] = values.astype(np.float64).reshape(info["shape"])
    return tensors


def load(export_dir):
    with open(export_dir + "/config.json") as f:
        config = json.load(f)
    try:
        with open(export_dir + "/model.safetensors.index.json") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    except FileNotFoundError:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(read_safetensors(export_dir + "/" + name))
    return config, weights


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x, positions, theta):
    # x: [T, heads, head_dim]; rotate-half: the first half pairs with the second.
    half = x.shape[-1] // 2
    inv_freq = 1.0 / theta ** (np.arange(half, dtype=np.float64) * 2.0 / x.shape[-1])
    angles = positions[:, None] * inv_freq[None, :]
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1)[:, None, :]
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def forward(config, w, tokens):
    d = config["hidden_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = d // heads
    eps, theta = config["rms_norm_eps"], config["rope_theta"]
    t = len(tokens)
    positions = np.arange(t, dtype=np.float64)
    h = w["model.embed_tokens.weight"][np.asarray(tokens)]
    causal = np.triu(np.full((t, t), -np.inf), k=1)
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = rope((x @ w[p + "self_attn.q_proj.weight"].T).reshape(t, heads, head_dim), positions, theta)
        k = rope((x @ w[p + "self_attn.k_proj.weight"].T).reshape(t, kv_heads, head_dim), positions, theta)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(t, kv_heads, head_dim)
        out = np.empty((t, heads, head_dim))
        for head in range(heads):
            kv = head // (heads // kv_heads)
            scores = q[:, head, :] @ k[:, kv, :].T / np.sqrt(head_dim) + causal
            probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs /= probs.sum(axis=-1, keepdims=True)
            out[:, head, :] = probs @ v[:, kv, :]
        h = h + out.reshape(t, d) @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate = x @ w[p + "mlp.gate_proj.weight"].T
        up = x @ w[p + "mlp.up_proj.weight"].T
        h = h + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    return rms_norm(h, w["model.norm.weight"], eps) @ w["lm_head.weight"].T


def main():
    export_dir, documents_json, out = sys.argv[1:4]
    config, weights = load(export_dir)
    with open(documents_json) as f:
        documents = json.load(f)
    logits = np.concatenate([forward(config, weights, doc) for doc in documents])
    logits.astype("<f8").tofile(out)


if __name__ == "__main__":
    main()
