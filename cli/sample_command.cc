// `hdp sample MODEL --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]`:
// text from a checkpoint (a root or one step-<N> directory) or a Hugging Face directory
// (`hdp export`'s), generated on the CPU with a KV cache (trainer/sample.h). Tokens are bytes (the
// model's vocabulary must hold 256); a SentencePiece model's text goes through `--tokenizer`,
// which `hdp sample` hands to hdp-tokenize (cli/tokenize_forward.cc) since SentencePiece cannot
// live in this process.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "common/error.h"
#include "ops/model/llama_decoder.h"
#include "trainer/hf_model.h"
#include "trainer/sample.h"

namespace hdp::cli {

void add_sample_command(CLI::App& app) {
  struct Flags {
    std::string model, prompt;
    trainer::SampleOptions options;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* command = app.add_subcommand("sample", "Generate text from a checkpoint or an exported model (CPU, KV cache)");
  command->add_option("model", f->model, "A checkpoint root, a step-<N> directory, or a Hugging Face directory")->required();
  command->add_option("--prompt", f->prompt, "The text to continue (bytes are the tokens)")->required();
  command->add_option("--max-new-tokens", f->options.max_new_tokens, "Tokens to generate at most")
      ->check(CLI::Range(0L, 1L << 20))
      ->capture_default_str();
  command->add_option("--temperature", f->options.temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  command->add_option("--top-k", f->options.top_k, "Draw among the k likeliest tokens (0: all)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  command->add_option("--seed", f->options.seed, "Seed of the draws")->capture_default_str();
  command->callback([f] {
    const trainer::LoadedModel loaded = trainer::load_model(f->model);
    if (loaded.config.vocab_size < 256) {
      throw InvalidArgument("'" + f->model + "' has a vocabulary of " + std::to_string(loaded.config.vocab_size) +
                            ": byte tokens need 256 (a tokenized model takes --tokenizer)");
    }
    if (f->prompt.empty()) throw InvalidArgument("--prompt is empty");
    std::vector<std::int32_t> prompt;
    for (unsigned char c : f->prompt) prompt.push_back(c);
    const ops::Tensor params =
        ops::Tensor::from_vector(loaded.params, {static_cast<std::int64_t>(loaded.params.size())});
    ops::model::LlamaDecoder decoder(loaded.config, params,
                                     static_cast<std::int64_t>(prompt.size()) + f->options.max_new_tokens);
    std::cout << f->prompt << std::flush;
    trainer::generate(decoder, prompt, f->options, [](std::int32_t token) {
      if (token < 256) std::cout << static_cast<char>(token) << std::flush;
    });
    std::cout << std::endl;
  });
}

}  // namespace hdp::cli
