// The manifest as pure data: assembling it from rank records, JSON round trips, structural
// checks, compatibility, checksums and directory names. No files.
#include <gtest/gtest.h>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/checksum.h"
#include "checkpoint/manifest.h"
#include "checkpoint/rank_record.h"
#include "common/error.h"

namespace hdp::checkpoint {
namespace {

FlatLayout layout() { return FlatLayout({{"model.norm.weight", {5}}, {"lm_head.weight", {3, 2}}}); }

// Records as two ranks owning [0, 4) and [4, 11) would write them, with 2-element checksum blocks.
std::vector<RankRecord> records() {
  const FlatLayout l = layout();
  std::vector<float> values(11);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  std::vector<RankRecord> out;
  const ShardRange shards[2] = {{0, 4}, {4, 11}};
  for (int r = 0; r < 2; ++r) {
    RankRecord record;
    record.file = {rank_file_name(r), r, 1000u + static_cast<unsigned>(r), shards[r], 3, 42};
    record.step = 7;
    record.data = {1, 2};
    for (std::size_t b = 0; b < kBufferCount; ++b) {
      for (const Slice& s : l.slices(shards[r])) {
        const auto data = std::span<const float>(values).subspan(static_cast<std::size_t>(s.flat_offset), static_cast<std::size_t>(s.length));
        record.pieces.push_back({s.tensor, b, {static_cast<std::size_t>(r), dataset_name(b, l.tensors()[s.tensor].name),
                                               s.tensor_offset, s.length, block_checksums(data, 2)}});
      }
    }
    out.push_back(record);
  }
  return out;
}

Manifest manifest() { return assemble_manifest(layout(), {{"hidden_size", 5}}, 8, records()); }

TEST(CheckpointManifest, AssemblesPiecesAcrossShardCuts) {
  Manifest m = manifest();
  EXPECT_EQ(m.step, 7);
  EXPECT_EQ(m.world_size, 2);
  EXPECT_EQ(m.total_bytes(), 2001u);
  ASSERT_EQ(m.tensors.size(), 2u);
  // model.norm.weight [0,5) is cut at 4: [0,4) in rank 0's file, [4,5) in rank 1's.
  const auto& norm = m.tensors[0].pieces[1];
  ASSERT_EQ(norm.size(), 2u);
  EXPECT_EQ(norm[0].file, 0u);
  EXPECT_EQ(norm[0].offset, 0);
  EXPECT_EQ(norm[0].length, 4);
  EXPECT_EQ(norm[0].xxh3.size(), 2u);
  EXPECT_EQ(norm[1].file, 1u);
  EXPECT_EQ(norm[1].offset, 4);
  EXPECT_EQ(norm[1].length, 1);
  EXPECT_EQ(norm[1].dataset, "/exp_avg/model.norm.weight");
  EXPECT_EQ(m.tensors[1].pieces[2].size(), 1u);
  EXPECT_TRUE(structural_faults(m).empty());
}

TEST(CheckpointManifest, JsonRoundTripIsExact) {
  const Manifest m = manifest();
  const nlohmann::json j = to_json(m);
  EXPECT_EQ(j["format"], "hdp-checkpoint");
  EXPECT_EQ(j["tensors"][0]["pieces"]["params"][1]["file"], "rank-00001.h5");
  EXPECT_EQ(j["tensors"][0]["pieces"]["params"][0]["xxh3"][0].get<std::string>().size(), 16u);
  EXPECT_EQ(manifest_from_json(nlohmann::json::parse(j.dump())), m);
  EXPECT_FALSE(j.contains("data_fingerprint")) << "none recorded: none written (the manifests before it read the same)";
  Manifest with = m;
  with.data_fingerprint = "0123456789abcdef";
  EXPECT_EQ(to_json(with)["data_fingerprint"], "0123456789abcdef");
  EXPECT_EQ(manifest_from_json(nlohmann::json::parse(to_json(with).dump())), with);
}

TEST(CheckpointManifest, RankRecordJsonRoundTrip) {
  const RankRecord r = records()[1];
  const RankRecord back = rank_record_from_json(nlohmann::json::parse(to_json(r).dump()));
  EXPECT_EQ(back.file, r.file);
  EXPECT_EQ(back.step, r.step);
  ASSERT_EQ(back.pieces.size(), r.pieces.size());
  EXPECT_EQ(back.pieces[3].piece, r.pieces[3].piece);
}

TEST(CheckpointManifest, StructuralFaultsFindGapsAndBadChecksumCounts) {
  Manifest gap = manifest();
  gap.tensors[1].pieces[0].pop_back();
  ASSERT_FALSE(structural_faults(gap).empty());
  EXPECT_NE(structural_faults(gap)[0].find("lm_head.weight"), std::string::npos);

  Manifest sums = manifest();
  sums.tensors[0].pieces[2][0].xxh3.pop_back();
  ASSERT_EQ(structural_faults(sums).size(), 1u);
  EXPECT_NE(structural_faults(sums)[0].find("checksums"), std::string::npos);

  Manifest shard = manifest();
  shard.files[1].shard.begin = 5;
  EXPECT_FALSE(structural_faults(shard).empty());

  Manifest world = manifest();
  world.world_size = 3;
  EXPECT_FALSE(structural_faults(world).empty());
}

TEST(CheckpointManifest, AssembleRefusesRanksThatDisagree) {
  std::vector<RankRecord> r = records();
  r[1].step = 8;
  EXPECT_THROW(assemble_manifest(layout(), {}, 8, r), InvalidArgument);
  r = records();
  r[1].data.sample = 99;
  EXPECT_THROW(assemble_manifest(layout(), {}, 8, r), InvalidArgument);
  r = records();
  r[1].pieces.pop_back();  // rank 1 lost a piece: the tensor is no longer tiled
  EXPECT_THROW(assemble_manifest(layout(), {}, 8, r), InvalidArgument);
}

TEST(CheckpointManifest, MalformedJsonNamesTheField) {
  nlohmann::json j = to_json(manifest());
  j.erase("step");
  try {
    manifest_from_json(j);
    FAIL() << "accepted a manifest without step";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("step"), std::string::npos) << e.what();
  }
  j = to_json(manifest());
  j["format_version"] = 2;
  EXPECT_THROW(manifest_from_json(j), InvalidArgument);
  j = to_json(manifest());
  j["tensors"][0]["pieces"]["params"][0]["xxh3"][0] = "xyz";
  EXPECT_THROW(manifest_from_json(j), InvalidArgument);
}

TEST(CheckpointManifest, CompatibilityNamesTheDifference) {
  const Manifest m = manifest();
  EXPECT_NO_THROW(check_compatible(m, layout(), {{"hidden_size", 5}}, "/ckpt/step-7"));
  try {
    check_compatible(m, layout(), {{"hidden_size", 6}}, "/ckpt/step-7");
    FAIL() << "accepted another model config";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model config"), std::string::npos) << e.what();
  }
  // max_position_embeddings records the context trained at: a job at another --context restores
  // the checkpoint (and one that did not record it), and the shape is still compared beside it.
  Manifest longer = m;
  longer.model_config["max_position_embeddings"] = 4096;
  EXPECT_NO_THROW(check_compatible(longer, layout(), {{"hidden_size", 5}, {"max_position_embeddings", 64}}, "/ckpt/step-7"));
  EXPECT_NO_THROW(check_compatible(m, layout(), {{"hidden_size", 5}, {"max_position_embeddings", 64}}, "/ckpt/step-7"));
  EXPECT_THROW(check_compatible(longer, layout(), {{"hidden_size", 6}, {"max_position_embeddings", 4096}}, "/ckpt/step-7"),
               InvalidArgument);
  FlatLayout other({{"model.norm.weight", {5}}, {"lm_head.weight", {2, 3}}});
  try {
    check_compatible(m, other, {{"hidden_size", 5}}, "/ckpt/step-7");
    FAIL() << "accepted another shape";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight"), std::string::npos) << e.what();
  }
}

TEST(CheckpointChecksum, BlocksAndHex) {
  std::vector<float> values{1, 2, 3, 4, 5};
  const auto sums = block_checksums(values, 2);
  ASSERT_EQ(sums.size(), 3u);
  EXPECT_EQ(sums[2], xxh3(std::span<const float>(values).subspan(4)));
  EXPECT_NE(sums[0], sums[1]);
  EXPECT_EQ(from_hex(to_hex(sums[1])), sums[1]);
  EXPECT_EQ(to_hex(255), "00000000000000ff");
  EXPECT_THROW(from_hex("FF"), InvalidArgument);
  EXPECT_TRUE(block_checksums({}, 4).empty());
}

TEST(CheckpointRoot, StepDirectoryNames) {
  EXPECT_EQ(step_dir_name(42), "step-00000042");
  EXPECT_EQ(step_dir_name(1234567890), "step-1234567890");
  EXPECT_EQ(parse_step_dir("step-00000042"), 42);
  EXPECT_EQ(parse_step_dir("step-1234567890"), 1234567890);
  EXPECT_FALSE(parse_step_dir("step-00000042.tmp"));
  EXPECT_FALSE(parse_step_dir("step-00000042.deleting"));
  EXPECT_FALSE(parse_step_dir("step-42"));
  EXPECT_FALSE(parse_step_dir("latest"));
  EXPECT_THROW(step_dir_name(-1), InvalidArgument);
}

}  // namespace
}  // namespace hdp::checkpoint
