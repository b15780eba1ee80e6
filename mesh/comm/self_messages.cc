#include "mesh/comm/self_messages.h"

#include <cstring>

#include "common/error.h"

namespace hdp::mesh {

std::shared_ptr<SelfMessage> SelfMessages::post(const ops::Tensor& buffer, bool send, Tag tag, const std::string& what) {
  auto message = std::make_shared<SelfMessage>(SelfMessage{buffer});
  auto& other = send ? recvs_ : sends_;
  auto it = other.find(tag);
  if (it == other.end()) {
    (send ? sends_ : recvs_)[tag].push_back(message);
    return message;
  }
  auto peer = it->second.front();
  const auto& from = send ? buffer : peer->buffer;
  const auto& to = send ? peer->buffer : buffer;
  if (from.bytes() != to.bytes()) {
    throw InvalidArgument(what + ": the send to self is " + std::to_string(from.bytes()) +
                          " bytes, the matching recv " + std::to_string(to.bytes()));
  }
  std::memcpy(to.raw(), from.raw(), from.bytes());
  it->second.pop_front();
  if (it->second.empty()) other.erase(it);
  peer->done = message->done = true;
  return message;
}

}  // namespace hdp::mesh
