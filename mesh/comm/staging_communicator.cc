#include "mesh/comm/staging_communicator.h"

#include <atomic>
#include <utility>
#include <vector>

#include "common/error.h"
#include "mesh/comm/checks.h"
#include "mesh/comm/staging_buffers.h"
#include "mesh/comm/staging_memory.h"

namespace hdp::mesh {

struct StagingCommunicator::Counters {
  std::atomic<std::int64_t> staged_bytes{0};
};

namespace {

using staging::HostBuffers;
using Lease = HostBuffers::Lease;

// A host buffer's contents to go back into the caller's tensor once the inner operation is done.
struct CopyBack {
  ops::Tensor dst;
  ops::Tensor host;
};

// The inner operation's Work, the host buffers it uses, and the copies back to do after it.
class StagedWork final : public Work {
 public:
  StagedWork(std::unique_ptr<Work> inner, std::vector<Lease> leases, std::vector<CopyBack> back, Stream stream,
             std::shared_ptr<StagingCommunicator::Counters> counters)
      : inner_(std::move(inner)),
        leases_(std::move(leases)),
        back_(std::move(back)),
        stream_(stream),
        counters_(std::move(counters)) {}

  ~StagedWork() override {
    // Dropped unwaited: the inner operation may still read or write the buffers.
    if (!finished_) {
      for (auto& lease : leases_) lease.abandon();
    }
  }

  void wait(std::chrono::milliseconds timeout) override {
    if (finished_) {
      inner_->wait(timeout);  // a no-op when it returned before; rethrows the inner's failure otherwise
      return;
    }
    // Once the inner wait returned or threw, the inner communicator touches the buffers no more:
    // they go back to the pool however this ends.
    finished_ = true;
    const std::vector<Lease> leases = std::move(leases_);
    const std::vector<CopyBack> back = std::move(back_);
    inner_->wait(timeout);
    for (const CopyBack& c : back) {
      staging::from_host(c.dst, c.host, stream_);
      counters_->staged_bytes += static_cast<std::int64_t>(c.host.bytes());
    }
  }

