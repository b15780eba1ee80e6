#include "bench/sim_agents.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "elastic/job_keys.h"

namespace hdp::bench {

using std::chrono::milliseconds;

struct SimulatedAgents::Agent {
  enum class State { kInit, kIdle, kBeat, kWatch, kTail, kRecord, kDead };
  int index = 0;
  int fd = -1;
  redisReader* reader = nullptr;
  State state = State::kInit;
  int awaiting = 0;              // replies still to come for what was sent
  std::string lease_key;
  std::string refusal_key;  // keys::refusal of the lease's identity, read with every heartbeat
  std::string last_id = "0";
  std::int64_t known = 0;
  std::int64_t record_due = 0;   // a generation learned whose record is still to be read
  std::int64_t fetching = 0;     // the generation whose record a GET in flight reads
  bool tail_read = false;        // the stream's tail was read for record_due (catch_up) and did not give it
  std::int64_t held = 0;         // the generation whose record it holds (read, or derived from a delta)
  Clock::time_point next_beat{};
  Clock::time_point last_refresh{};
  bool beat_due = false;         // the heartbeat's time came while a read was outstanding
  std::string unsent;            // what the socket did not take yet
};

namespace {

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("connect to redis: " + why);
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

std::int64_t to_generation(const redisReply* reply) {
  if (!reply || reply->type != REDIS_REPLY_STRING) return 0;
  return std::strtoll(reply->str, nullptr, 10);
}

// A stream entry's fields (name, value, ...): the generation it announces, and the base its delta is
// over ({"base": g, ...}); 0 for what is missing or does not parse.
struct EntryFields {
  std::int64_t gen = 0, delta_base = 0;
};
EntryFields entry_fields(const redisReply* fields) {
  EntryFields out;
  for (std::size_t f = 0; f + 1 < fields->elements; f += 2) {
    const redisReply* value = fields->element[f + 1];
    if (std::strcmp(fields->element[f]->str, "gen") == 0) out.gen = to_generation(value);
    if (std::strcmp(fields->element[f]->str, "delta") == 0 && value->type == REDIS_REPLY_STRING) {
      const auto delta = nlohmann::json::parse(std::string_view(value->str, value->len), nullptr, false);
      if (delta.is_object() && delta.contains("base") && delta["base"].is_number_integer()) {
        out.delta_base = delta["base"].get<std::int64_t>();
      }
    }
  }
  return out;
}

}  // namespace

SimulatedAgents::SimulatedAgents(SimAgentsOptions options, std::vector<std::string> lease_keys)
    : options_(std::move(options)) {
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  const auto start = Clock::now();
  for (std::size_t i = 0; i < lease_keys.size(); ++i) {
    auto agent = std::make_unique<Agent>();
    agent->index = static_cast<int>(i);
    agent->lease_key = options_.prefix + lease_keys[i];
    const std::string id = lease_keys[i].substr(lease_keys[i].find(':') + 1);  // <node>/<incarnation>
    const auto slash = id.find('/');
    agent->refusal_key = options_.prefix + elastic::keys::refusal(id.substr(0, slash), id.substr(slash + 1));
    agent->fd = connect_loopback(options_.port);
    agent->reader = redisReaderCreate();
    // Independent agents: their heartbeats spread over one period.
    agent->next_beat = start + options_.heartbeat * static_cast<long>(i) / static_cast<long>(lease_keys.size());
    epoll_event event{.events = EPOLLIN, .data = {.u64 = i}};
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, agent->fd, &event);
    agents_.push_back(std::move(agent));
  }
  live_ = static_cast<int>(agents_.size());
  thread_ = std::thread([this] { run(); });
}

SimulatedAgents::~SimulatedAgents() {
  stop_ = true;
  thread_.join();
  for (auto& agent : agents_) {
    if (agent->fd >= 0) ::close(agent->fd);
    redisReaderFree(agent->reader);
  }
  ::close(epoll_);
}

