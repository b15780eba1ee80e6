#include "checkpoint/checkpoint_root.h"

#include <algorithm>
#include <cstdio>

#include "checkpoint/posix_io.h"
#include "common/error.h"

namespace hdp::checkpoint {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_leftover(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.rfind("step-", 0) == 0 && (ends_with(name, ".tmp") || ends_with(name, ".deleting"));
}

}  // namespace

std::string step_dir_name(std::int64_t step) {
  if (step < 0) throw InvalidArgument("step " + std::to_string(step) + " must be >= 0");
  char text[32];
  std::snprintf(text, sizeof text, "step-%08lld", static_cast<long long>(step));
  return text;
}

std::optional<std::int64_t> parse_step_dir(const std::string& name) {
  if (name.size() < 13 || name.size() > 24 || name.rfind("step-", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return std::stoll(digits);
}

std::vector<CommittedCheckpoint> list_committed(const fs::path& root) {
  std::vector<CommittedCheckpoint> out;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    const auto step = parse_step_dir(entry.path().filename().string());
    if (step && entry.is_directory()) out.push_back({*step, entry.path()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::vector<fs::path> list_uncommitted(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    if (entry.is_directory() && is_leftover(entry.path())) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void remove_uncommitted(const fs::path& root) {
  for (const fs::path& dir : list_uncommitted(root)) fs::remove_all(dir);
}

void write_latest(const fs::path& root, const fs::path& dir) {
  replace_file_atomically(root / kLatestFile, dir.filename().string() + "\n");
}

std::optional<std::string> read_latest(const fs::path& root) {
  if (!fs::exists(root / kLatestFile)) return std::nullopt;
  std::string name = read_small_file(root / kLatestFile);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  return name;
}

std::vector<fs::path> retain_newest(const fs::path& root, int keep) {
  if (keep < 1) throw InvalidArgument("keep " + std::to_string(keep) + " must be >= 1");
  std::vector<CommittedCheckpoint> committed = list_committed(root);
  std::vector<fs::path> deleted;
  if (std::ssize(committed) <= keep) return deleted;
  committed.resize(committed.size() - static_cast<std::size_t>(keep));
  for (const CommittedCheckpoint& old : committed) {
    fs::path doomed = old.path;
    doomed += ".deleting";
    fs::rename(old.path, doomed);
    deleted.push_back(old.path);
  }
  fsync_path(root);  // the renames are durable before any file disappears
  for (const fs::path& dir : deleted) {
    fs::path doomed = dir;
    doomed += ".deleting";
    fs::remove_all(doomed);
  }
  return deleted;
}

}  // namespace hdp::checkpoint
