#include "trainer/data/batch_source.h"

#include <algorithm>
#include <string>
#include <utility>

#include "checkpoint/checksum.h"
#include "common/error.h"
#include "common/log.h"
#include "trainer/data/mix.h"

namespace hdp::trainer::data {

std::string fingerprint_of(std::string_view bytes) {
  return checkpoint::to_hex(
      checkpoint::xxh3({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}));
}
namespace {

// Refusals logged one by one; after these, a count at every power of ten.
constexpr std::uint64_t kNamedRefusals = 5;

std::uint64_t checked_count(const PieceSource* pieces) {
  if (!pieces) throw InvalidArgument("batch source: no piece source");
  const std::uint64_t count = pieces->piece_count();
  if (count == 0) throw InvalidArgument("batch source: the piece source holds no piece");
  return count;
}

bool power_of_ten(std::uint64_t n) {
  while (n >= 10 && n % 10 == 0) n /= 10;
  return n == 1;
}

}  // namespace

KeyedPermutation epoch_order(std::uint64_t seed, std::uint64_t epoch, std::uint64_t count) {
  return KeyedPermutation(mix(seed, epoch), count);
}

std::string order_fingerprint(const PieceSource& pieces) {
  return fingerprint_of(std::string(kOrderScheme) + "\n" + pieces.fingerprint());
}

RecordedData compare_recorded(const std::string& recorded, const PieceSource& pieces) {
  if (recorded.empty()) return RecordedData::kNotRecorded;
  if (recorded == order_fingerprint(pieces)) return RecordedData::kSame;
  return recorded == pieces.fingerprint() ? RecordedData::kEarlierOrder : RecordedData::kOther;
}

std::vector<std::int64_t> GlobalBatch::lengths() const {
  std::vector<std::int64_t> out;
  out.reserve(sequences.size());
  for (const auto& s : sequences) out.push_back(static_cast<std::int64_t>(s.size()));
  return out;
}

BatchSource::BatchSource(std::shared_ptr<const PieceSource> pieces, std::uint64_t seed)
    : pieces_(std::move(pieces)),
      seed_(seed),
      count_(checked_count(pieces_.get())),
      order_(epoch_order(seed_, 0, count_)) {}

const KeyedPermutation& BatchSource::order(std::uint64_t epoch) {
  if (order_epoch_ != epoch) {
    order_ = epoch_order(seed_, epoch, count_);
    order_epoch_ = epoch;
  }
  return order_;
}

GlobalBatch BatchSource::next(checkpoint::DataPosition& position, std::int64_t token_budget) {
  if (token_budget < 1) throw InvalidArgument("token budget must be >= 1, got " + std::to_string(token_budget));
  if (position.sample > count_) {
    throw InvalidArgument("data position (epoch " + std::to_string(position.epoch) + ", sample " +
                          std::to_string(position.sample) + ") is past the end of an epoch of " +
                          std::to_string(count_) + " pieces: was it saved over another corpus?");
  }
  checkpoint::DataPosition at = position;
  GlobalBatch batch;
  std::vector<std::int32_t> tokens;
  std::string why;
  std::uint64_t refused_in_row = 0;
  while (batch.tokens < token_budget) {
    if (at.sample == count_) at = {at.epoch + 1, 0};
    const std::uint64_t piece = order(at.epoch)(at.sample);
    ++at.sample;
    const std::int64_t length = pieces_->piece_length(piece);
    const std::int64_t take = std::min(length, token_budget - batch.tokens);
    if (!pieces_->read(piece, take, tokens, why)) {
      ++batch.refused_pieces;
      ++refused_;
      if (!log_refusals_) {
        // Another process reports them (every process passes over the same pieces).
      } else if (refused_ <= kNamedRefusals) {
        log()->warn("data: passing over {}", why);
      } else if (power_of_ten(refused_)) {
        log()->warn("data: {} pieces passed over so far (binary, changed or unreadable documents)", refused_);
      }
      // 2 * count positions in a row hold a whole epoch: every piece has been refused.
      if (++refused_in_row >= 2 * count_) {
        throw InvalidArgument("no usable piece: all " + std::to_string(count_) + " pieces were refused; the last: " +
                              why);
      }
      continue;
    }
    refused_in_row = 0;
    HDP_CHECK(static_cast<std::int64_t>(tokens.size()) == take,
              "piece " + std::to_string(piece) + " read " + std::to_string(tokens.size()) + " tokens, asked " +
                  std::to_string(take));
    batch.sequences.push_back(std::move(tokens));
    tokens = {};
    batch.pieces.push_back(piece);
    batch.tokens += take;
    batch.dropped_tokens = length - take;  // only the step's last piece can be cut
  }
  if (at.sample == count_) at = {at.epoch + 1, 0};
  position = at;
  return batch;
}

}  // namespace hdp::trainer::data
