// File: mesh/comm/self_messages.h
//
// TcpCommunicator's messages from a rank to itself, matched in memory: a send and a recv with the
// same tag match in the order they were posted, and the bytes are copied when both are there.
// No locking of its own: the communicator calls it, and reads SelfMessage::done, under its mutex.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>

#include "mesh/comm/communicator.h"
#include "ops/tensor.h"

namespace hdp::mesh {

// A message from this rank to itself, matched in memory.
struct SelfMessage {
  ops::Tensor buffer;
  bool done = false;  // guarded by the communicator's mutex
};

class SelfMessages {
 public:
  // Posts a send (send = true) or a recv of `buffer` with `tag`; done at once when it matched the
  // oldest waiting one of the other side. InvalidArgument (`what` first) when the two sizes differ.
  std::shared_ptr<SelfMessage> post(const ops::Tensor& buffer, bool send, Tag tag, const std::string& what);

 private:
  std::map<Tag, std::deque<std::shared_ptr<SelfMessage>>> sends_, recvs_;
};

}  // namespace hdp::mesh
