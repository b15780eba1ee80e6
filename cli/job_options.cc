#include "cli/job_options.h"

#include <cstdlib>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/membership.h"
#include "elastic/prefix_store.h"

namespace hdp::cli {

void JobOptions::add_to(CLI::App& command) {
  redis.add_to(command);
  command.add_option("--job", job, "Job id (default: $SLURM_JOB_ID under Slurm)")->envname("HDP_JOB_ID");
}

std::string JobOptions::job_id() const {
  std::string id = job;
  if (id.empty()) {
    if (const char* slurm = std::getenv("SLURM_JOB_ID"); slurm && *slurm) id = slurm;
  }
  if (id.empty()) throw InvalidArgument("no job id: pass --job or set HDP_JOB_ID");
  elastic::validate_job_id(id);
  return id;
}

std::shared_ptr<elastic::Store> JobOptions::connect_job(const elastic::RedisStoreOptions& options) const {
  const std::string id = job_id();
  return std::make_shared<elastic::PrefixStore>(redis.connect(options), elastic::keys::job_namespace(id));
}

}  // namespace hdp::cli
