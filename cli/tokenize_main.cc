// The helper binary `hdp-tokenize`: `hdp tokenize` (cli/tokenize_forward.cc) executes it with
// argv = {"hdp", "tokenize", ARGS...}, and `hdp sample --tokenizer` runs its encode and decode
// (cli/sample_command.cc). It holds only those commands (cli/tokenize_command.cc) and links
// SentencePiece without hdp's libprotobuf, which cannot share a process with it. Exit codes and
// messages as cli/main.cc: 0 done, 2 bad usage or bad input (one line "hdp: error: ..."), 1 failure.
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "common/error.h"

int main(int argc, char** argv) {
  using namespace hdp::cli;
  CLI::App app{"hdp tokenize: text to a Megatron indexed dataset with a SentencePiece model", "hdp"};
  app.require_subcommand(1, 1);
  add_tokenize_command(app);
  add_codec_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // interrupted by a signal: 128 + its number, the message printed
  } catch (const CLI::RequiredError& e) {
    if (app.get_subcommands().empty()) {
      std::cerr << "hdp: error: hdp-tokenize is run by `hdp tokenize` (see hdp tokenize --help)\n";
    } else {
      std::cerr << "hdp: error: " << e.what() << " (see hdp tokenize --help)\n";
    }
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    std::cerr << "hdp: error: " << e.what() << " (see hdp tokenize --help)\n";
    return kExitUsage;
  } catch (const hdp::Error& e) {
    return report_error(e);
  } catch (const std::exception& e) {
    std::cerr << "hdp: internal error: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}
