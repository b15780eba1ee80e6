// Requests on a running job (elastic/control.h) on a MemoryStore: each is written with its `request`
// event in one commit, asking twice is asking once, a drain is fenced by its incarnation, only the
// request with the right id is finished, concurrent writers all land, garbage is refused naming the
// key; and the leader does not admit a cordoned node until it is uncordoned.
#include "elastic/control.h"

#include <gtest/gtest.h>

#include <thread>

#include "elastic/job_keys.h"
#include "elastic/membership.h"
#include "elastic/memory_store.h"
#include "tests/elastic/controller_fixture.h"

namespace hdp::elastic {
namespace {

std::vector<std::map<std::string, std::string>> events(Store& store, const std::string& type) {
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& e : store.stream_tail(keys::kEvents, 1000)) {
    std::map<std::string, std::string> fields(e.fields.begin(), e.fields.end());
    if (fields["type"] == type) out.push_back(fields);
  }
  return out;
}

ControlRequests pending(Store& store) {
  const auto value = store.get(keys::kControl);
  return value ? decode_control(*value, keys::kControl) : ControlRequests{};
}

TEST(Control, EncodeAndDecodeAgree) {
  ControlRequests requests;
  requests.stop = Request{"00000000000000aa", "ann@h1", 1};
  requests.checkpoint = Request{"00000000000000bb", "bob@h2", 2};
  DrainRequest d;
  d.id = "00000000000000cc";
  d.by = "cy@h3";
  d.at_ms = 3;
  d.incarnation = "0123456789abcdef";
  requests.drains["n2"] = d;
  const ControlRequests back = decode_control(encode(requests), "control");
  EXPECT_EQ(back.stop->id, "00000000000000aa");
  EXPECT_EQ(back.stop->by, "ann@h1");
  EXPECT_EQ(back.checkpoint->at_ms, 2);
  ASSERT_NE(back.drain_of("n2", "0123456789abcdef"), nullptr);
  EXPECT_EQ(back.drain_of("n2", "0123456789abcdef")->by, "cy@h3");
  EXPECT_EQ(back.drain_of("n2", "fedcba9876543210"), nullptr) << "another incarnation";
  EXPECT_EQ(encode(ControlRequests{}), "") << "no requests: the key is erased";
  const Cordons cordons = decode_cordons(encode(Cordons{{"n3", {"dee@h4", 4}}}), "cordons");
  EXPECT_EQ(cordons.at("n3").by, "dee@h4");
}

// The leader's `standby` list as rank 0 counts it: garbage is not a count (read as none).
TEST(Control, ANodeListIsCountedAndGarbageIsNot) {
  EXPECT_EQ(count_node_list(""), 0);
  EXPECT_EQ(count_node_list("n4"), 1);
  EXPECT_EQ(count_node_list("n4,gpu-07.example,node_9"), 3);
  for (const char* bad : {",", "n4,", ",n4", "n4,,n5", "n4 n5", "n4;n5", "{\"n4\": 1}"}) {
    EXPECT_FALSE(count_node_list(bad).has_value()) << bad;
  }
}

TEST(Control, GarbageIsRefusedNamingTheKeyAndTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1]", "not a JSON object"},
      {"{\"reboot\": {}}", "unknown request"},
      {"{\"stop\": 7}", "not an object"},
      {"{\"stop\": {\"id\": \"\", \"by\": \"a\", \"at_ms\": 1}}", "'id' is empty"},
      {"{\"stop\": {\"id\": \"x\", \"by\": \"a\", \"at_ms\": -1}}", "'at_ms'"},
      {"{\"drain\": {\"n1\": {\"id\": \"x\", \"by\": \"a\", \"at_ms\": 1}}}", "'incarnation' is missing"},
      {"{\"drain\": []}", "'drain' is not an object"},
  };
  for (const auto& [text, reason] : cases) {
    try {
      decode_control(text, keys::kControl);
      ADD_FAILURE() << text << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'control'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << text << ": " << e.what();
    }
  }
  EXPECT_THROW(decode_cordons("{\"n1\": {\"by\": 3, \"at_ms\": 1}}", keys::kCordons), InvalidArgument);
  // A writer refuses to overwrite garbage: a person must look at it.
  auto store = std::make_shared<MemoryStore>();
  store->set(keys::kControl, "{\"stop\": 7}");
  EXPECT_THROW(JobControl(store, "ann@h1").checkpoint(), InvalidArgument);
  EXPECT_EQ(store->get(keys::kControl), "{\"stop\": 7}");
}

TEST(Control, EachRequestIsWrittenWithItsEventAndAskingTwiceIsAskingOnce) {
  auto store = std::make_shared<MemoryStore>();
  JobControl control(store, "ann@h1");
  const Request stop = control.stop();
  EXPECT_EQ(stop.id.size(), 16u);
  EXPECT_EQ(stop.by, "ann@h1");
  EXPECT_EQ(control.stop().id, stop.id);
  const Request checkpoint = control.checkpoint();
  EXPECT_NE(checkpoint.id, stop.id);
  const Request drain = control.drain("n2", "aaaaaaaaaaaaaaaa");
  EXPECT_EQ(control.drain("n2", "aaaaaaaaaaaaaaaa").id, drain.id);
  // A drain for the node's next incarnation replaces the one for the earlier.
  const Request again = control.drain("n2", "bbbbbbbbbbbbbbbb");
  EXPECT_NE(again.id, drain.id);
  const ControlRequests now = pending(*store);
  EXPECT_EQ(now.stop->id, stop.id);
  EXPECT_EQ(now.checkpoint->id, checkpoint.id);
  EXPECT_EQ(now.drains.size(), 1u);
  EXPECT_NE(now.drain_of("n2", "bbbbbbbbbbbbbbbb"), nullptr);
  const auto written = events(*store, "request");
  ASSERT_EQ(written.size(), 4u) << "one event per request written, none for a repeat";
  EXPECT_EQ(written[0].at("op"), "stop");
  EXPECT_EQ(written[0].at("by"), "ann@h1");
  EXPECT_EQ(written[2].at("node"), "n2");
  EXPECT_EQ(written[3].at("incarnation"), "bbbbbbbbbbbbbbbb");
}

