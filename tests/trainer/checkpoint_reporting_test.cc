// CheckpointReporter against a real redis-server and real saves: a commit is recorded fenced by
// generation and shown by `hdp status`; a stale generation's record is refused; a failed save and
// a restore fallback become one `error` event per fault; Redis killed (SIGKILL) or paused
// (SIGSTOP) in the middle of a save costs the record, never the checkpoint on disk.
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/async_saver.h"
#include "checkpoint/checkpoint_root.h"
#include "checkpoint/saver.h"
#include "checkpoint/verify.h"
#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/support/child_process.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"
#include "trainer/checkpoint_reporting.h"

namespace hdp::trainer {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace checkpoint;
using namespace checkpoint::test;
using Clock = std::chrono::steady_clock;

constexpr const char* kJob = "ckpt-report";

// Short timeouts so that an outage costs the hook about a second; the bound a test asserts on a
// hook that meets a dead or stopped server is derived from them.
elastic::RedisStoreOptions fast_options() {
  elastic::RedisStoreOptions options;
  options.connect_timeout = 200ms;
  options.command_timeout = 300ms;
  options.retry_timeout = 1000ms;
  options.backoff = {.initial = 10ms, .max = 100ms, .multiplier = 2.0, .jitter = 0.2};
  return options;
}
// Worst case: a command timing out, then reconnecting until the retry timeout; plus slack for a
// loaded 2-core machine.
constexpr auto kOutageBound = 300ms + 1000ms + 2000ms;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string field(const elastic::StreamEntry& entry, const std::string& name) {
  for (const auto& [key, value] : entry.fields) {
    if (key == name) return value;
  }
  return {};
}

hdp::test::CommandResult hdp(std::vector<std::string> args) {
  const char* dir = std::getenv("HDP_BIN_DIR");
  args.insert(args.begin(), std::string(dir ? dir : "build/bin") + "/hdp");
  return hdp::test::run_command(args, {}, 30s);
}

// While alive, files of this process cannot grow past `bytes`: writes fail with EFBIG, as on a
// full disk (works as root, unlike a read-only directory). SIGXFSZ is ignored meanwhile.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    saved_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, saved_handler_);
  }

 private:
  rlimit saved_{};
  void (*saved_handler_)(int) = nullptr;
};

class CheckpointReporting : public ::testing::Test {
 protected:
  void SetUp() override { publish_generation(1); }

  // What the leader does, reduced to the keys the reporter and `hdp status` read.
  void publish_generation(std::int64_t g) {
    elastic::Generation record;
    record.number = g;
    record.members = {{"n1", "inc-1", "127.0.0.1", {0, 1}, 0}};
    record.created_ms = elastic::now_ms();
    job_->set(elastic::keys::generation(g), elastic::encode(record));
    job_->set(elastic::keys::kGeneration, std::to_string(g));
  }

  std::map<std::string, std::string> state() { return job_->hash_get_all(elastic::keys::kState); }

  std::vector<elastic::StreamEntry> events(const std::string& type) {
    std::vector<elastic::StreamEntry> out;
    for (auto& entry : job_->stream_tail(elastic::keys::kEvents, elastic::kEventsKept)) {
      if (field(entry, "type") == type) out.push_back(std::move(entry));
    }
    return out;
  }

  CheckpointOptions options_for(CheckpointReporter& reporter) {
    CheckpointOptions options = small_options(dir_.path());
    options.hooks = reporter.hooks();
    return options;
  }

  ShardSnapshot whole(const FullState& state, std::int64_t step) { return snapshot_of(state, {0, layout_.total()}, 0, step); }
  fs::path step_dir(std::int64_t step) const { return dir_.path() / step_dir_name(step); }

  hdp::test::RedisServer server_;
  std::shared_ptr<elastic::Store> job_ = std::make_shared<elastic::PrefixStore>(
      std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(server_.url()), fast_options()),
      elastic::keys::job_namespace(kJob));
  hdp::test::TempDir dir_{"hdp-ckpt-report"};
  FlatLayout layout_ = tiny_llama_layout();
  FullState first_ = make_state(layout_, 1);
  FullState second_ = make_state(layout_, 2);
};

