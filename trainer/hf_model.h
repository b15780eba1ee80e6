// File: trainer/hf_model.h
//
// The user's model in and out, in Hugging Face's LLaMA format (../shared references, formats.md §2,
// §3): `config.json` <-> ops::model::LlamaConfig, weights from `model.safetensors` or a sharded
// `model.safetensors.index.json`, and the export of an hdp checkpoint as both. hdp's parameter
// names, shapes and layout ([out, in] linear weights, rotate-half RoPE) are already Hugging
// Face's (ops/model/llama_params.h), so tensors go in and out unchanged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "ops/model/llama_config.h"

namespace hdp::trainer {

// Reads a LlamaConfig from `config.json`: model_type llama, mistral or qwen2 (q/k/v biases);
// rope_scaling (or rope_parameters) of rope_type default, linear or llama3; tie_word_embeddings;
// head_dim free of hidden_size / heads; Mistral's sliding_window (null, or checked against the
// job's context: trainer_config.h). Refused (InvalidArgument naming the file and the field): another
// model_type or rope_type, attention biases on llama or mistral, MLP biases, an activation other
// than silu, Qwen2's use_sliding_window true, and any field of the wrong type or out of range.
// max_position_embeddings (a positive integer, optional) becomes max_positions; a longer --context
// is no error (the job extends the model's context).
ops::model::LlamaConfig read_hf_config(const std::filesystem::path& config_json);
// The `config.json` of the config's family (LlamaForCausalLM, MistralForCausalLM or
// Qwen2ForCausalLM) with its shape, RoPE scaling and tying, weights saved in `dtype`;
// max_position_embeddings is config.max_positions (left out when 0: not known).
nlohmann::json hf_config(const ops::model::LlamaConfig& config, checkpoint::TensorDtype dtype);

// The model config a checkpoint's manifest records: every field of `config`
// (TrainerConfig::model_json() sets max_position_embeddings to the trained context when larger).
nlohmann::json model_manifest_json(const ops::model::LlamaConfig& config);
// The model config a checkpoint's manifest records, read back; its max_position_embeddings becomes
// max_positions (0 in checkpoints of builds that did not record it), and the fields of the model
// families default to a plain untied llama in checkpoints written before them.
ops::model::LlamaConfig model_from_manifest(const nlohmann::json& model_config);

// Fills `params` (the flat buffer, ops/model/llama_params.h's order) from `dir`'s
// model.safetensors, or its model.safetensors.index.json and the shards it names. Every tensor of
// the layout must be there with its shape, and no other (old `rotary_emb.inv_freq` buffers are
// ignored; a tied model's file may hold lm_head.weight only equal to the embedding, as Hugging
// Face accepts it); a shard may hold only the tensors the index places in it. F32, BF16 and F16 convert to
// f32. InvalidArgument names the file and the tensor.
void load_hf_weights(const std::filesystem::path& dir, const ops::model::LlamaConfig& config, std::span<float> params);

// A model to run: its shape and its parameters (the flat f32 buffer), and the step it was trained
// to (-1 for a Hugging Face directory).
struct LoadedModel {
  ops::model::LlamaConfig config;
  std::vector<float> params;
  std::int64_t step = -1;
};
// A Hugging Face directory (config.json and its safetensors, as load_hf_weights reads them), or a
// checkpoint root (its newest valid checkpoint) or one step-<N> directory (restored whole,
// checksums verified). InvalidArgument naming the path otherwise.
LoadedModel load_model(const std::filesystem::path& path);

struct ExportOptions {
  std::filesystem::path checkpoint;  // a checkpoint root (its newest valid checkpoint) or one step-<N> directory
  std::filesystem::path out;         // created if missing; must hold no model files yet
  checkpoint::TensorDtype dtype = checkpoint::TensorDtype::kF32;
  std::int64_t max_shard_bytes = std::int64_t{5} << 30;  // above this, shards and an index
};

struct ExportResult {
  std::int64_t step = 0;
  std::vector<std::filesystem::path> files;  // config.json, the weights, the index
  std::int64_t tensor_bytes = 0;
};

// Restores the checkpoint's parameters whole (checksums verified) and writes config.json and
// model.safetensors, or model-0000i-of-0000n.safetensors and model.safetensors.index.json when
// the tensors exceed max_shard_bytes (a tensor larger than it gets a shard of its own).
ExportResult export_checkpoint(const ExportOptions& options);

}  // namespace hdp::trainer
