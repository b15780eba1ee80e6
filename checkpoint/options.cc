#include "checkpoint/options.h"

#include "common/error.h"

namespace hdp::checkpoint {

void validate(const CheckpointOptions& options) {
  if (options.root.empty()) throw InvalidArgument("checkpoint root directory must not be empty");
  if (options.keep < 1) throw InvalidArgument("checkpoint keep " + std::to_string(options.keep) + " must be >= 1");
  if (options.checksum_block_bytes < 4 || options.checksum_block_bytes % 4 != 0) {
    throw InvalidArgument("checksum block of " + std::to_string(options.checksum_block_bytes) +
                          " bytes must be a positive multiple of 4");
  }
}

}  // namespace hdp::checkpoint