TEST(Control, OnlyTheRequestWithItsIdIsFinishedAndTheKeyGoesWithTheLast) {
  auto store = std::make_shared<MemoryStore>();
  JobControl control(store, "ann@h1");
  const Request checkpoint = control.checkpoint();
  const Request drain = control.drain("n2", "aaaaaaaaaaaaaaaa");
  finish_request(*store, "checkpoint", "0000000000000000", "saved");  // another id: nothing
  EXPECT_TRUE(pending(*store).checkpoint.has_value());
  EXPECT_TRUE(events(*store, "request_done").empty());
  finish_request(*store, "checkpoint", checkpoint.id, "saved", {{"step", "12"}});
  EXPECT_FALSE(pending(*store).checkpoint.has_value());
  finish_request(*store, "checkpoint", checkpoint.id, "saved", {{"step", "13"}});  // done once
  finish_request(*store, "drain", drain.id, "left", {}, "n3");  // another node: nothing
  EXPECT_TRUE(store->get(keys::kControl).has_value());
  finish_request(*store, "drain", drain.id, "left", {}, "n2");
  EXPECT_FALSE(store->get(keys::kControl).has_value()) << "no request left: no key";
  const auto done = events(*store, "request_done");
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].at("id"), checkpoint.id);
  EXPECT_EQ(done[0].at("step"), "12");
  EXPECT_EQ(done[1].at("node"), "n2");
  EXPECT_EQ(done[1].at("outcome"), "left");
  // An agent starting withdraws a pending stop; nothing else.
  control.stop();
  control.checkpoint();
  EXPECT_TRUE(withdraw_stop(*store));
  EXPECT_FALSE(withdraw_stop(*store));
  EXPECT_FALSE(pending(*store).stop.has_value());
  EXPECT_TRUE(pending(*store).checkpoint.has_value());
  EXPECT_EQ(events(*store, "request_done").back().at("outcome"), "withdrawn");
}

TEST(Control, ConcurrentWritersAllLand) {
  auto store = std::make_shared<MemoryStore>();
  constexpr int kWriters = 8, kEach = 20;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      JobControl control(store, "w" + std::to_string(w) + "@h");
      for (int i = 0; i < kEach; ++i) {
        control.cordon("n" + std::to_string(w * kEach + i));
        control.drain("d" + std::to_string(w * kEach + i), "aaaaaaaaaaaaaaaa");
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(decode_cordons(*store->get(keys::kCordons), "cordons").size(), static_cast<std::size_t>(kWriters * kEach));
  EXPECT_EQ(pending(*store).drains.size(), static_cast<std::size_t>(kWriters * kEach));
  EXPECT_EQ(events(*store, "cordon").size(), static_cast<std::size_t>(kWriters * kEach));
}

class CordonTest : public test::ControllerFixture {
 protected:
  std::vector<std::string> members() {
    const auto number = std::stoll(store_->get(keys::kGeneration).value());
    std::vector<std::string> out;
    for (const auto& m : decode_generation(*store_->get(keys::generation(number)), "gen").members) out.push_back(m.node);
    return out;
  }
};

TEST_F(CordonTest, ACordonedNodeStaysAMemberButIsNotAdmittedUntilUncordoned) {
  join("a");
  join("b");
  auto leader = controller();
  ASSERT_TRUE(leader.tick().has_value());
  EXPECT_EQ(members(), (std::vector<std::string>{"a", "b"}));
  JobControl control(store_, "ann@h1");
  EXPECT_TRUE(control.cordon("b"));
  EXPECT_FALSE(control.cordon("b"));
  EXPECT_EQ(leader.tick(), std::nullopt) << "a cordon takes no member out";
  EXPECT_TRUE(control.cordon("c"));
  join("c");
  EXPECT_EQ(leader.tick(), std::nullopt) << "a cordoned newcomer is not admitted";
  EXPECT_EQ(leader.tick(), std::nullopt);
  EXPECT_EQ(members(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(control.uncordon("c"));
  EXPECT_FALSE(control.uncordon("c"));
  ASSERT_TRUE(leader.tick().has_value()) << "admitted at the first tick after the uncordon";
  EXPECT_EQ(members(), (std::vector<std::string>{"a", "b", "c"}));
  // Garbage in `cordons` is logged and read as none: it must not stop publication.
  store_->set(keys::kCordons, "[]");
  join("d");
  ASSERT_TRUE(leader.tick().has_value());
  EXPECT_EQ(members().size(), 4u);
}

}  // namespace
}  // namespace hdp::elastic
