// checkpoint/posix_io.h on real files: a small file written with or without fsync holds exactly
// what was written last (a shorter content truncates a longer one), and a path that cannot be
// created is named in the error.
#include <gtest/gtest.h>

#include "checkpoint/posix_io.h"
#include "common/error.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint {
namespace {

TEST(PosixIo, ASmallFileHoldsWhatWasWrittenLastWithOrWithoutFsync) {
  test::TempDir dir("hdp-posix-io");
  const auto path = dir.path() / "rank-00000.json";
  write_small_file(path, std::string(10000, 'x'));
  EXPECT_EQ(read_small_file(path), std::string(10000, 'x'));
  write_small_file(path, "{\"rank\": 0}");
  EXPECT_EQ(read_small_file(path), "{\"rank\": 0}");
  write_file_durably(path, "");
  EXPECT_EQ(read_small_file(path), "");
  write_file_durably(path, "manifest");
  EXPECT_EQ(read_small_file(path), "manifest");
}

TEST(PosixIo, APathThatCannotBeCreatedIsNamed) {
  test::TempDir dir("hdp-posix-io");
  const auto path = dir.path() / "missing" / "rank-00000.json";
  for (auto* write : {&write_small_file, &write_file_durably}) {
    try {
      write(path, "x");
      ADD_FAILURE() << "wrote under a missing directory";
    } catch (const FatalError& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hdp::checkpoint
