// File: checkpoint/checksum.h
//
// xxh3-64 checksums over fixed-size blocks of a piece, so that a restore reading only part of a
// piece still verifies every byte it uses (it reads whole blocks at the ends of its range).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hdp::checkpoint {

std::uint64_t xxh3(std::span<const std::uint8_t> bytes);
std::uint64_t xxh3(std::span<const float> values);

// One checksum per `block_elems` elements, the last block possibly shorter; none for empty data.
std::vector<std::uint64_t> block_checksums(std::span<const float> values, std::int64_t block_elems);

// 16 lowercase hex digits; JSON numbers above 2^53 do not survive every reader.
std::string to_hex(std::uint64_t value);
// Throws InvalidArgument unless `text` is exactly 16 hex digits.
std::uint64_t from_hex(const std::string& text);

}  // namespace hdp::checkpoint
