// `hdp tokenize ...` as seen by `hdp`: runs the helper binary `hdp-tokenize` from the same directory
// as this `hdp` with the same arguments (execv: its output and exit code are the command's). The
// helper parses them (cli/tokenize_command.cc); `hdp` itself cannot load SentencePiece (its bundled
// protobuf-lite and hdp's libprotobuf abort or crash in one process; cli/tokenize_command.cc).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/self_executable.h"
#include "common/error.h"
#include "common/text.h"

namespace hdp::cli {

void add_tokenize_forwarder(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "tokenize", "Tokenize text with a SentencePiece model into a Megatron indexed dataset (hdp tokenize --help)");
  command->prefix_command();  // every argument, --help included, goes to the helper
  command->set_help_flag();
  command->callback([command] {
    std::vector<std::string> args = {"hdp", "tokenize"};
    for (const std::string& arg : command->remaining()) args.push_back(arg);
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const std::filesystem::path helper = std::filesystem::path(self_executable()).parent_path() / "hdp-tokenize";
    std::cout.flush();
    std::cerr.flush();
    ::execv(helper.c_str(), argv.data());
    throw Error("hdp tokenize: cannot run its helper " + quote_value(helper.string()) + ": " + std::strerror(errno) +
                " (it is built and installed beside hdp: cmake --build BUILD --target hdp-tokenize)");
  });
}

}  // namespace hdp::cli
