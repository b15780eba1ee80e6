#include "mesh/comm/staging_buffers.h"

#include <algorithm>

#include "mesh/comm/staging_memory.h"

namespace hdp::mesh::staging {

HostBuffers::Buffer::Buffer(ops::DType dtype, std::int64_t numel, bool pin)
    : storage(ops::Tensor::whole_pages({numel}, dtype)), pinned(pin && staging::pin(storage)) {}

HostBuffers::Buffer::~Buffer() {
  if (pinned) unpin(storage);
}

HostBuffers::~HostBuffers() = default;

HostBuffers::Lease::Lease(std::shared_ptr<HostBuffers> owner, std::unique_ptr<Buffer> buffer, ops::Tensor view)
    : owner_(std::move(owner)), buffer_(std::move(buffer)), view_(std::move(view)) {}

HostBuffers::Lease::Lease(Lease&& other) noexcept = default;

HostBuffers::Lease& HostBuffers::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (owner_ && buffer_) owner_->give_back(std::move(buffer_));
    owner_ = std::move(other.owner_);
    buffer_ = std::move(other.buffer_);
    view_ = std::move(other.view_);
  }
  return *this;
}

HostBuffers::Lease::~Lease() {
  if (owner_ && buffer_) owner_->give_back(std::move(buffer_));
}

void HostBuffers::Lease::abandon() {
  if (owner_ && buffer_) owner_->set_aside(std::move(buffer_));
}

HostBuffers::Lease HostBuffers::take(ops::DType dtype, const ops::Shape& shape) {
  std::int64_t numel = 1;
  for (std::int64_t d : shape) numel *= d;
  if (numel == 0) return Lease(nullptr, nullptr, ops::Tensor::empty(shape, dtype));  // nothing to hold
  std::unique_ptr<Buffer> buffer;
  {
    std::lock_guard lock(mutex_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      const std::int64_t capacity = (*it)->storage.numel();
      if ((*it)->storage.dtype() != dtype || capacity < numel || capacity > 2 * numel) continue;
      if (best == free_.end() || capacity < (*best)->storage.numel()) best = it;
    }
    if (best != free_.end()) {
      buffer = std::move(*best);
      free_.erase(best);
    }
  }
  if (!buffer) {
    buffer = std::make_unique<Buffer>(dtype, numel, pin_);
    ++allocated_;
    if (buffer->pinned) ++pinned_;
  }
  ops::Tensor view = buffer->storage.view(0, shape);
  return Lease(shared_from_this(), std::move(buffer), std::move(view));
}

void HostBuffers::give_back(std::unique_ptr<Buffer> buffer) {
  std::unique_ptr<Buffer> dropped;  // freed (and unlocked) outside the mutex
  std::lock_guard lock(mutex_);
  if (free_.size() < kKeptFree) {
    free_.push_back(std::move(buffer));
  } else {
    dropped = std::move(buffer);
  }
}

void HostBuffers::set_aside(std::unique_ptr<Buffer> buffer) {
  std::lock_guard lock(mutex_);
  abandoned_.push_back(std::move(buffer));
}

}  // namespace hdp::mesh::staging
