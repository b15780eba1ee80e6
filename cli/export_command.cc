// `hdp export CHECKPOINT --out DIR [--dtype f32|bf16] [--max-shard-mb N]`: a checkpoint's parameters
// as a Hugging Face LLaMA directory (config.json + model.safetensors, or shards and their index),
// what transformers' LlamaForCausalLM.from_pretrained and `hdp train --init-from` read
// (trainer/hf_model.h).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "common/error.h"
#include "trainer/hf_model.h"

namespace hdp::cli {

void add_export_command(CLI::App& app) {
  struct Flags {
    std::string checkpoint, out, dtype = "f32";
    double max_shard_mb = 5000;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* command = app.add_subcommand("export", "Write a checkpoint as a Hugging Face LLaMA model (config.json + safetensors)");
  command->add_option("checkpoint", f->checkpoint, "A checkpoint root (its newest valid checkpoint) or one step-<N> directory")
      ->required();
  command->add_option("--out", f->out, "The directory to write (created; must hold no model yet)")->required();
  command->add_option("--dtype", f->dtype, "The weights' dtype in the files")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  command->add_option("--max-shard-mb", f->max_shard_mb, "Above this, the weights are split into shards with an index")
      ->check(CLI::Range(0.001, 1e9))
      ->capture_default_str();
  command->callback([f] {
    trainer::ExportOptions options;
    options.checkpoint = f->checkpoint;
    options.out = f->out;
    options.dtype = f->dtype == "bf16" ? checkpoint::TensorDtype::kBF16 : checkpoint::TensorDtype::kF32;
    options.max_shard_bytes = static_cast<std::int64_t>(f->max_shard_mb * (1 << 20));
    const trainer::ExportResult result = trainer::export_checkpoint(options);
    std::cout << "exported step " << result.step << " (" << result.tensor_bytes << " bytes of " << f->dtype
              << " tensors):\n";
    for (const auto& file : result.files) std::cout << "  " << file.string() << "\n";
  });
}

}  // namespace hdp::cli
