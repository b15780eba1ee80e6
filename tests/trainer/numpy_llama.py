#!/usr/bin/env python3
"""An independent writer, reader and forward pass of LLaMA-architecture models (Hugging Face's
llama, mistral and qwen2), sharing no code with hdp: the safetensors layout is read and written from
its specification (8-byte little-endian header length, a JSON header of dtype, shape and
data_offsets per tensor, the data after it), the config from config.json's Hugging Face field
names, and the forward is LlamaForCausalLM's (MistralForCausalLM's, Qwen2ForCausalLM's) as the
transformers modeling files define it: pre-norm RMSNorm, RoPE in rotate-half layout with the
inverse frequencies of rope_scaling (default, linear, llama3: _compute_llama3_parameters), grouped
query attention with a causal mask over heads of head_dim (config's, else hidden_size / heads), q/k/v
biases for qwen2, SwiGLU MLP, lm_head or, with tie_word_embeddings, the embedding, in float64.

usage: numpy_llama.py MODEL_DIR DOCUMENTS_JSON OUT_LOGITS
         DOCUMENTS_JSON: a list of documents (lists of token ids); each is run on its own, positions
         from 0. OUT_LOGITS: the logits of every token of every document, in order, as
         little-endian float64.
       numpy_llama.py greedy MODEL_DIR PROMPT_JSON NEW_TOKENS OUT_JSON
         The prompt (a list of token ids) and NEW_TOKENS tokens after it, each the argmax of a full
         forward over the sequence so far, as a JSON list.
       numpy_llama.py write FAMILY OUT_DIR SEED SHARDS
         A small random model of FAMILY (llama3: Llama 3.2's features; qwen2; mistral) in bf16:
         config.json and model.safetensors, or SHARDS > 1 files and model.safetensors.index.json.
"""
import math
import json
import os
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


def inv_freq_of(config, head_dim):
    # transformers' modeling_rope_utils: default, linear and llama3 inverse frequencies.
    theta = config.get("rope_theta", 10000.0)
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old_context / high) & ~(wavelen > old_context / low)
        return np.where(medium, smoothed, scaled)
    assert kind == "default", kind
    return inv_freq


def rope(x, positions, inv_freq):
    # x: [T, heads, head_dim]; rotate-half: the first half pairs with the second.
    half = x.shape[-1] // 2
    angles = positions[:, None] * inv_freq[None, :]
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1)[:, None, :]
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def forward(config, w, tokens):
    d = config["hidden_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or d // heads
    eps = config["rms_norm_eps"]
    inv_freq = inv_freq_of(config, head_dim)
    biased = config["model_type"] == "qwen2"

    def project(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if biased else y

    t = len(tokens)
    positions = np.arange(t, dtype=np.float64)
    h = w["model.embed_tokens.weight"][np.asarray(tokens)]
    causal = np.triu(np.full((t, t), -np.inf), k=1)
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = rope(project(x, p + "self_attn.q_proj").reshape(t, heads, head_dim), positions, inv_freq)
        k = rope(project(x, p + "self_attn.k_proj").reshape(t, kv_heads, head_dim), positions, inv_freq)
        v = project(x, p + "self_attn.v_proj").reshape(t, kv_heads, head_dim)
        out = np.empty((t, heads, head_dim))
        for head in range(heads):
            kv = head // (heads // kv_heads)
            scores = q[:, head, :] @ k[:, kv, :].T / np.sqrt(head_dim) + causal
            probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs /= probs.sum(axis=-1, keepdims=True)
            out[:, head, :] = probs @ v[:, kv, :]
        h = h + out.reshape(t, heads * head_dim) @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate = x @ w[p + "mlp.gate_proj.weight"].T
        up = x @ w[p + "mlp.up_proj.weight"].T
        h = h + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if config.get("tie_word_embeddings") else w["lm_head.weight"]
    return rms_norm(h, w["model.norm.weight"], eps) @ head.T


def to_bf16_bits(values):
    # Round to nearest even on the upper 16 bits of the f32 (no NaNs here).
    bits = np.asarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, values in tensors:
        blob = to_bf16_bits(values).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(values.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


SMALL = {"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "hidden_act": "silu",
         "max_position_embeddings": 256, "torch_dtype": "bfloat16"}
FAMILIES = {
    # Llama 3.2's features: llama3 scaling (original context 32 puts head_dim 12's frequencies in
    # all three bands), tied, head_dim free of hidden_size / heads, GQA.
    "llama3": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "head_dim": 12, "rope_theta": 10000.0,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
               "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False},
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "rope_theta": 1000000.0,
              "sliding_window": 32768, "max_window_layers": 2, "use_sliding_window": False,
              "tie_word_embeddings": True},
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "rope_theta": 1000000.0,
                "sliding_window": None, "tie_word_embeddings": False, "num_key_value_heads": 1},
}


def write_model(family, out_dir, seed, shards):
    config = dict(SMALL, **FAMILIES[family])
    rng = np.random.default_rng(seed)
    d, f = config["hidden_size"], config["intermediate_size"]
    hd = config.get("head_dim") or d // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd

    def normal(*shape, std=0.4):
        return rng.normal(0.0, std, shape)

    tensors = [("model.embed_tokens.weight", normal(config["vocab_size"], d, std=0.5))]
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        tensors += [(p + "input_layernorm.weight", 1 + normal(d, std=0.1)),
                    (p + "self_attn.q_proj.weight", normal(q, d)), (p + "self_attn.k_proj.weight", normal(kv, d)),
                    (p + "self_attn.v_proj.weight", normal(kv, d)), (p + "self_attn.o_proj.weight", normal(d, q)),
                    (p + "post_attention_layernorm.weight", 1 + normal(d, std=0.1)),
                    (p + "mlp.gate_proj.weight", normal(f, d)), (p + "mlp.up_proj.weight", normal(f, d)),
                    (p + "mlp.down_proj.weight", normal(d, f))]
        if config["model_type"] == "qwen2":
            tensors += [(p + "self_attn.%s_proj.bias" % n, normal(width, std=0.5))
                        for n, width in (("q", q), ("k", kv), ("v", kv))]
    tensors.append(("model.norm.weight", 1 + normal(d, std=0.1)))
    if not config["tie_word_embeddings"]:
        tensors.append(("lm_head.weight", normal(config["vocab_size"], d)))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f_out:
        json.dump(config, f_out, indent=2)
    if shards == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
        return
    weight_map, per = {}, -(-len(tensors) // shards)
    for i in range(shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = tensors[i * per:(i + 1) * per]
        write_safetensors(os.path.join(out_dir, name), part)
        weight_map.update({t: name for t, _ in part})
    total = sum(2 * v.size for _, v in tensors)
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f_out:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f_out, indent=2)


def greedy(model_dir, prompt, new_tokens):
    config, weights = load(model_dir)
    tokens = list(prompt)
    for _ in range(new_tokens):
        tokens.append(int(np.argmax(forward(config, weights, tokens)[-1])))
    return tokens


def main():
    if sys.argv[1] == "write":
        write_model(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    if sys.argv[1] == "greedy":
        with open(sys.argv[3]) as f:
            prompt = json.load(f)
        with open(sys.argv[5], "w") as f:
            json.dump(greedy(sys.argv[2], prompt, int(sys.argv[4])), f)
        return
    export_dir, documents_json, out = sys.argv[1:4]
    config, weights = load(export_dir)
    with open(documents_json) as f:
        documents = json.load(f)
    logits = np.concatenate([forward(config, weights, doc) for doc in documents])
    logits.astype("<f8").tofile(out)


if __name__ == "__main__":
    main()
