// File: trainer/data/blend.h
//
// A weighted blend of datasets as one PieceSource: `--data "0.7 PATH_A 0.3 PATH_B"` (Megatron-LM's
// convention: weight, path, weight, path, ...). The blend presents K virtual pieces; virtual piece
// k is piece j(k) of member d(k). The batch source (batch_source.h) shuffles the K pieces per epoch
// as it shuffles any source's, so resize and resume stay exactly-once: the data position indexes
// the virtual pieces.
//
// Weights count pieces (training sequences), not tokens: members whose pieces differ in length
// contribute tokens in another ratio. With the weights w_d normalised to sum 1 and n_d the pieces
// of member d:
//   - K = max over d of ceil(n_d / w_d): the fewest virtual pieces that read every piece of every
//     member at least once an epoch. The member that sets K is read about once; the others are
//     upsampled, their pieces repeated (K is driven by the member that is large for its weight: to
//     make K smaller, raise that member's weight or blend a subset of it);
//   - member d gets c_d virtual pieces, w_d * K rounded by the largest remainder (ties to the lower
//     index), so |c_d - w_d * K| < 1 and the c_d sum to K exactly;
//   - the c_d slots of each member are spread through k: member d's m-th slot (m = 1..c_d) has the
//     ideal place (m - 1/2) / c_d in [0, 1), and k runs through every member's slots in the order
//     of those places (ties to the lower index; a merge of evenly spaced progressions, Sainte-Laguë's
//     order). So any window of k holds each member's share within about one piece, before any
//     shuffle, and exactly c_d slots in all;
//   - member d's i-th slot (i = 0..c_d-1) reads its piece i when the member is not upsampled
//     (c_d == n_d), else piece perm_d(i mod n_d), perm_d a KeyedPermutation of [0, n_d)
//     (permutation.h) keyed with mix(mix(seed, salt), d) (mix.h): every piece is used
//     floor(c_d/n_d) or ceil(c_d/n_d) times, the extra repeats a seeded random subset, each pass
//     over the member in another order than index order.
// All of it is a function of the members' piece counts, the weights and the seed: the contract of
// piece_source.h holds when the members keep it. The weights are compared and rounded in IEEE
// double arithmetic, which every x86-64 and ARM64 host evaluates alike.
//
// Memory: 1 byte a virtual piece (d(k)), a prefix count of every member each kBlendBlock virtual
// pieces (4 * members / 4096 bytes a virtual piece) from which the slot index i of k is found by
// counting d(k) in at most 4095 bytes; the upsampled members' permutations are computed, not
// stored. So about 1 byte a virtual piece, and none in the batch source, whose epoch order is
// computed too. Building it is O(K log members).
//
// Limits (InvalidArgument naming the member and its figures): K <= kMaxBlendPieces, at most
// kMaxBlendMembers members, every weight positive and finite, every member non-empty.
//
// Reads are const and forward to the members (whose reads are thread-safe), so read() may be
// called from several threads at once. A member's refusal is passed on with its `why` prefixed by
// the member's label (its --data path), so the log names the dataset.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainer/data/permutation.h"
#include "trainer/data/piece_source.h"

namespace hdp::trainer::data {

// K at most 2^30: the blend holds d(k) at 1 byte a virtual piece (1 GiB here) and its prefix
// counts as 32-bit integers.
inline constexpr std::uint64_t kMaxBlendPieces = std::uint64_t{1} << 30;
// d(k) is held in one byte.
inline constexpr std::size_t kMaxBlendMembers = 255;
// Virtual pieces between two stored prefix counts.
inline constexpr std::uint64_t kBlendBlock = 4096;

struct BlendMember {
  double weight = 0;                          // > 0, finite; normalised by the blend
  std::shared_ptr<const PieceSource> source;  // non-null, >= 1 piece
  std::string label;                          // what errors and refusals name (the --data path)
};

class BlendedPieces final : public PieceSource {
 public:
  // Throws InvalidArgument for no member, too many, a null or empty source, a weight that is not
  // positive and finite, or a K above kMaxBlendPieces.
  BlendedPieces(std::vector<BlendMember> members, std::uint64_t seed);

  std::size_t member_count() const { return members_.size(); }
  const BlendMember& member(std::size_t d) const { return members_.at(d); }
  // The normalised weight of member d (the weights as given, divided by their sum).
  double weight(std::size_t d) const { return weights_.at(d); }
  // c_d: the virtual pieces of member d an epoch (>= its piece count).
  std::uint64_t member_pieces(std::size_t d) const { return counts_.at(d); }
  // d(k): the member virtual piece k reads.
  std::size_t member_of(std::uint64_t piece) const { return ids_.at(piece); }
  // j(k): the piece of member_of(k) that virtual piece k is.
  std::uint64_t member_piece(std::uint64_t piece) const;

  std::uint64_t piece_count() const override { return ids_.size(); }
  std::int64_t piece_length(std::uint64_t piece) const override;
  // The member's read; a refusal's `why` is prefixed with "LABEL: ".
  bool read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
            std::string& why) const override;
  // Of kOrderScheme, the seed and, in order, each member's normalised weight (%.17g) and
  // fingerprint: sees what the members see, and any change of weight, order, seed or permutation.
  std::string fingerprint() const override { return fingerprint_; }

 private:
  std::vector<BlendMember> members_;
  std::vector<double> weights_;                      // normalised
  std::vector<std::uint64_t> counts_;                // c_d
  std::vector<std::uint8_t> ids_;                    // d(k), K of them
  std::vector<std::uint32_t> prefix_;                // [b * members + d]: slots of d before k = b * kBlendBlock
  std::vector<std::optional<KeyedPermutation>> order_;  // perm_d of the upsampled members; none for the others
  std::string fingerprint_;
};

// Whether a --data value is a blend: it holds whitespace and does not itself name an existing
// directory or indexed dataset (a single path with spaces keeps working).
bool is_blend_spec(std::string_view data);

// "W1 P1 W2 P2 ..." (split at whitespace) as its (weight, path) pairs, at least one. Throws
// InvalidArgument naming the bad token and its item number (1-based, counting weights and paths):
// a weight that is not a positive finite number, a weight with no path after it, an empty value.
// The paths are not checked here (open_data resolves them).
std::vector<std::pair<double, std::string>> parse_blend_spec(std::string_view spec);

}  // namespace hdp::trainer::data
