// Readable without hdp: a plain JSON parser and h5dump (hdf5-tools) reassemble a tensor that a
// shard boundary cut into two files, using only manifest.json, and get exactly the saved values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/posix_io.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint::test {
namespace {
namespace fs = std::filesystem;

// The values of one dataset as h5dump prints them: 9 significant digits round-trip every float.
std::vector<float> h5dump_values(const fs::path& file, const std::string& dataset, const fs::path& scratch) {
  const fs::path out = scratch / "values.txt";
  const auto result = hdp::test::run_command(
      {"h5dump", "-d", dataset, "-m", "%.9g", "-y", "-w", "0", "-o", out.string(), file.string()});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  std::string text = read_small_file(out);
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  std::vector<float> values;
  for (float v; in >> v;) values.push_back(v);
  return values;
}

TEST(CheckpointH5dump, ReassemblesACutTensorFromTheManifestAlone) {
  hdp::test::TempDir dir("hdp-h5dump");
  const FlatLayout layout = tiny_llama_layout();
  const FullState state = make_state(layout, 5);
  save_on(2, small_options(dir.path()), layout, state, 30);
  const fs::path ckpt = dir.path() / "step-00000030";
  const nlohmann::json manifest = nlohmann::json::parse(read_small_file(ckpt / "manifest.json"));

  int checked = 0;
  for (std::size_t t = 0; t < manifest["tensors"].size(); ++t) {
    const nlohmann::json& tensor = manifest["tensors"][t];
    const nlohmann::json& pieces = tensor["pieces"]["exp_avg_sq"];
    if (pieces.size() < 2) continue;  // the tensor the shard boundary cut
    std::int64_t numel = 1;
    for (std::int64_t dim : tensor["shape"]) numel *= dim;
    std::vector<float> full(static_cast<std::size_t>(numel), 0.0f);
    for (const nlohmann::json& piece : pieces) {
      const std::vector<float> values = h5dump_values(ckpt / piece["file"].get<std::string>(), piece["dataset"], dir.path());
      ASSERT_EQ(std::ssize(values), piece["length"].get<std::int64_t>()) << piece.dump();
      std::copy(values.begin(), values.end(), full.begin() + piece["offset"].get<std::int64_t>());
    }
    const float* saved = state.buffers[2].data() + layout.offset(t);
    EXPECT_EQ(0, std::memcmp(full.data(), saved, full.size() * sizeof(float))) << tensor["name"];
    ++checked;
  }
  EXPECT_EQ(checked, 1);  // two ranks: exactly one tensor straddles the boundary
}

}  // namespace
}  // namespace hdp::checkpoint::test
