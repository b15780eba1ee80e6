#include "checkpoint/rank_record.h"

#include <cstdio>

#include "checkpoint/checksum.h"
#include "common/error.h"

namespace hdp::checkpoint {
namespace {

using nlohmann::json;

std::string padded(int rank) {
  char text[16];
  std::snprintf(text, sizeof text, "%05d", rank);
  return text;
}

}  // namespace

std::string rank_file_name(int rank) { return "rank-" + padded(rank) + ".h5"; }
std::string rank_record_name(int rank) { return "rank-" + padded(rank) + ".json"; }

json to_json(const RankRecord& r) {
  json pieces = json::array();
  for (const RankRecord::Piece& p : r.pieces) {
    json sums = json::array();
    for (std::uint64_t sum : p.piece.xxh3) sums.push_back(to_hex(sum));
    pieces.push_back({{"tensor", p.tensor}, {"buffer", p.buffer}, {"dataset", p.piece.dataset},
                      {"offset", p.piece.offset}, {"length", p.piece.length}, {"xxh3", sums}});
  }
  return {{"name", r.file.name},
          {"rank", r.file.rank},
          {"bytes", r.file.bytes},
          {"shard", {r.file.shard.begin, r.file.shard.end}},
          {"rng_bytes", r.file.rng_bytes},
          {"rng_xxh3", to_hex(r.file.rng_xxh3)},
          {"step", r.step},
          {"data_position", {r.data.epoch, r.data.sample}},
          {"pieces", pieces}};
}

RankRecord rank_record_from_json(const json& j) {
  try {
    RankRecord r;
    r.file = {j.at("name").get<std::string>(), j.at("rank").get<int>(), j.at("bytes").get<std::uint64_t>(),
              {j.at("shard").at(0).get<std::int64_t>(), j.at("shard").at(1).get<std::int64_t>()},
              j.at("rng_bytes").get<std::int64_t>(), from_hex(j.at("rng_xxh3").get<std::string>())};
    r.step = j.at("step").get<std::int64_t>();
    r.data = {j.at("data_position").at(0).get<std::uint64_t>(), j.at("data_position").at(1).get<std::uint64_t>()};
    for (const json& p : j.at("pieces")) {
      PieceRecord piece{static_cast<std::size_t>(r.file.rank), p.at("dataset").get<std::string>(),
                        p.at("offset").get<std::int64_t>(), p.at("length").get<std::int64_t>(), {}};
      for (const json& sum : p.at("xxh3")) piece.xxh3.push_back(from_hex(sum.get<std::string>()));
      r.pieces.push_back({p.at("tensor").get<std::size_t>(), p.at("buffer").get<std::size_t>(), std::move(piece)});
    }
    return r;
  } catch (const json::exception& e) {
    throw InvalidArgument(std::string("rank record: ") + e.what());
  }
}

Manifest assemble_manifest(const FlatLayout& layout, const json& model_config, std::int64_t checksum_block_bytes,
                           const std::vector<RankRecord>& records) {
  if (records.empty()) throw InvalidArgument("assemble_manifest: no rank records");
  Manifest m;
  m.step = records[0].step;
  m.world_size = static_cast<int>(records.size());
  m.model_config = model_config;
  m.data = records[0].data;
  m.checksum_block_bytes = checksum_block_bytes;
  for (const TensorSpec& spec : layout.tensors()) m.tensors.push_back({spec.name, spec.shape, {}});
  for (std::size_t r = 0; r < records.size(); ++r) {
    const RankRecord& record = records[r];
    const std::string who = "rank " + std::to_string(r);
    if (record.file.rank != static_cast<int>(r)) throw InvalidArgument(who + ": its record says rank " + std::to_string(record.file.rank));
    if (record.step != m.step) {
      throw InvalidArgument(who + " saved step " + std::to_string(record.step) + ", rank 0 step " + std::to_string(m.step));
    }
    if (record.data != m.data) throw InvalidArgument(who + " reports a different data-loader position than rank 0");
    m.files.push_back(record.file);
    // Ranks are visited in order and shards tile the buffer in rank order, so appending keeps
    // each tensor's pieces in offset order.
    for (const RankRecord::Piece& p : record.pieces) {
      if (p.tensor >= m.tensors.size() || p.buffer >= kBufferCount) throw InvalidArgument(who + ": a piece names an unknown tensor or buffer");
      m.tensors[p.tensor].pieces[p.buffer].push_back(p.piece);
    }
  }
  const std::vector<std::string> faults = structural_faults(m);
  if (!faults.empty()) throw InvalidArgument("the ranks' shards do not form a checkpoint: " + faults.front());
  return m;
}

}  // namespace hdp::checkpoint
