// File: tests/trainer/data/data_tree.h
//
// Helpers of the data tests: write files into a temporary tree, and build a tree of text files
// with seeded sizes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hdp::test {

// Writes `bytes` to `path`, creating its parent directories.
inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// Printable text of `size` bytes, different for each `salt`.
inline std::string text_bytes(std::int64_t size, std::uint64_t salt) {
  std::string text(static_cast<std::size_t>(size), ' ');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('!' + (i * 7 + salt * 13) % 90);
  return text;
}

// `files` text files of 1..max_size bytes (a few of them longer, up to 10 * max_size) spread over
// nested directories, their sizes and names from `seed`. Returns the total bytes written.
inline std::int64_t make_text_tree(const std::filesystem::path& root, int files, std::int64_t max_size,
                                   std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::int64_t total = 0;
  for (int f = 0; f < files; ++f) {
    std::int64_t size = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_size));
    if (rng() % 8 == 0) size *= 1 + static_cast<std::int64_t>(rng() % 10);
    const std::string dir = "d" + std::to_string(rng() % 4) + (rng() % 2 ? "/sub" + std::to_string(rng() % 3) : "");
    write_file(root / dir / ("f" + std::to_string(f) + ".txt"), text_bytes(size, static_cast<std::uint64_t>(f)));
    total += size;
  }
  return total;
}

}  // namespace hdp::test