TEST_F(CheckpointReporting, CommitIsRecordedAndShownByStatus) {
  CheckpointReporter reporter(job_, 1, 0);
  save_on(2, options_for(reporter), layout_, first_, 10);
  const std::string path = step_dir(10).string();

  const auto hash = state();
  EXPECT_EQ(hash.at("last_ckpt_step"), "10");
  EXPECT_EQ(hash.at("last_ckpt_path"), path);
  EXPECT_TRUE(hash.count("updated_at_ms"));
  const auto commits = events("checkpoint");
  ASSERT_EQ(commits.size(), 1u);
  EXPECT_EQ(field(commits[0], "step"), "10");
  EXPECT_EQ(field(commits[0], "path"), path);
  EXPECT_EQ(field(commits[0], "bytes"), std::to_string(bytes_under(step_dir(10))));
  EXPECT_EQ(field(commits[0], "generation"), "1");
  EXPECT_EQ(reporter.counts().recorded, 1);
  EXPECT_EQ(reporter.counts().failed, 0);

  const auto json = hdp({"status", "--job", kJob, "--redis", server_.url(), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto facts = nlohmann::json::parse(json.out);
  EXPECT_EQ(facts["state"]["last_ckpt_step"], 10);  // a JSON number
  EXPECT_EQ(facts["state"]["last_ckpt_path"], path);
  EXPECT_EQ(facts["events"].back()["fields"]["type"], "checkpoint");
  const auto table = hdp({"status", "--job", kJob, "--redis", server_.url()});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("last checkpoint: step 10 at " + path), std::string::npos) << table.out;
}

TEST_F(CheckpointReporting, StaleGenerationIsRefused) {
  publish_generation(2);
  CheckpointReporter current(job_, 2, 0), stale(job_, 1, 0);
  save_on(2, options_for(current), layout_, first_, 10);
  // A worker still in generation 1 (partitioned while the job resized) commits a later step:
  // the checkpoint is on disk, but the job state keeps what generation 2 recorded.
  save_on(2, options_for(stale), layout_, second_, 20);
  EXPECT_EQ(committed_steps(dir_.path()), (std::vector<std::int64_t>{10, 20}));
  EXPECT_EQ(state().at("last_ckpt_step"), "10");
  EXPECT_EQ(state().at("last_ckpt_path"), step_dir(10).string());
  EXPECT_EQ(events("checkpoint").size(), 1u);
  EXPECT_EQ(stale.counts().stale, 1);
  EXPECT_EQ(stale.counts().recorded, 0);
  EXPECT_EQ(current.counts().recorded, 1);
}

TEST_F(CheckpointReporting, FailedSaveRecordsAnErrorPerFaultAndKeepsThePrevious) {
  CheckpointReporter reporter(job_, 1, 0);
  const CheckpointOptions options = options_for(reporter);
  save_on(2, options, layout_, first_, 10);
  {
    // Each rank's file (about 42 KB) outgrows the limit: both ranks fail, each on its own file.
    FileSizeLimit full_disk(4096);
    EXPECT_THROW(save_on(2, options, layout_, second_, 20), FatalError);
  }
  const auto errors = events("error");
  ASSERT_EQ(errors.size(), 2u);
  std::set<std::string> files;
  for (const auto& e : errors) {
    EXPECT_EQ(field(e, "source"), "checkpoint");
    EXPECT_EQ(field(e, "operation"), "save");
    EXPECT_EQ(field(e, "step"), "20");
    EXPECT_EQ(field(e, "path"), step_dir(20).string() + ".tmp");
    const std::string message = field(e, "message");
    files.insert(message.substr(message.find("rank-"), 13));
  }
  EXPECT_EQ(files, (std::set<std::string>{"rank-00000.h5", "rank-00001.h5"}));
  EXPECT_EQ(state().at("last_ckpt_step"), "10");
  EXPECT_EQ(committed_steps(dir_.path()), (std::vector<std::int64_t>{10}));
  EXPECT_EQ(read_latest(dir_.path()), "step-00000010");
  EXPECT_EQ(restore_on(2, small_options(dir_.path()), layout_).state, first_);
}

TEST_F(CheckpointReporting, RestoreFallbackRecordsOneErrorEvent) {
  CheckpointReporter reporter(job_, 1, 0);
  const CheckpointOptions options = options_for(reporter);
  save_on(2, options, layout_, first_, 10);
  save_on(2, options, layout_, second_, 20);
  const fs::path damaged = step_dir(20) / "rank-00001.h5";
  fs::resize_file(damaged, fs::file_size(damaged) / 2);

  const Restored restored = restore_on(3, options, layout_);
  EXPECT_EQ(restored.progress[0]->step, 10);
  EXPECT_EQ(restored.state, first_);
  // All three ranks skip step 20; the job state hears of it once, from rank 0.
  const auto errors = events("error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(field(errors[0], "operation"), "restore");
  EXPECT_EQ(field(errors[0], "step"), "20");
  EXPECT_NE(field(errors[0], "message").find(damaged.string() + ":"), std::string::npos) << field(errors[0], "message");
  EXPECT_NE(field(errors[0], "message").find("truncated"), std::string::npos) << field(errors[0], "message");
}

TEST_F(CheckpointReporting, RedisKilledDuringAnAsyncSaveLosesOnlyTheRecord) {
  CheckpointReporter reporter(job_, 1, 0);
  CheckpointOptions options = options_for(reporter);
  std::atomic<bool> kill_redis{true};
  options.fault_hook = [&](std::string_view point, int) {
    if (point == kPointShardWriting && kill_redis.exchange(false)) server_.kill();
  };
  SoloGroup group;
  AsyncSaver saver(options, layout_, group);
  const auto start = Clock::now();
  saver.save(whole(first_, 10));
  EXPECT_TRUE(saver.wait());  // the save itself succeeded
  EXPECT_LT(seconds_since(start), std::chrono::duration<double>(kOutageBound).count());
  EXPECT_EQ(reporter.counts().failed, 1);
  EXPECT_EQ(reporter.counts().recorded, 0);
  EXPECT_TRUE(verify_checkpoint(step_dir(10)).ok());
  EXPECT_EQ(read_latest(dir_.path()), "step-00000010");
  EXPECT_EQ(restore_on(2, small_options(dir_.path()), layout_).state, first_);

  // Redis comes back empty (no persistence) and the leader publishes again: the same reporter
  // records the next commit over a fresh connection.
  server_.start();
  publish_generation(1);
  saver.save(whole(second_, 20));
  EXPECT_TRUE(saver.wait());
  EXPECT_EQ(state().at("last_ckpt_step"), "20");
  EXPECT_EQ(reporter.counts().recorded, 1);
}

TEST_F(CheckpointReporting, RedisPausedDuringASaveDelaysOnlyTheRecord) {
  CheckpointReporter reporter(job_, 1, 0);
  CheckpointOptions options = options_for(reporter);
  std::atomic<bool> pause_redis{true};
  options.fault_hook = [&](std::string_view point, int) {
    if (point == kPointShardWriting && pause_redis.exchange(false)) server_.pause();
  };
  SoloGroup group;
  Saver saver(options, layout_, group);
  const auto start = Clock::now();
  EXPECT_NO_THROW(saver.save(whole(first_, 10)));
  EXPECT_LT(seconds_since(start), std::chrono::duration<double>(kOutageBound).count());
  EXPECT_EQ(reporter.counts().failed, 1);
  EXPECT_TRUE(verify_checkpoint(step_dir(10)).ok());

  server_.resume();
  // The record sent to the stopped server may still run when it resumes (it was in the socket);
  // either way the next commit is recorded and is what the state shows.
  saver.save(whole(second_, 20));
  EXPECT_EQ(state().at("last_ckpt_step"), "20");
  EXPECT_EQ(state().at("last_ckpt_path"), step_dir(20).string());
  EXPECT_EQ(reporter.counts().recorded, 1);
}

}  // namespace
}  // namespace hdp::trainer