SimulatedAgents::Clock::time_point SimulatedAgents::kill(int i) {
  {
    std::lock_guard lock(mutex_);
    kill_requests_.push_back(i);
  }
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = killed_.find(i); it != killed_.end()) return it->second;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
}

SimulatedAgents::Known SimulatedAgents::known(std::int64_t g) const {
  std::lock_guard lock(mutex_);
  Known total;
  for (auto it = learned_.lower_bound(g); it != learned_.end(); ++it) {
    total.agents += it->second.agents;
    total.by_stream += it->second.by_stream;
    total.last = std::max(total.last, it->second.last);
    total.records_read += it->second.records_read;
    total.records_derived += it->second.records_derived;
    total.records_given += it->second.records_given;
    total.last_record = std::max(total.last_record, it->second.last_record);
    total.record_bytes = std::max(total.record_bytes, it->second.record_bytes);
  }
  return total;
}

void SimulatedAgents::learned(Agent& agent, std::int64_t g, bool by_stream, Clock::time_point now, std::int64_t delta_base) {
  const bool newer = g > agent.known;
  // A delta can still spare the read of a record learned from a heartbeat and not yet fetched.
  if (!newer && !(g == agent.known && agent.record_due == g)) return;
  std::lock_guard lock(mutex_);
  if (newer) {
    if (agent.known > 0) {
      // Counted under the newest generation it knows only.
      Known& old = learned_[agent.known];
      --old.agents;
    }
    agent.known = g;
    Known& entry = learned_[g];
    ++entry.agents;
    if (by_stream) ++entry.by_stream;
    entry.last = std::max(entry.last, now);
  }
  if (!options_.read_records) return;
  if (!options_.read_first_record && agent.held == 0) {
    agent.held = g;
    agent.record_due = 0;
    Known& entry = learned_[g];
    ++entry.records_given;
    entry.last_record = std::max(entry.last_record, now);
  } else if (delta_base > 0 && delta_base == agent.held) {
    // The agent applies the delta to the record it holds (GenerationRecords::apply): no read.
    // Applying costs the agent's CPU, not Redis's; the harness checks each delta once.
    agent.held = g;
    agent.record_due = 0;
    Known& entry = learned_[g];
    ++entry.records_derived;
    entry.last_record = std::max(entry.last_record, now);
  } else {
    agent.record_due = g;
    agent.tail_read = false;
  }
}

void SimulatedAgents::send(Agent& agent, const std::vector<std::vector<std::string>>& commands) {
  for (const auto& command : commands) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const auto& arg : command) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    char* formatted = nullptr;
    const int length = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), argv.data(), lengths.data());
    agent.unsent.append(formatted, static_cast<std::size_t>(length));
    redisFreeCommand(formatted);
  }
  agent.awaiting += static_cast<int>(commands.size());
  const ssize_t wrote = ::send(agent.fd, agent.unsent.data(), agent.unsent.size(), MSG_NOSIGNAL);
  if (wrote > 0) agent.unsent.erase(0, static_cast<std::size_t>(wrote));
  if (!agent.unsent.empty()) {
    // Loopback with small commands: rare. Wait for room, then write the rest (run()).
    epoll_event event{.events = EPOLLIN | EPOLLOUT, .data = {.u64 = static_cast<std::uint64_t>(agent.index)}};
    ::epoll_ctl(epoll_, EPOLL_CTL_MOD, agent.fd, &event);
  }
}

void SimulatedAgents::heartbeat(Agent& agent, Clock::time_point now) {
  agent.state = Agent::State::kBeat;
  agent.beat_due = false;
  agent.next_beat = now + options_.heartbeat;
  due_.emplace(agent.next_beat, agent.index);
  send(agent, {{"PEXPIRE", agent.lease_key, std::to_string(options_.lease.count())},
               {"MGET", options_.prefix + elastic::keys::kLeader, options_.prefix + elastic::keys::kGeneration,
                options_.prefix + elastic::keys::kControl, agent.refusal_key}});
}

