// `hdp sample MODEL --prompt TEXT [--tokenizer M] [--max-new-tokens N] [--temperature T] [--top-k K]
// [--seed S]`: text from a checkpoint (a root or one step-<N> directory) or a Hugging Face
// directory (`hdp export`'s), generated on the CPU with a KV cache (trainer/sample.h). Without
// --tokenizer the tokens are bytes (the model's vocabulary must hold 256). With it, the prompt is
// encoded and the drawn ids decoded by the helper hdp-tokenize (its encode and decode commands,
// cli/tokenize_command.cc), since SentencePiece cannot be loaded into this process; generation stops
// after the tokenizer's end-of-document id.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/self_executable.h"
#include "common/error.h"
#include "common/text.h"
#include "ops/model/llama_decoder.h"
#include "trainer/hf_model.h"
#include "trainer/sample.h"

namespace hdp::cli {
namespace {

namespace fs = std::filesystem;

// Runs hdp-tokenize (beside this hdp) with `args` and waits; its stderr is ours. Its exit code 2
// (bad input: a tokenizer that does not load) is passed on as InvalidArgument.
void run_codec(const std::vector<std::string>& args) {
  const fs::path helper = fs::path(self_executable()).parent_path() / "hdp-tokenize";
  std::vector<std::string> all = {"hdp"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("hdp sample: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::execv(helper.c_str(), argv.data());
    std::fprintf(stderr, "hdp: error: cannot run %s: %s\n", helper.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 2) throw InvalidArgument("hdp-tokenize " + args[0] + " refused its input (its message above)");
  throw Error("hdp-tokenize " + args[0] + " failed with exit code " + std::to_string(code));
}

// A private temporary directory, removed with this object.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "hdp-sample.XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw Error(std::string("hdp sample: mkdtemp: ") + std::strerror(errno));
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

void add_sample_command(CLI::App& app) {
  struct Flags {
    std::string model, prompt, tokenizer;
    trainer::SampleOptions options;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* command = app.add_subcommand("sample", "Generate text from a checkpoint or an exported model (CPU, KV cache)");
  command->add_option("model", f->model, "A checkpoint root, a step-<N> directory, or a Hugging Face directory")->required();
  command->add_option("--prompt", f->prompt, "The text to continue")->required();
  command->add_option("--tokenizer", f->tokenizer,
                      "The SentencePiece model the data was tokenized with (hdp tokenize); without it tokens are bytes");
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
    if (f->prompt.empty()) throw InvalidArgument("--prompt is empty");
    std::vector<std::int32_t> prompt;
    std::unique_ptr<TempDir> tmp;
    trainer::SampleOptions options = f->options;
    if (f->tokenizer.empty()) {
      if (loaded.config.vocab_size < 256) {
        throw InvalidArgument("'" + f->model + "' has a vocabulary of " + std::to_string(loaded.config.vocab_size) +
                              ": byte tokens need 256 (a tokenized model takes --tokenizer)");
      }
      for (unsigned char c : f->prompt) prompt.push_back(c);
    } else {
      tmp = std::make_unique<TempDir>();
      std::ofstream(tmp->path / "prompt.txt", std::ios::binary) << f->prompt;
      run_codec({"encode", "--tokenizer", f->tokenizer, "--in", (tmp->path / "prompt.txt").string(), "--out",
                 (tmp->path / "prompt.ids").string()});
      std::ifstream ids(tmp->path / "prompt.ids");
      ids >> options.stop_token;
      for (long long id; ids >> id;) {
        if (id >= loaded.config.vocab_size) {
          throw InvalidArgument("--tokenizer " + quote_value(f->tokenizer) + " gives id " + std::to_string(id) +
                                ", outside the model's vocabulary of " + std::to_string(loaded.config.vocab_size));
        }
        prompt.push_back(static_cast<std::int32_t>(id));
      }
      if (prompt.empty()) throw InvalidArgument("--prompt encodes to no token");
    }
    const std::int64_t window = loaded.config.sliding_window;
    if (window > 0 && static_cast<std::int64_t>(prompt.size()) + options.max_new_tokens > window) {
      throw InvalidArgument("field 'sliding_window' of '" + f->model + "' is " + std::to_string(window) + ", shorter than " +
                            std::to_string(prompt.size()) + " prompt tokens and --max-new-tokens " +
                            std::to_string(options.max_new_tokens) + ": hdp's attention has no sliding window");
    }
    const ops::Tensor params =
        ops::Tensor::from_vector(loaded.params, {static_cast<std::int64_t>(loaded.params.size())});
    ops::model::LlamaDecoder decoder(loaded.config, params,
                                     static_cast<std::int64_t>(prompt.size()) + options.max_new_tokens);
    if (!tmp) {
      std::cout << f->prompt << std::flush;
      trainer::generate(decoder, prompt, options, [](std::int32_t token) {
        if (token < 256) std::cout << static_cast<char>(token) << std::flush;
      });
      std::cout << std::endl;
      return;
    }
    std::vector<std::int32_t> drawn = trainer::generate(decoder, prompt, options);
    if (!drawn.empty() && drawn.back() == options.stop_token) drawn.pop_back();  // the end of the document
    std::vector<std::int32_t> all = prompt;
    all.insert(all.end(), drawn.begin(), drawn.end());
    {
      std::ofstream ids(tmp->path / "text.ids");
      for (std::int32_t id : all) ids << id << ' ';
    }
    run_codec({"decode", "--tokenizer", f->tokenizer, "--in", (tmp->path / "text.ids").string(), "--out",
               (tmp->path / "text.txt").string()});
    std::ifstream text(tmp->path / "text.txt", std::ios::binary);
    std::cout << text.rdbuf() << std::endl;
  });
}

}  // namespace hdp::cli
