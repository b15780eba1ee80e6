// The batch builder (mesh/step/batch_builder.h) and the distributed step's plan checks: across all
// ranks of a plan every token runs exactly once with its position in its whole sequence, every
// target is the next token of the whole sequence (also across chunk boundaries, where it lives on
// another rank), every predicted token is counted exactly once; bad plans are InvalidArgument
// naming the value.
#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "mesh/step/batch_builder.h"
#include "mesh/plan/plan_summary.h"
#include "mesh/step/distributed_step.h"
#include "tests/mesh/plan_test_support.h"

namespace hdp::mesh {
namespace {

// Sequence s's token i is 1000·s + i: a row says which token it is.
std::vector<std::vector<std::int32_t>> labelled_batch(const std::vector<std::int64_t>& lengths) {
  std::vector<std::vector<std::int32_t>> batch;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    std::vector<std::int32_t> seq;
    for (std::int64_t i = 0; i < lengths[s]; ++i) seq.push_back(static_cast<std::int32_t>(1000 * s + i));
    batch.push_back(seq);
  }
  return batch;
}

void expect_message(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no InvalidArgument; expected one mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BatchBuilder, EveryTokenOnceWithItsPositionAndTheNextTokenOfItsWholeSequence) {
  const std::vector<std::int64_t> lengths{300, 140, 64, 40, 17, 9, 5, 3, 1, 2, 90, 33, 7};
  const auto batch = labelled_batch(lengths);
  for (std::size_t world : {1u, 2u, 3u, 4u, 5u}) {
    PlanRequest request = test::make_request(lengths, world, world == 1 ? 512 : 300 / std::int64_t(world) + 3);
    for (Strategy strategy : {Strategy::kStatic, Strategy::kNaive, Strategy::kBalanced}) {
      const Plan plan = make_plan(request, strategy);
      std::map<std::int32_t, int> seen;  // token label -> times run
      std::int64_t counted = 0;
      for (std::uint32_t r = 0; r < world; ++r) {
        for (std::uint32_t index : plan.rank_queues[r]) {
          const RankMicroBatch mb = build_rank_micro_batch(plan, index, r, batch);
          const auto tokens = mb.batch.tokens.to_vector<std::int32_t>();
          const auto targets = mb.batch.targets.to_vector<std::int32_t>();
          const auto positions = mb.batch.positions.to_vector<std::int64_t>();
          std::int64_t rows_with_target = 0;
          for (std::size_t i = 0; i < tokens.size(); ++i) {
            ++seen[tokens[i]];
            const std::int32_t s = tokens[i] / 1000, pos = tokens[i] % 1000;
            EXPECT_EQ(positions[i], pos);
            const bool last = pos + 1 == lengths[static_cast<std::size_t>(s)];
            EXPECT_EQ(targets[i], last ? -1 : tokens[i] + 1) << "sequence " << s << " position " << pos;
            rows_with_target += last ? 0 : 1;
          }
          EXPECT_EQ(mb.counted_targets, rows_with_target);
          counted += mb.counted_targets;
          if (mb.sharded()) {
            EXPECT_EQ(static_cast<std::int64_t>(tokens.size()),
                      mb.ring.shard_rows(mb.ring.position) + mb.local_cu.back());
            EXPECT_TRUE(mb.batch.cu_seqlens.empty());
          } else {
            EXPECT_EQ(mb.batch.cu_seqlens.back(), static_cast<std::int32_t>(tokens.size()));
          }
        }
      }
      std::size_t total = 0;
      for (std::int64_t len : lengths) total += static_cast<std::size_t>(len);
      EXPECT_EQ(seen.size(), total) << strategy_name(strategy) << " on " << world;
      for (const auto& [label, times] : seen) EXPECT_EQ(times, 1) << "token " << label;
      EXPECT_EQ(counted, global_targets(batch));
    }
  }
}

TEST(BatchBuilder, ARankOutsideTheMicroBatchIsRejected) {
  const auto batch = labelled_batch({10, 20});
  const Plan plan = make_plan(test::make_request({10, 20}, 2, 64), Strategy::kBalanced);
  const std::uint32_t other = plan.micro_batches[0].ranks[0] == 0 ? 1 : 0;
  expect_message([&] { build_rank_micro_batch(plan, 0, other, batch); }, "rank " + std::to_string(other));
  expect_message([&] { build_rank_micro_batch(plan, 99, 0, batch); }, "micro-batch 99");
}

TEST(StepPlanChecks, BadPlansAreInvalidArgumentsNamingTheValue) {
  const std::vector<std::int64_t> lengths{100, 30, 20};
  const auto batch = labelled_batch(lengths);
  const Plan plan = make_plan(test::make_request(lengths, 3, 40), Strategy::kBalanced);
  EXPECT_NO_THROW(validate_step_plan(plan, batch, 3));
  expect_message([&] { validate_step_plan(plan, batch, 4); }, "for 3 ranks, the communicator has 4");

  Plan twice = plan;
  for (MicroBatch& mb : twice.micro_batches) {
    if (mb.ranks.size() > 1) mb.ranks[1] = mb.ranks[0];
  }
  expect_message([&] { validate_step_plan(twice, batch, 3); }, "twice");

  Plan outside = plan;
  outside.micro_batches[0].ranks[0] = 7;
  expect_message([&] { validate_step_plan(outside, batch, 3); }, "rank 7");

  // A plan made for another batch: the sequences do not fit their micro-batches' capacity.
  const auto longer = labelled_batch({100, 30, 200});
  expect_message([&] { validate_step_plan(plan, longer, 3); }, "does not fit");
  // A sequence left out of the plan.
  const auto more = labelled_batch({100, 30, 20, 5});
  expect_message([&] { validate_step_plan(plan, more, 3); }, "sequence 3");
  expect_message([&] { validate_step_plan(plan, labelled_batch({0, 0, 0}), 3); }, "no tokens");
}

TEST(StepPlanChecks, APlannedStepRunsOnlyTheBatchAndWorldItWasPlannedFor) {
  const std::vector<std::int64_t> lengths{100, 30, 20};
  const auto batch = labelled_batch(lengths);
  const PlannedStep planned = plan_step(test::make_request(lengths, 3, 40), Strategy::kBalanced);
  EXPECT_EQ(planned.digest, plan_digest(planned.plan));
  EXPECT_EQ(planned.work_ms, rank_work_ms(planned.request, planned.plan));
  EXPECT_NO_THROW(check_planned_step(planned, batch, 3));
  expect_message([&] { check_planned_step(planned, batch, 4); }, "for 3 ranks, the communicator has 4");
  expect_message([&] { check_planned_step(planned, labelled_batch({100, 30}), 3); }, "batch of 3 sequences");
  expect_message([&] { check_planned_step(planned, labelled_batch({100, 31, 20}), 3); },
                 "sequence 1 has 31 tokens, the plan was made for 30");
}

}  // namespace
}  // namespace hdp::mesh