 private:
  std::unique_ptr<Work> inner_;
  std::vector<Lease> leases_;
  std::vector<CopyBack> back_;
  Stream stream_;
  std::shared_ptr<StagingCommunicator::Counters> counters_;
  bool finished_ = false;
};

std::string p2p_name(const char* kind, int peer, Tag tag) {
  return std::string(kind) + (kind[0] == 's' ? " to rank " : " from rank ") + std::to_string(peer) + " tag " +
         std::to_string(tag);
}

}  // namespace

StagingCommunicator::StagingCommunicator(std::unique_ptr<Communicator> inner, StagingOptions options)
    : options_(options),
      counters_(std::make_shared<Counters>()),
      buffers_(std::make_shared<staging::HostBuffers>(options.device == ops::Device::kCuda)),
      inner_(std::move(inner)) {
  check_given(inner_ != nullptr, "staging communicator", "inner communicator");
}

StagingCommunicator::~StagingCommunicator() = default;

int StagingCommunicator::rank() const { return inner_->rank(); }
int StagingCommunicator::size() const { return inner_->size(); }
Communicator::Duration StagingCommunicator::timeout() const { return inner_->timeout(); }
void StagingCommunicator::abort(const std::string& reason) { inner_->abort(reason); }
bool StagingCommunicator::dead() const { return inner_->dead(); }
std::string StagingCommunicator::peer_lost() const { return inner_->peer_lost(); }
std::int64_t StagingCommunicator::staged_bytes() const { return counters_->staged_bytes; }
std::int64_t StagingCommunicator::buffers_allocated() const { return buffers_->allocated(); }
std::int64_t StagingCommunicator::buffers_pinned() const { return buffers_->pinned(); }

bool StagingCommunicator::staged(const ops::Tensor& t) const {
  return options_.stage_all || t.device() != ops::Device::kCpu;
}

namespace {

// A host buffer shaped like `t`, holding t's elements when `copy_in` (after `stream`'s work).
Lease stage_in(HostBuffers& buffers, StagingCommunicator::Counters& counters, const ops::Tensor& t, bool copy_in,
               Stream stream) {
  Lease lease = buffers.take(t.dtype(), t.shape());
  if (copy_in) {
    staging::to_host(lease.tensor(), t, stream);
    counters.staged_bytes += static_cast<std::int64_t>(t.bytes());
  }
  return lease;
}

// The StagedWork of an inner operation started on `leases`' host tensors.
std::unique_ptr<Work> staged_work(std::unique_ptr<Work> inner, std::vector<Lease> leases, std::vector<CopyBack> back,
                                  Stream stream, const std::shared_ptr<StagingCommunicator::Counters>& counters) {
  return std::make_unique<StagedWork>(std::move(inner), std::move(leases), std::move(back), stream, counters);
}

}  // namespace

std::unique_ptr<Work> StagingCommunicator::isend(const ops::Tensor& buffer, int dst, Tag tag, Stream stream) {
  check_p2p(p2p_name("send", dst, tag), buffer, dst, tag, size(), buffer.device());
  if (!staged(buffer)) return inner_->isend(buffer, dst, tag, stream);
  Lease host = stage_in(*buffers_, *counters_, buffer, true, stream);
  auto inner = inner_->isend(host.tensor(), dst, tag, stream);
  std::vector<Lease> leases;
  leases.push_back(std::move(host));
  return staged_work(std::move(inner), std::move(leases), {}, stream, counters_);
}

std::unique_ptr<Work> StagingCommunicator::irecv(const ops::Tensor& buffer, int src, Tag tag, Stream stream) {
  check_p2p(p2p_name("recv", src, tag), buffer, src, tag, size(), buffer.device());
  if (!staged(buffer)) return inner_->irecv(buffer, src, tag, stream);
  Lease host = stage_in(*buffers_, *counters_, buffer, false, stream);
  auto inner = inner_->irecv(host.tensor(), src, tag, stream);
  std::vector<CopyBack> back{{buffer, host.tensor()}};
  std::vector<Lease> leases;
  leases.push_back(std::move(host));
  return staged_work(std::move(inner), std::move(leases), std::move(back), stream, counters_);
}

std::unique_ptr<Work> StagingCommunicator::iallreduce(const ops::Tensor& buffer, ReduceOp op, Stream stream) {
  check_tensor(buffer, "allreduce", "buffer", buffer.device());
  if (!staged(buffer)) return inner_->iallreduce(buffer, op, stream);
  Lease host = stage_in(*buffers_, *counters_, buffer, true, stream);
  auto inner = inner_->iallreduce(host.tensor(), op, stream);
  std::vector<CopyBack> back{{buffer, host.tensor()}};
  std::vector<Lease> leases;
  leases.push_back(std::move(host));
  return staged_work(std::move(inner), std::move(leases), std::move(back), stream, counters_);
}

std::unique_ptr<Work> StagingCommunicator::ireduce_scatter(const ops::Tensor& input, const ops::Tensor& output,
                                                           std::span<const std::int64_t> counts, ReduceOp op,
                                                           Stream stream) {
  check_blocks("reduce_scatter", input, "input", output, "output", counts, rank(), size(), input.device());
  if (!staged(input)) return inner_->ireduce_scatter(input, output, counts, op, stream);
  std::vector<Lease> leases;
  leases.push_back(stage_in(*buffers_, *counters_, input, true, stream));
  leases.push_back(stage_in(*buffers_, *counters_, output, false, stream));
  auto inner = inner_->ireduce_scatter(leases[0].tensor(), leases[1].tensor(), counts, op, stream);
  std::vector<CopyBack> back{{output, leases[1].tensor()}};
  return staged_work(std::move(inner), std::move(leases), std::move(back), stream, counters_);
}

std::unique_ptr<Work> StagingCommunicator::iallgather(const ops::Tensor& input, const ops::Tensor& output,
                                                      std::span<const std::int64_t> counts, Stream stream) {
  check_blocks("allgather", output, "output", input, "input", counts, rank(), size(), output.device());
  if (!staged(output)) return inner_->iallgather(input, output, counts, stream);
  std::vector<Lease> leases;
  leases.push_back(stage_in(*buffers_, *counters_, input, true, stream));
  leases.push_back(stage_in(*buffers_, *counters_, output, false, stream));
  auto inner = inner_->iallgather(leases[0].tensor(), leases[1].tensor(), counts, stream);
  std::vector<CopyBack> back{{output, leases[1].tensor()}};
  return staged_work(std::move(inner), std::move(leases), std::move(back), stream, counters_);
}

std::unique_ptr<Work> StagingCommunicator::ibroadcast(const ops::Tensor& buffer, int root, Stream stream) {
  check_tensor(buffer, "broadcast", "buffer", buffer.device());
  check_rank("broadcast", "root", root, size());
  if (!staged(buffer)) return inner_->ibroadcast(buffer, root, stream);
  const bool am_root = root == rank();
  Lease host = stage_in(*buffers_, *counters_, buffer, am_root, stream);
  auto inner = inner_->ibroadcast(host.tensor(), root, stream);
  std::vector<CopyBack> back;
  if (!am_root) back.push_back({buffer, host.tensor()});
  std::vector<Lease> leases;
  leases.push_back(std::move(host));
  return staged_work(std::move(inner), std::move(leases), std::move(back), stream, counters_);
}

std::unique_ptr<Work> StagingCommunicator::ibarrier() { return inner_->ibarrier(); }

}  // namespace hdp::mesh
