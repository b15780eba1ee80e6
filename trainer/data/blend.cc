#include "trainer/data/blend.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <queue>
#include <system_error>

#include "common/error.h"
#include "trainer/data/mix.h"

namespace hdp::trainer::data {
namespace {

namespace fs = std::filesystem;

// Mixed into the seed of the members' permutations, so that they are unrelated to the batch
// source's epoch orders (epoch_order(seed, e, n) is keyed with mix(seed, e)).
constexpr std::uint64_t kPermutationSalt = 0x626c656e64ULL;  // "blend"

std::string format_double(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}

std::string format_short(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}

// Whether K virtual pieces read every piece of every member: w_d * K >= n_d for all d, in the
// double arithmetic the counts are rounded in (monotone in K, as rounding is).
bool covers(const std::vector<double>& weights, const std::vector<std::uint64_t>& sizes, std::uint64_t k) {
  for (std::size_t d = 0; d < weights.size(); ++d) {
    if (weights[d] * static_cast<double>(k) < static_cast<double>(sizes[d])) return false;
  }
  return true;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Labels the members that have none; checks every member (a positive finite weight, a source
// with pieces); returns their piece counts n_d.
std::vector<std::uint64_t> check_members(std::vector<BlendMember>& members) {
  if (members.empty()) throw InvalidArgument("data blend: no dataset");
  if (members.size() > kMaxBlendMembers) {
    throw InvalidArgument("data blend: " + std::to_string(members.size()) + " datasets, at most " +
                          std::to_string(kMaxBlendMembers));
  }
  std::vector<std::uint64_t> sizes(members.size());
  for (std::size_t d = 0; d < members.size(); ++d) {
    BlendMember& m = members[d];
    if (m.label.empty()) m.label = "dataset " + std::to_string(d + 1);
    if (!(std::isfinite(m.weight) && m.weight > 0)) {
      throw InvalidArgument("data blend: '" + m.label + "' has weight " + format_short(m.weight) +
                            ", not a positive finite number");
    }
    if (!m.source) throw InvalidArgument("data blend: '" + m.label + "' has no piece source");
    sizes[d] = m.source->piece_count();
    if (sizes[d] == 0) throw InvalidArgument("data blend: '" + m.label + "' holds no piece");
  }
  return sizes;
}

// The weights divided by their sum.
std::vector<double> normalised_weights(const std::vector<BlendMember>& members) {
  double sum = 0;
  for (const BlendMember& m : members) sum += m.weight;
  if (!std::isfinite(sum)) throw InvalidArgument("data blend: the weights' sum is not finite");
  std::vector<double> weights(members.size());
  for (std::size_t d = 0; d < members.size(); ++d) weights[d] = members[d].weight / sum;
  return weights;
}

// K: the fewest virtual pieces that read each member's pieces once. Refused above the cap before
// anything of that size is allocated; the member that needs the most is the one to name.
std::uint64_t virtual_piece_count(const std::vector<BlendMember>& members, const std::vector<double>& weights,
                                  const std::vector<std::uint64_t>& sizes) {
  std::size_t widest = 0;
  double need = 0;
  for (std::size_t d = 0; d < members.size(); ++d) {
    const double k = std::ceil(static_cast<double>(sizes[d]) / weights[d]);
    if (k > need) {
      need = k;
      widest = d;
    }
  }
  const auto refuse = [&](double pieces) {
    const std::size_t d = widest;
    throw InvalidArgument(
        "data blend: '" + members[d].label + "' has " + std::to_string(sizes[d]) + " pieces at weight " +
        format_short(members[d].weight) + " (" + format_short(100 * weights[d]) +
        "%): reading each of them once an epoch takes " + format_short(pieces) +
        " virtual pieces, above the limit of " + std::to_string(kMaxBlendPieces) +
        " (the other datasets would be repeated to keep the weights); give '" + members[d].label +
        "' a larger weight, or blend a smaller part of it");
  };
  if (!(need <= static_cast<double>(kMaxBlendPieces))) refuse(need);
  std::uint64_t k_total = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(need));
  while (!covers(weights, sizes, k_total)) ++k_total;
  while (k_total > 1 && covers(weights, sizes, k_total - 1)) --k_total;
  if (k_total > kMaxBlendPieces) refuse(static_cast<double>(k_total));
  return k_total;
}

// c_d: w_d * K by the largest remainder (ties to the lower index). Each is at least
// floor(w_d * K) >= n_d, as K covers.
std::vector<std::uint64_t> member_counts(const std::vector<double>& weights, const std::vector<std::uint64_t>& sizes,
                                         std::uint64_t k_total) {
  const std::size_t n = weights.size();
  std::vector<std::uint64_t> counts(n);
  std::vector<double> remainder(n);
  std::uint64_t assigned = 0;
  for (std::size_t d = 0; d < n; ++d) {
    const double q = weights[d] * static_cast<double>(k_total);
    counts[d] = static_cast<std::uint64_t>(std::floor(q));
    remainder[d] = q - static_cast<double>(counts[d]);
    assigned += counts[d];
  }
  HDP_CHECK(assigned <= k_total && k_total - assigned <= n,
            "blend counts " + std::to_string(assigned) + " of " + std::to_string(k_total));
  std::vector<std::size_t> by_remainder(n);
  std::iota(by_remainder.begin(), by_remainder.end(), std::size_t{0});
  std::stable_sort(by_remainder.begin(), by_remainder.end(),
                   [&](std::size_t a, std::size_t b) { return remainder[a] > remainder[b]; });
  for (std::uint64_t i = 0; i < k_total - assigned; ++i) ++counts[by_remainder[i]];
  for (std::size_t d = 0; d < n; ++d) {
    HDP_CHECK(counts[d] >= sizes[d], "blend member " + std::to_string(d) + " gets " + std::to_string(counts[d]) +
                                         " slots for " + std::to_string(sizes[d]) + " pieces");
  }
  return counts;
}

// d(k) into `ids` and the prefix counts every kBlendBlock virtual pieces into `prefix`: every
// member's slots merged in the order of their ideal places (m - 1/2) / c_d, i.e. of
// (2 a_d + 1) / (2 c_d) with a_d the slots given so far, compared exactly in integers
// ((2 a + 1) * c < 2^31 * 2^30). The slots below place 1 are exactly the c_d of each member, so
// after K picks every member has its c_d.
void spread_slots(const std::vector<std::uint64_t>& counts, std::uint64_t k_total, std::vector<std::uint8_t>& ids,
                  std::vector<std::uint32_t>& prefix) {
  const std::size_t n = counts.size();
  const auto later = [&](std::size_t a, std::size_t b, const std::vector<std::uint64_t>& given) {
    const std::uint64_t ka = (2 * given[a] + 1) * counts[b], kb = (2 * given[b] + 1) * counts[a];
    return ka != kb ? ka > kb : a > b;
  };
  std::vector<std::uint64_t> given(n, 0);
  const auto cmp = [&](std::size_t a, std::size_t b) { return later(a, b, given); };
  std::priority_queue<std::size_t, std::vector<std::size_t>, decltype(cmp)> next(cmp);
  for (std::size_t d = 0; d < n; ++d) next.push(d);
  ids.resize(k_total);
  prefix.reserve((k_total / kBlendBlock + 1) * n);
  for (std::uint64_t k = 0; k < k_total; ++k) {
    if (k % kBlendBlock == 0) {
      for (std::size_t d = 0; d < n; ++d) prefix.push_back(static_cast<std::uint32_t>(given[d]));
    }
    const std::size_t d = next.top();
    next.pop();
    ids[k] = static_cast<std::uint8_t>(d);
    if (++given[d] < counts[d]) next.push(d);
  }
  HDP_CHECK(given == counts, "blend slots differ from the counts");
}

// perm_d of each upsampled member (none for the others).
std::vector<std::optional<KeyedPermutation>> upsampled_orders(const std::vector<std::uint64_t>& counts,
                                                              const std::vector<std::uint64_t>& sizes,
                                                              std::uint64_t seed) {
  std::vector<std::optional<KeyedPermutation>> orders(counts.size());
  for (std::size_t d = 0; d < counts.size(); ++d) {
    if (counts[d] != sizes[d]) orders[d].emplace(mix(mix(seed, kPermutationSalt), d), sizes[d]);
  }
  return orders;
}

}  // namespace

BlendedPieces::BlendedPieces(std::vector<BlendMember> members, std::uint64_t seed) : members_(std::move(members)) {
  const std::vector<std::uint64_t> sizes = check_members(members_);
  weights_ = normalised_weights(members_);
  const std::uint64_t k_total = virtual_piece_count(members_, weights_, sizes);
  counts_ = member_counts(weights_, sizes, k_total);
  spread_slots(counts_, k_total, ids_, prefix_);
  order_ = upsampled_orders(counts_, sizes, seed);

  std::string text = "blend " + std::string(kOrderScheme) + "\n" + std::to_string(seed) + "\n";
  for (std::size_t d = 0; d < members_.size(); ++d) {
    text += format_double(weights_[d]) + " " + members_[d].source->fingerprint() + "\n";
  }
  fingerprint_ = fingerprint_of(text);
}

std::uint64_t BlendedPieces::member_piece(std::uint64_t piece) const {
  const std::size_t d = member_of(piece);  // checks the bound
  const std::uint64_t block = piece / kBlendBlock;
  // The slots of d before the block, and those in it before k.
  const auto begin = ids_.begin() + static_cast<std::ptrdiff_t>(block * kBlendBlock);
  const auto end = ids_.begin() + static_cast<std::ptrdiff_t>(piece);
  const std::uint64_t slot = prefix_[block * members_.size() + d] +
                             static_cast<std::uint64_t>(std::count(begin, end, static_cast<std::uint8_t>(d)));
  const std::optional<KeyedPermutation>& order = order_[d];
  return order ? (*order)(slot % order->count()) : slot;
}

std::int64_t BlendedPieces::piece_length(std::uint64_t piece) const {
  return members_[member_of(piece)].source->piece_length(member_piece(piece));
}

bool BlendedPieces::read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
                         std::string& why) const {
  const BlendMember& m = members_[member_of(piece)];
  if (m.source->read(member_piece(piece), length, tokens, why)) return true;
  why = m.label + ": " + why;
  return false;
}

bool is_blend_spec(std::string_view data) {
  if (std::none_of(data.begin(), data.end(), is_space)) return false;
  if (data.starts_with("synthetic:")) return false;  // a blend starts with a weight
  // A single path that holds whitespace: no exception (a name too long for the system is no path).
  const std::string path(data);
  std::error_code ec;
  if (fs::is_directory(path, ec)) return false;
  return !(fs::is_regular_file(path + ".idx", ec) && fs::is_regular_file(path + ".bin", ec));
}

std::vector<std::pair<double, std::string>> parse_blend_spec(std::string_view spec) {
  std::vector<std::string_view> items;
  for (std::size_t at = 0; at < spec.size();) {
    if (is_space(spec[at])) {
      ++at;
      continue;
    }
    std::size_t end = at;
    while (end < spec.size() && !is_space(spec[end])) ++end;
    items.push_back(spec.substr(at, end - at));
    at = end;
  }
  if (items.empty()) throw InvalidArgument("--data is empty");
  std::vector<std::pair<double, std::string>> out;
  for (std::size_t i = 0; i < items.size(); i += 2) {
    const std::string_view token = items[i];
    std::string_view digits = token;
    if (digits.starts_with('+')) digits.remove_prefix(1);
    double weight = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), weight);
    if (ec != std::errc() || end != digits.data() + digits.size() || !std::isfinite(weight) || !(weight > 0)) {
      throw InvalidArgument("--data: weight '" + std::string(token) + "' (item " + std::to_string(i + 1) +
                            ") is not a positive number; a blend is 'WEIGHT PATH WEIGHT PATH ...'");
    }
    if (i + 1 == items.size()) {
      throw InvalidArgument("--data: weight '" + std::string(token) + "' (item " + std::to_string(i + 1) +
                            ") is given but no path follows it");
    }
    out.emplace_back(weight, std::string(items[i + 1]));
  }
  return out;
}

}  // namespace hdp::trainer::data
