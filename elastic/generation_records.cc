#include "elastic/generation_records.h"

#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"

namespace hdp::elastic {

std::shared_ptr<const HeldRecord> GenerationRecords::get(std::int64_t g) const {
  std::lock_guard lock(mutex_);
  return held_ && held_->generation.number == g ? held_ : nullptr;
}

std::int64_t GenerationRecords::held_generation() const {
  std::lock_guard lock(mutex_);
  return held_ ? held_->generation.number : 0;
}

std::shared_ptr<const HeldRecord> GenerationRecords::put(Generation generation, std::string encoded) {
  std::lock_guard lock(mutex_);
  if (!held_ || held_->generation.number < generation.number) {
    held_ = std::make_shared<const HeldRecord>(HeldRecord{std::move(generation), std::move(encoded)});
  }
  return held_;
}

bool GenerationRecords::apply(std::int64_t g, std::string_view delta, std::string_view digest) {
  std::shared_ptr<const HeldRecord> base;
  {
    std::lock_guard lock(mutex_);
    base = held_;
  }
  if (!base || base->generation.number >= g) {
    std::lock_guard lock(mutex_);
    if (!base) ++missed_;
    return false;
  }
  try {
    // Decoding, encoding and hashing 1.4 MB take milliseconds: outside the lock.
    Generation next = apply_delta(base->generation, g, delta, keys::kGenerationLog);
    std::string encoded = encode(next);
    if (record_digest(encoded) != digest) {
      std::lock_guard lock(mutex_);
      ++missed_;
      return false;
    }
    std::lock_guard lock(mutex_);
    if (!held_ || held_->generation.number < g) {
      held_ = std::make_shared<const HeldRecord>(HeldRecord{std::move(next), std::move(encoded)});
    }
    ++applied_;
    return true;
  } catch (const InvalidArgument& e) {
    // Over another base is no error (a gap: the entry for the generation between was missed).
    log()->debug("generation {}: its delta does not apply ({}); reading the record", g, e.what());
    std::lock_guard lock(mutex_);
    ++missed_;
    return false;
  }
}

std::int64_t GenerationRecords::applied() const {
  std::lock_guard lock(mutex_);
  return applied_;
}

std::int64_t GenerationRecords::missed() const {
  std::lock_guard lock(mutex_);
  return missed_;
}

}  // namespace hdp::elastic