// Blocks on the stream until shortly before the next heartbeat, as the agent's watch is granted.
void SimulatedAgents::watch(Agent& agent, Clock::time_point now) {
  const auto margin = std::min(milliseconds(100), options_.heartbeat / 10);
  const auto block = std::chrono::duration_cast<milliseconds>(agent.next_beat - margin - now);
  if (block < milliseconds(10)) {
    agent.state = Agent::State::kIdle;
    return;
  }
  agent.state = Agent::State::kWatch;
  send(agent, {{"XREAD", "COUNT", "16", "BLOCK", std::to_string(block.count()), "STREAMS",
                options_.prefix + "generations", agent.last_id}});
}

void SimulatedAgents::on_reply(Agent& agent, redisReply* reply, Clock::time_point now) {
  --agent.awaiting;
  switch (agent.state) {
    case Agent::State::kInit:
      if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 1) agent.last_id = reply->element[0]->element[0]->str;
      agent.state = Agent::State::kIdle;  // the first heartbeat comes at its time
      if (agent.beat_due || now >= agent.next_beat) heartbeat(agent, now);
      return;
    case Agent::State::kBeat:
      if (reply->type == REDIS_REPLY_INTEGER) {
        agent.last_refresh = now;  // the PEXPIRE
        return;
      }
      if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2) learned(agent, to_generation(reply->element[1]), false, now);
      if (agent.record_due == 0) {
        watch(agent, now);
        return;
      }
      agent.state = Agent::State::kIdle;
      break;
    case Agent::State::kWatch:
      if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 1) {
        const redisReply* entries = reply->element[0]->element[1];
        for (std::size_t e = 0; e < entries->elements; ++e) {
          const redisReply* entry = entries->element[e];
          agent.last_id = entry->element[0]->str;
          const EntryFields fields = entry_fields(entry->element[1]);
          if (fields.gen > 0) learned(agent, fields.gen, true, now, fields.delta_base);
        }
        if (!agent.beat_due && agent.record_due == 0) {
          watch(agent, now);  // read on at once, as the agent re-grants after a notice
          break;
        }
      }
      agent.state = Agent::State::kIdle;
      break;
    case Agent::State::kTail: {
      if (reply->type == REDIS_REPLY_ARRAY) {
        // Newest first: apply the deltas oldest first, each over the record held.
        for (std::size_t e = reply->elements; e-- > 0;) {
          const EntryFields fields = entry_fields(reply->element[e]->element[1]);
          if (fields.gen > agent.held && fields.delta_base > 0 && fields.delta_base == agent.held) agent.held = fields.gen;
        }
        if (agent.held >= agent.record_due) {
          std::lock_guard lock(mutex_);
          Known& entry = learned_[agent.known];
          ++entry.records_derived;
          entry.last_record = std::max(entry.last_record, now);
          agent.record_due = 0;
        }
      }
      agent.state = Agent::State::kIdle;
      break;
    }
    case Agent::State::kRecord: {
      std::lock_guard lock(mutex_);
      Known& entry = learned_[agent.known];
      ++entry.records_read;
      entry.last_record = std::max(entry.last_record, now);
      if (reply->type == REDIS_REPLY_STRING) {
        entry.record_bytes = static_cast<std::size_t>(reply->len);
        agent.held = std::max(agent.held, agent.fetching);
      }
      agent.state = Agent::State::kIdle;
      break;
    }
    default:
      break;
  }
  if (agent.state == Agent::State::kIdle) next(agent, now);
}

