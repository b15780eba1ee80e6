// A node cut off by the network, not frozen: its agent and workers keep running in their own network
// namespace, joined to the host by a veth pair, and the link is taken down and brought up again.
// The survivors must drop it within a lease and resume training (they see silence, as with a frozen
// node); once the link is back, the cut-off agent finds its lease expired while its node claim is
// still in Redis, so it is evicted: it kills its workers and joins again as a new incarnation.
//
// Needs CAP_NET_ADMIN and CAP_SYS_ADMIN (veth pairs, `unshare -n`, `nsenter`) and iproute2; skipped
// with the reason otherwise.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "elastic/redis_connection.h"
#include "elastic/redis_url.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string describe(const CommandResult& r) {
  return "exit " + std::to_string(r.exit_code) + ": " + r.out + r.err;
}

CommandResult run(const std::vector<std::string>& argv) { return run_command(argv, {}, 10s); }

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A /30 for the link, chosen from the pid so that tests running at once on one host do not clash:
// one of the 32768 blocks of 198.18.0.0/15 (RFC 2544, set aside for test networks, so no real
// network's addresses are shadowed while the test runs). The host end gets .1, the namespace .2.
struct LinkAddresses {
  std::string host;
  std::string peer;
};

LinkAddresses addresses_for(pid_t pid) {
  const unsigned block = static_cast<unsigned>(pid) % 32768u;
  const unsigned base = (198u << 24) | (18u << 16) | (block << 2);
  auto dotted = [](unsigned a) {
    return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." + std::to_string((a >> 8) & 255) +
           "." + std::to_string(a & 255);
  };
  return {dotted(base + 1), dotted(base + 2)};
}

// A veth pair whose host end is addressed and up; the other end is moved into a namespace later.
// Deleting the host end deletes both ends (and the namespace end also dies with its namespace).
class VethPair {
 public:
  VethPair(std::string host_end, std::string peer_end) : host_(std::move(host_end)), peer_(std::move(peer_end)) {}
  ~VethPair() {
    if (created_) run({"ip", "link", "del", host_});
  }
  VethPair(const VethPair&) = delete;
  VethPair& operator=(const VethPair&) = delete;

  // Returns an empty string, or why the pair could not be set up.
  std::string create(const std::string& host_address) {
    CommandResult r = run({"ip", "link", "add", host_, "type", "veth", "peer", "name", peer_});
    if (r.exit_code != 0) return "ip link add " + host_ + " type veth: " + describe(r);
    created_ = true;
    for (const std::vector<std::string>& argv :
         {std::vector<std::string>{"ip", "addr", "add", host_address + "/30", "dev", host_},
          std::vector<std::string>{"ip", "link", "set", host_, "up"}}) {
      r = run(argv);
      if (r.exit_code != 0) return argv[1] + " " + argv[2] + ": " + describe(r);
    }
    return "";
  }
  const std::string& host_end() const { return host_; }
  const std::string& peer_end() const { return peer_; }

 private:
  std::string host_;
  std::string peer_;
  bool created_ = false;
};

std::filesystem::path netns_of(pid_t pid) {
  std::error_code ignored;
  return std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/net", ignored);
}

// The running generation's members are exactly `nodes` (in any order).
bool running_with(const std::optional<elastic::Generation>& g, std::vector<std::string> nodes) {
  if (!g || g->status != elastic::GenerationStatus::kRunning) return false;
  auto names = node_names(*g);
  std::sort(names.begin(), names.end());
  std::sort(nodes.begin(), nodes.end());
  return names == nodes;
}

std::string incarnation_of(const elastic::Generation& generation, const std::string& node) {
  for (const auto& m : generation.members) {
    if (m.node == node) return m.incarnation;
  }
  return "";
}

