// `hdp version [--json]`: the version and the features this build has.
#include <iostream>
#include <memory>

#include "cli/build_info.h"
#include "cli/commands.h"

namespace hdp::cli {

void add_version_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* command = app.add_subcommand("version", "Print the version and the built features (CUDA, NCCL, Gloo, HDF5)");
  command->add_flag("--json", *json, "Print the same facts as JSON");
  command->callback([json] {
    const nlohmann::json info = build_info();
    if (*json) {
      std::cout << info.dump(2) << "\n";
    } else {
      std::cout << format_build_info(info);
    }
  });
}

}  // namespace hdp::cli
