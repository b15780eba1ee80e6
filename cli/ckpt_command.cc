// `hdp ckpt list ROOT | verify PATH | inspect PATH`: the checkpoints of a job as files on disk
// (docs/checkpoint-format.md). verify exits 1 on any fault and names the file and tensor of each.
#include <iomanip>
#include <iostream>
#include <memory>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/manifest.h"
#include "checkpoint/verify.h"
#include "cli/commands.h"
#include "common/error.h"

namespace hdp::cli {
namespace {
namespace fs = std::filesystem;
using namespace hdp::checkpoint;

void require_directory(const fs::path& path, const char* what) {
  if (!fs::is_directory(path)) throw InvalidArgument(std::string(what) + " '" + path.string() + "' is not a directory");
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

void list(const fs::path& root, bool json) {
  require_directory(root, "checkpoint root");
  const std::optional<std::string> latest = read_latest(root);
  nlohmann::json rows = nlohmann::json::array();
  for (const CommittedCheckpoint& c : list_committed(root)) {
    nlohmann::json row{{"step", c.step}, {"path", c.path.string()}, {"latest", latest == c.path.filename().string()}};
    try {
      const Manifest m = read_manifest(c.path);
      row["world_size"] = m.world_size;
      row["bytes"] = m.total_bytes();
    } catch (const Error& e) {
      row["error"] = e.what();
    }
    rows.push_back(row);
  }
  nlohmann::json incomplete = nlohmann::json::array();
  for (const fs::path& dir : list_uncommitted(root)) incomplete.push_back(dir.string());
  if (json) {
    std::cout << nlohmann::json{{"checkpoints", rows}, {"incomplete", incomplete}}.dump(2) << "\n";
    return;
  }
  std::cout << std::left << std::setw(12) << "STEP" << std::setw(7) << "WORLD" << std::setw(14) << "BYTES" << "PATH\n";
  for (const nlohmann::json& row : rows) {
    std::cout << std::setw(12) << row["step"].get<std::int64_t>() << std::setw(7)
              << (row.contains("world_size") ? std::to_string(row["world_size"].get<int>()) : "?") << std::setw(14)
              << (row.contains("bytes") ? std::to_string(row["bytes"].get<std::uint64_t>()) : "?")
              << row["path"].get<std::string>() << (row["latest"].get<bool>() ? "  (latest)" : "")
              << (row.contains("error") ? "  unreadable: " + row["error"].get<std::string>() : "") << "\n";
  }
  for (const nlohmann::json& dir : incomplete) std::cout << "incomplete (never restored): " << dir.get<std::string>() << "\n";
}

void verify(const fs::path& path) {
  require_directory(path, "checkpoint");
  const VerifyReport report = verify_checkpoint(path);
  for (const Fault& fault : report.faults) {
    std::cerr << "fault: " << (fault.file.empty() ? "-" : fault.file) << ": " << (fault.tensor.empty() ? "-" : fault.tensor)
              << ": " << fault.message << "\n";
  }
  if (!report.ok()) {
    throw FatalError("checkpoint " + path.string() + " has " + std::to_string(report.faults.size()) + " fault(s)");
  }
  std::cout << "ok: " << path.string() << ": step " << report.manifest->step << ", " << report.manifest->files.size()
            << " files, " << report.bytes_checked << " bytes checked\n";
}

void inspect(const fs::path& path, bool json) {
  require_directory(path, "checkpoint");
  const Manifest m = read_manifest(path);
  if (json) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const TensorRecord& t : m.tensors) tensors.push_back({{"name", t.name}, {"shape", t.shape}});
    std::cout << nlohmann::json{{"path", path.string()},       {"step", m.step},
                                {"world_size", m.world_size},  {"format_version", m.format_version},
                                {"data_position", {{"epoch", m.data.epoch}, {"sample", m.data.sample}}},
                                {"model_config", m.model_config}, {"bytes", m.total_bytes()},
                                {"tensors", tensors}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << "path: " << path.string() << "\nstep: " << m.step << "\nworld_size: " << m.world_size
            << "\nformat_version: " << m.format_version << "\ndata_position: epoch " << m.data.epoch << ", sample "
            << m.data.sample << "\nmodel_config: " << m.model_config.dump() << "\nbytes: " << m.total_bytes()
            << "\nfiles:\n";
  for (const FileRecord& f : m.files) {
    std::cout << "  " << f.name << "  shard [" << f.shard.begin << ", " << f.shard.end << ")  " << f.bytes << " bytes\n";
  }
  std::cout << "tensors (" << m.tensors.size() << "):\n";
  for (const TensorRecord& t : m.tensors) {
    std::cout << "  " << t.name << "  " << shape_text(t.shape) << "  " << t.pieces[0].size() << " piece(s)\n";
  }
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("ckpt", "List, verify and inspect checkpoints");
  command->require_subcommand(1);
  auto root = std::make_shared<std::string>();
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);

  CLI::App* list_command = command->add_subcommand("list", "List the committed checkpoints under ROOT, newest last");
  list_command->add_option("root", *root, "The checkpoint root directory")->required();
  list_command->add_flag("--json", *json, "Print JSON");
  list_command->callback([root, json] { list(*root, *json); });

  CLI::App* verify_command =
      command->add_subcommand("verify", "Check completeness and every checksum of one checkpoint; exit 1 on any fault");
  verify_command->add_option("path", *path, "A checkpoint directory (ROOT/step-NNNNNNNN)")->required();
  verify_command->callback([path] { verify(*path); });

  CLI::App* inspect_command = command->add_subcommand("inspect", "Print step, world size and tensors of one checkpoint");
  inspect_command->add_option("path", *path, "A checkpoint directory (ROOT/step-NNNNNNNN)")->required();
  inspect_command->add_flag("--json", *json, "Print JSON");
  inspect_command->callback([path, json] { inspect(*path, *json); });
}

}  // namespace hdp::cli