// Lease 2 s, settle 0.3 s (ClusterOptions), 2 workers per node, the workers' collective timeout 10 s
// as in the frozen-node test of membership_test.cc: the survivors must resume because a generation
// without the cut-off node aborts their all-reduce, not because the all-reduce timed out.
TEST(Partition, ACutOffNodeCostsTheSurvivorsAboutALeaseAndRejoinsAsANewIncarnationWhenTheLinkHeals) {
  const pid_t self = getpid();
  for (const std::vector<std::string>& probe :
       {std::vector<std::string>{"unshare", "-n", "true"},
        std::vector<std::string>{"nsenter", "-t", std::to_string(self), "-n", "true"}}) {
    if (CommandResult r = run(probe); r.exit_code != 0) {
      GTEST_SKIP() << "cannot create or enter a network namespace (needs CAP_SYS_ADMIN): " << probe[0] << ": "
                   << describe(r);
    }
  }
  const LinkAddresses addresses = addresses_for(self);
  VethPair link("hdpp" + std::to_string(self) + "a", "hdpp" + std::to_string(self) + "b");
  if (const std::string why = link.create(addresses.host); !why.empty()) {
    GTEST_SKIP() << "cannot set up a veth pair (needs CAP_NET_ADMIN and iproute2): " << why;
  }

  AgentCluster cluster({.worker_timeout = 10s});
  // The cluster's redis-server listens on 127.0.0.1 only; the namespace reaches the host at the
  // veth address, so the server also binds that one (at run time, Redis >= 7). Protected mode would
  // refuse a client on a non-loopback address without a password; the address exists only on this
  // test's link, for as long as the test runs.
  {
    elastic::RedisConnection admin(elastic::parse_redis_url(cluster.redis().url()), 2s, 2s);
    const elastic::RedisReply reply =
        admin.command({"CONFIG", "SET", "protected-mode", "no", "bind", "127.0.0.1 " + addresses.host});
    if (reply.type == elastic::RedisReply::Type::kError) {
      GTEST_SKIP() << "redis-server cannot also listen on " << addresses.host << ": " << reply.str;
    }
  }
  const std::string redis_url = "redis://" + addresses.host + ":" + std::to_string(cluster.redis().port());

  // n1 and n2 on the host (Redis on loopback), advertising the host end's address to their peers:
  // the one address of theirs that the namespace can reach. n3 starts once a leader exists, so the
  // leader is n1 or n2 and the cut tests the loss of a follower, as the frozen-node test does.
  for (const char* node : {"n1", "n2"}) cluster.start_agent(node, {"--advertise-addr", addresses.host});
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 15s), 0) << cluster.all_logs();
  ASSERT_TRUE(cluster.leader().has_value());

  // n3 in a fresh network namespace: `unshare -n` execs the script in place (the pid stays the
  // same), which waits (bounded, 10 s) for its end of the pair to be moved in, configures it and
  // execs the agent, so the agent's pid is the child's pid and its workers share the namespace.
  TempDir dir("hdp-partition");
  const std::filesystem::path n3_log = dir.path() / "n3.log";
  const std::string script =
      "i=0; while ! ip link show " + link.peer_end() +
      " >/dev/null 2>&1; do i=$((i+1)); if [ $i -ge 200 ]; then echo 'link never appeared' >&2; exit 97; fi; "
      "sleep 0.05; done; "
      "ip addr add " + addresses.peer + "/30 dev " + link.peer_end() + " && ip link set lo up && ip link set " +
      link.peer_end() + " up || exit 98; exec \"$@\"";
  const ClusterOptions& o = cluster.options();
  std::vector<std::string> argv = {"unshare", "-n", "--", "sh", "-c", script, "sh",
                                   cluster.hdp(), "agent", "--job", cluster.job(), "--redis", redis_url,
                                   "--node-id", "n3", "--advertise-addr", addresses.peer,
                                   "--nproc-per-node", std::to_string(o.nproc),
                                   "--lease-ms", std::to_string(o.lease.count()),
                                   "--settle-ms", std::to_string(o.settle.count()),
                                   "--nnodes", o.nnodes, "--drain-timeout", "5",
                                   "--", cluster.hdp(), "train", "--smoke", "--steps", std::to_string(o.steps),
                                   "--step-ms", std::to_string(o.step_ms),
                                   "--timeout-ms", std::to_string(o.worker_timeout.count())};
  ChildProcess n3(argv, n3_log.string());
  auto logs = [&] { return cluster.all_logs() + "==== n3\n" + read_file(n3_log); };
  const std::filesystem::path host_netns = netns_of(self);
  ASSERT_GE(cluster.wait_until([&] {
              const auto ns = netns_of(n3.pid());
              return !ns.empty() && ns != host_netns;
            }, 5s),
            0)
      << "n3 never entered its own network namespace\n" << logs();
  const CommandResult moved = run({"ip", "link", "set", link.peer_end(), "netns", std::to_string(n3.pid())});
  ASSERT_EQ(moved.exit_code, 0) << describe(moved);
  // Commands run inside n3's namespace, by the pid of the process that lives there.
  auto in_n3 = [&](std::vector<std::string> command) {
    command.insert(command.begin(), {"nsenter", "-t", std::to_string(n3.pid()), "-n"});
    return run(command);
  };

  ASSERT_GE(cluster.wait_for_members({"n1", "n2", "n3"}, 15s), 0) << logs();
  expect_progress(cluster, 10, 10s);
  ASSERT_FALSE(cluster.leader().value_or("").starts_with("n3/"));
  const elastic::Generation before_cut = cluster.current().value();
  const std::string old_incarnation = incarnation_of(before_cut, "n3");
  ASSERT_FALSE(old_incarnation.empty());

  // The cut: n3's end goes down inside its namespace. The host end keeps its address (the
  // survivors' advertised address and Redis stay reachable on the host) and loses its carrier, so
  // what the host sends to n3 is dropped in silence, as on a partitioned network; n3's own sends
  // fail (no route), Redis included.
  const auto cut = Clock::now();
  const CommandResult down = in_n3({"ip", "link", "set", link.peer_end(), "down"});
  ASSERT_EQ(down.exit_code, 0) << describe(down);
  const std::int64_t cut_step = cluster.step();
  // Bounds, from the cut: n3's last heartbeat was before it, so its lease expires within one lease,
  // and the leader (ticking every 200 ms) publishes the generation without it within lease + 1 s,
  // the bound of the kill and pause tests. That generation aborts the survivors' blocked all-reduce
  // (trainer/elastic_loop.h), so training is reported again within lease + 1.5 s: 0.5 s more for
  // the new generation's bootstrap and the step reports (every 10 steps of 20 ms; 10 steps past the
  // step at the cut need two of them). The 10 s collective timeout would blow that bound.
  double without_n3 = -1, resumed = -1;
  cluster.wait_until(
      [&] {
        if (without_n3 < 0 && running_with(cluster.current(), {"n1", "n2"})) without_n3 = seconds_since(cut);
        if (resumed < 0 && cluster.step() > cut_step + 10) resumed = seconds_since(cut);
        return resumed >= 0 && without_n3 >= 0;
      },
      20s);
  std::printf("cut: generation without n3 after %.2f s, training reported again after %.2f s\n", without_n3,
              resumed);
  ASSERT_GE(without_n3, 0) << "no running generation with exactly n1, n2 after the cut\n" << logs();
  ASSERT_GE(resumed, 0) << "no training reported after the cut\n" << logs();
  EXPECT_LE(without_n3, (o.lease + 1s).count() / 1000.0) << logs();
  EXPECT_LE(resumed, (o.lease + 1500ms).count() / 1000.0) << logs();
  const std::int64_t cut_generation = cluster.generation();
  EXPECT_GT(cut_generation, before_cut.number);
  ASSERT_TRUE(n3.running()) << "n3's agent exited while cut off\n" << logs();

  // The heal. Redis kept n3's node claim (it has no expiry) but not its lease, so n3's next
  // heartbeat is refused and it is evicted (a store that lost its data would have neither, and only
  // then is the same incarnation re-established). Bound 10 s: n3's next heartbeat follows within a
  // heartbeat (lease/3) plus its Redis calls' budget (lease/6 each) once its connection is
  // re-made; then a new incarnation, new worker processes, the settle window (0.3 s) and a
  // bootstrap of all six workers — about 2 s, with room for process start-up on a loaded machine.
  const CommandResult up = in_n3({"ip", "link", "set", link.peer_end(), "up"});
  ASSERT_EQ(up.exit_code, 0) << describe(up);
  const auto healed = Clock::now();
  double rejoined = -1;
  std::string new_incarnation;
  cluster.wait_until(
      [&] {
        auto g = cluster.current();
        if (!running_with(g, {"n1", "n2", "n3"})) return false;
        new_incarnation = incarnation_of(*g, "n3");
        if (new_incarnation == old_incarnation) return false;
        rejoined = seconds_since(healed);
        return true;
      },
      20s);
  std::printf("heal: n3 back as a new incarnation after %.2f s\n", rejoined);
  ASSERT_GE(rejoined, 0) << "no running generation with n1, n2 and a new incarnation of n3\n" << logs();
  EXPECT_LE(rejoined, 10.0) << logs();
  EXPECT_GT(cluster.generation(), cut_generation);
  const std::string n3_text = read_file(n3_log);
  EXPECT_NE(n3_text.find("incarnation " + old_incarnation + " was lost (evicted)"), std::string::npos) << n3_text;
  EXPECT_EQ(n3_text.find("re-established"), std::string::npos) << n3_text;
  expect_progress(cluster, 20, 10s);
  if (HasFailure()) std::printf("==== n3\n%s\n", read_file(n3_log).c_str());  // expect_progress shows the others
  // A wrong all-reduce sum makes a smoke worker exit 3, which its agent logs.
  const std::string all = logs();
  EXPECT_EQ(all.find("expected"), std::string::npos) << "a smoke worker saw a wrong sum:\n" << all;
  EXPECT_EQ(all.find("reports the job failed"), std::string::npos) << all;
  EXPECT_TRUE(n3.running()) << all;
}

}  // namespace
}  // namespace hdp::test