void SimulatedAgents::next(Agent& agent, Clock::time_point now) {
  if (agent.record_due > 0 && agent.held > 0 && !agent.tail_read) {
    // Learned from the heartbeat: the stream's tail first (elastic::catch_up), the record if not.
    agent.state = Agent::State::kTail;
    agent.tail_read = true;
    send(agent, {{"XREVRANGE", options_.prefix + "generations", "+", "-", "COUNT", "16"}});
  } else if (agent.record_due > 0) {
    agent.state = Agent::State::kRecord;
    agent.fetching = std::exchange(agent.record_due, 0);
    send(agent, {{"GET", options_.prefix + "gen:" + std::to_string(agent.fetching)}});
  } else if (agent.beat_due || now >= agent.next_beat) {
    heartbeat(agent, now);
  } else {
    watch(agent, now);
  }
}

void SimulatedAgents::on_readable(Agent& agent) {
  char buffer[16384];
  for (;;) {
    const ssize_t got = ::recv(agent.fd, buffer, sizeof buffer, 0);
    if (got > 0) {
      redisReaderFeed(agent.reader, buffer, static_cast<std::size_t>(got));
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    throw std::runtime_error("simulated agent " + std::to_string(agent.index) + ": connection to redis lost");
  }
  const auto now = Clock::now();
  void* reply = nullptr;
  while (redisReaderGetReply(agent.reader, &reply) == REDIS_OK && reply) {
    on_reply(agent, static_cast<redisReply*>(reply), now);
    freeReplyObject(reply);
    reply = nullptr;
  }
}

void SimulatedAgents::run() {
  for (auto& agent : agents_) {
    send(*agent, {{"XREVRANGE", options_.prefix + "generations", "+", "-", "COUNT", "1"}});
    due_.emplace(agent->next_beat, agent->index);
  }
  std::vector<epoll_event> events(1024);
  while (!stop_) {
    {
      std::lock_guard lock(mutex_);
      for (int i : kill_requests_) {
        Agent& agent = *agents_[static_cast<std::size_t>(i)];
        ::epoll_ctl(epoll_, EPOLL_CTL_DEL, agent.fd, nullptr);
        ::close(agent.fd);
        agent.fd = -1;
        agent.state = Agent::State::kDead;
        if (agent.known > 0) --learned_[agent.known].agents;
        --live_;
        killed_[i] = agent.last_refresh;
      }
      kill_requests_.clear();
    }
    auto now = Clock::now();
    while (!due_.empty() && due_.top().first <= now) {
      const auto [when, i] = due_.top();
      due_.pop();
      Agent& agent = *agents_[static_cast<std::size_t>(i)];
      if (agent.state == Agent::State::kDead || when != agent.next_beat) continue;  // dead, or a stale entry
      if (agent.state == Agent::State::kIdle) {
        heartbeat(agent, now);  // schedules the next one
      } else if (agent.state != Agent::State::kBeat) {
        agent.beat_due = true;  // right after the read in flight (on_reply)
      }
    }
    const auto wait = due_.empty() ? milliseconds(50)
                                   : std::clamp(std::chrono::duration_cast<milliseconds>(due_.top().first - now),
                                                milliseconds(0), milliseconds(50));
    const int ready = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), static_cast<int>(wait.count()));
    for (int e = 0; e < ready; ++e) {
      Agent& agent = *agents_[events[static_cast<std::size_t>(e)].data.u64];
      if (agent.fd < 0) continue;
      if (events[static_cast<std::size_t>(e)].events & EPOLLOUT) {
        const ssize_t wrote = ::send(agent.fd, agent.unsent.data(), agent.unsent.size(), MSG_NOSIGNAL);
        if (wrote > 0) agent.unsent.erase(0, static_cast<std::size_t>(wrote));
        if (agent.unsent.empty()) {
          epoll_event event{.events = EPOLLIN, .data = {.u64 = static_cast<std::uint64_t>(agent.index)}};
          ::epoll_ctl(epoll_, EPOLL_CTL_MOD, agent.fd, &event);
        }
      }
      if (events[static_cast<std::size_t>(e)].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(agent);
    }
  }
}

}  // namespace hdp::bench
