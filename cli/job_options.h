// File: cli/job_options.h
//
// What every job-level subcommand needs: the Redis flags and the job id
// (--job, env HDP_JOB_ID, else SLURM_JOB_ID), and the job's namespace in the store.
#pragma once

#include <memory>
#include <string>

#include "cli/redis_options.h"
#include "elastic/store.h"

namespace hdp::cli {

struct JobOptions {
  RedisOptions redis;
  std::string job;

  void add_to(CLI::App& command);
  // The job id after fallbacks, validated.
  std::string job_id() const;
  // The store scoped to hdp:<job>:.
  std::shared_ptr<elastic::Store> connect_job() const { return connect_job(redis.store_options()); }
  std::shared_ptr<elastic::Store> connect_job(const elastic::RedisStoreOptions& options) const;
};

}  // namespace hdp::cli
