// A generation record by difference (elastic/membership.h, elastic/generation_records.h): the
// leader's delta over the previous record, applied by an agent that holds it, gives the record
// byte for byte (same encoding, same digest) for every kind of change a generation makes — a node
// lost, joined, restarted with other slots or a new incarnation, members reordered, the status
// changed — and stays small for a single change; a delta over another base, garbage, or a wrong
// digest is refused and leaves the record held as it was (the agent then reads gen:<g>).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "elastic/generation_records.h"
#include "elastic/membership.h"

namespace hdp::elastic {
namespace {

Member member(int i, std::vector<int> slots = {0, 1, 2, 3, 4, 5, 6, 7}, std::string incarnation = "a") {
  return Member{"node-" + std::to_string(i), incarnation, "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250),
                std::move(slots), 0};
}

Generation generation(std::int64_t number, std::vector<Member> members) {
  Generation g;
  g.number = number;
  g.members = std::move(members);
  g.assign_ranks();
  g.joins_seen = number * 3;
  g.created_ms = 1'700'000'000'000 + number;
  return g;
}

Generation base_of(int nodes) {
  std::vector<Member> members;
  for (int i = 0; i < nodes; ++i) members.push_back(member(i));
  return generation(7, members);
}

void expect_round_trip(const Generation& base, const Generation& next, std::size_t max_delta) {
  const auto delta = encode_delta(base, next, 1 << 20);
  ASSERT_TRUE(delta);
  EXPECT_LE(delta->size(), max_delta) << *delta;
  const Generation applied = apply_delta(base, next.number, *delta, "generations");
  EXPECT_EQ(encode(applied), encode(next));
  EXPECT_EQ(record_digest(encode(applied)), record_digest(encode(next)));
}

TEST(GenerationDelta, EveryKindOfChangeRoundTripsAndOneChangeIsSmall) {
  const Generation base = base_of(500);
  auto changed = [&](auto edit) {
    std::vector<Member> members = base.members;
    edit(members);
    return generation(8, members);
  };
  // One node lost from the middle: two runs.
  expect_round_trip(base, changed([](auto& m) { m.erase(m.begin() + 250); }), 200);
  // Two nodes joined at the end: one run and two entries.
  expect_round_trip(base, changed([](auto& m) { m.push_back(member(900)); m.push_back(member(901)); }), 400);
  // A node back with fewer healthy slots, another with a new incarnation.
  expect_round_trip(base, changed([](auto& m) { m[10].slots = {0, 1, 2}; m[20] = member(20, m[20].slots, "b"); }), 500);
  // Members reordered, the first one lost, the last one moved to the front.
  expect_round_trip(base, changed([](auto& m) { m.erase(m.begin()); std::rotate(m.rbegin(), m.rbegin() + 1, m.rend()); }), 200);
  // The status changes with no member change; every member new; no member at all.
  Generation waiting = changed([](auto&) {});
  waiting.status = GenerationStatus::kWaiting;
  expect_round_trip(base, waiting, 200);
  std::vector<Member> fresh;
  for (int i = 1000; i < 1010; ++i) fresh.push_back(member(i));
  expect_round_trip(base, generation(9, fresh), 2000);
  expect_round_trip(base, generation(9, {}), 200);
}

TEST(GenerationDelta, TooLargeOrWithoutABaseThereIsNone) {
  const Generation base = base_of(50);
  std::vector<Member> fresh;
  for (int i = 100; i < 150; ++i) fresh.push_back(member(i));
  EXPECT_FALSE(encode_delta(base, generation(8, fresh), 1024));  // 50 new members: ~4 KB
  EXPECT_TRUE(encode_delta(base, generation(8, fresh), 64 * 1024));
  EXPECT_FALSE(encode_delta(Generation{}, base, 1 << 20));  // no record before the first
}

TEST(GenerationDelta, ADeltaOverAnotherBaseOrGarbageIsRefused) {
  const Generation base = base_of(20);
  std::vector<Member> members = base.members;
  members.pop_back();
  const std::string delta = *encode_delta(base, generation(8, members), 1 << 20);
  Generation other = base;
  other.number = 6;
  EXPECT_THROW(apply_delta(other, 8, delta, "generations"), InvalidArgument);  // over 7, not 6
  EXPECT_THROW(apply_delta(base, 7, delta, "generations"), InvalidArgument);   // not above its base
  const std::string fields = R"("status":"running","joins_seen":1,"created_ms":1)";
  for (const std::string& bad :
       {std::string("not json"), std::string("[]"), R"({"base":7,"members":[[0,21]],)" + fields + "}",
        R"({"base":7,"members":[[-1,2]],)" + fields + "}", R"({"base":7,"members":[[0]],)" + fields + "}",
        R"({"base":7,"members":[[3,0]],)" + fields + "}", R"({"base":7,"members":[7],)" + fields + "}",
        R"({"base":7,"members":[{"node":"x"}],)" + fields + "}", R"({"base":7,"members":{},)" + fields + "}",
        std::string(R"({"base":7,"members":[],"status":"sleeping","joins_seen":1,"created_ms":1})")}) {
    EXPECT_THROW(apply_delta(base, 8, bad, "generations"), InvalidArgument) << bad;
  }
}

TEST(GenerationRecords, HoldsWhatTheDigestConfirmsAndNothingElse) {
  GenerationRecords records;
  const Generation base = base_of(30);
  std::vector<Member> members = base.members;
  members.erase(members.begin() + 3);
  const Generation next = generation(8, members);
  const std::string delta = *encode_delta(base, next, 1 << 20), digest = record_digest(encode(next));

  EXPECT_FALSE(records.apply(8, delta, digest));  // no base held
  EXPECT_EQ(records.missed(), 1);
  records.put(base, encode(base));
  EXPECT_FALSE(records.apply(8, delta, record_digest("something else")));
  EXPECT_EQ(records.get(8), nullptr);
  EXPECT_NE(records.get(7), nullptr);  // the base stays held
  EXPECT_TRUE(records.apply(8, delta, digest));
  ASSERT_NE(records.get(8), nullptr);
  EXPECT_EQ(records.get(8)->encoded, encode(next));
  EXPECT_EQ(records.get(7), nullptr);
  EXPECT_EQ(records.applied(), 1);
  // A gap: generation 10's delta over 9, which was never seen.
  Generation nine = next;
  nine.number = 9;
  Generation ten = nine;
  ten.number = 10;
  ten.members.pop_back();
  ten.assign_ranks();
  EXPECT_FALSE(records.apply(10, *encode_delta(nine, ten, 1 << 20), record_digest(encode(ten))));
  EXPECT_EQ(records.get(8)->generation.number, 8);
  EXPECT_EQ(records.missed(), 3);
  // An older record put later does not replace the newer one.
  records.put(base, encode(base));
  EXPECT_NE(records.get(8), nullptr);
}

}  // namespace
}  // namespace hdp::elastic
