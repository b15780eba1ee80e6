#include "trainer/data/synthetic.h"

#include <random>

#include "common/error.h"
#include "mesh/plan/length_distribution.h"
#include "trainer/data/mix.h"

namespace hdp::trainer::data {

SyntheticDocuments::SyntheticDocuments(const SyntheticOptions& options) : options_(options) {
  if (options.context < 1) {
    throw InvalidArgument("context length must be >= 1, got " + std::to_string(options.context));
  }
  if (options.documents < 1 || options.documents > kMaxSyntheticDocuments) {
    throw InvalidArgument("synthetic documents must be in [1, " + std::to_string(kMaxSyntheticDocuments) +
                          "], got " + std::to_string(options.documents));
  }
  if (options.vocab < 1) throw InvalidArgument("vocabulary size must be >= 1, got " + std::to_string(options.vocab));
  const mesh::LengthDistribution distribution = mesh::named_distribution(options.distribution);
  std::mt19937_64 rng(options.seed);
  lengths_.reserve(options.documents);
  for (std::uint64_t d = 0; d < options.documents; ++d) lengths_.push_back(distribution.sample(rng, options.context));
}

std::int32_t SyntheticDocuments::token(std::uint64_t seed, std::uint64_t document, std::uint64_t position,
                                       std::int32_t vocab) {
  // SplitMix64's stream from the document's own state: one mix per token.
  const std::uint64_t state = mix(seed, document);
  const std::uint64_t bits = splitmix64(state + position * 0x9e3779b97f4a7c15ULL);
  // The top 32 bits scaled onto [0, vocab): no division, bias below 2^-32 * vocab.
  return static_cast<std::int32_t>(((bits >> 32) * static_cast<std::uint64_t>(vocab)) >> 32);
}

bool SyntheticDocuments::read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
                              std::string& why) const {
  HDP_CHECK(length >= 1 && length <= piece_length(piece),
            "length " + std::to_string(length) + " of a piece of " + std::to_string(piece_length(piece)));
  tokens.resize(static_cast<std::size_t>(length));
  for (std::size_t j = 0; j < tokens.size(); ++j) tokens[j] = token(options_.seed, piece, j, options_.vocab);
  return true;
}

std::string SyntheticDocuments::fingerprint() const {
  return fingerprint_of("synthetic\n" + options_.distribution + "\n" + std::to_string(options_.seed) + " " +
                        std::to_string(options_.documents) + " " + std::to_string(options_.context) + " " +
                        std::to_string(options_.vocab));
}

}  // namespace hdp::trainer::data
