// File: checkpoint/posix_io.h
//
// The POSIX steps of the commit protocol: fsync a file or a directory, write a small file (with or
// without fsync), replace one atomically, read one. Failures throw hdp::FatalError naming the
// path. All may block on the disk.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace hdp::checkpoint {

// fsync of a file, or of a directory (which makes renames and unlinks inside it durable).
void fsync_path(const std::filesystem::path& path);

// Writes `content` to `path` and closes it, without fsync: for what is read back before a crash
// could matter (a rank record, whose content the fsynced manifest keeps).
void write_small_file(const std::filesystem::path& path, std::string_view content);

// Writes `content` to `path` and fsyncs it (the caller fsyncs the directory when it matters).
void write_file_durably(const std::filesystem::path& path, std::string_view content);

// Replaces `path` atomically: writes path + ".tmp", fsyncs it, renames it over `path`, fsyncs the directory.
void replace_file_atomically(const std::filesystem::path& path, std::string_view content);

std::string read_small_file(const std::filesystem::path& path);

}  // namespace hdp::checkpoint
