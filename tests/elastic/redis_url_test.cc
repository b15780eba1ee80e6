#include "elastic/redis_url.h"

#include <gtest/gtest.h>

#include <fstream>
#include <utility>
#include <vector>

#include "common/error.h"
#include "tests/support/temp_dir.h"

namespace hdp::elastic {
namespace {

TEST(RedisUrl, HostOnlyUsesTheDefaultPort) {
  auto e = parse_redis_url("redis://cache.example");
  EXPECT_EQ(e.host, "cache.example");
  EXPECT_EQ(e.port, 6379);
  EXPECT_EQ(e.db, 0);
  EXPECT_FALSE(e.password);
  EXPECT_FALSE(e.is_unix());
}

TEST(RedisUrl, FullFormWithAclUserPasswordAndDb) {
  auto e = parse_redis_url("redis://alice:s3cret@10.1.2.3:7000/4");
  EXPECT_EQ(e.user, "alice");
  EXPECT_EQ(e.password, "s3cret");
  EXPECT_EQ(e.host, "10.1.2.3");
  EXPECT_EQ(e.port, 7000);
  EXPECT_EQ(e.db, 4);
  EXPECT_EQ(e.display(), "alice@10.1.2.3:7000/4");
}

TEST(RedisUrl, PasswordOnlyMeansTheDefaultUser) {
  auto e = parse_redis_url("redis://:pw@localhost:6380");
  EXPECT_EQ(e.user, "");
  EXPECT_EQ(e.password, "pw");
}

TEST(RedisUrl, PercentEncodedCredentialsAreDecoded) {
  auto e = parse_redis_url("redis://bob:p%40ss%3Aw%2Frd@h:1");
  EXPECT_EQ(e.password, "p@ss:w/rd");
}

TEST(RedisUrl, Ipv6HostInBrackets) {
  auto e = parse_redis_url("redis://[::1]:6390/2");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 6390);
  EXPECT_EQ(e.db, 2);
}

TEST(RedisUrl, UnixSocketWithDatabase) {
  auto e = parse_redis_url("unix:///run/redis/redis.sock?db=3");
  EXPECT_TRUE(e.is_unix());
  EXPECT_EQ(e.socket_path, "/run/redis/redis.sock");
  EXPECT_EQ(e.db, 3);
}

TEST(RedisUrl, MalformedUrlsAreRejectedWithTheReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://host:1", "unknown scheme"},
      {"redis://", "host is missing"},
      {"redis://host:notaport", "port"},
      {"redis://host:0", "port"},
      {"redis://host:70000", "port"},
      {"redis://host:", "port"},
      {"redis://host:1/x", "database"},
      {"redis://[::1:5", "unterminated"},
      {"unix://relative.sock", "absolute"},
      {"unix:///s.sock?timeout=3", "db=N"},
      {"redis://u:%zz@h", "percent"},
      {"", "unknown scheme"}};
  for (const auto& [url, reason] : cases) {
    try {
      parse_redis_url(url);
      ADD_FAILURE() << "accepted " << url;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << url << " -> " << e.what();
    }
  }
}

TEST(RedisUrl, ErrorsNeverShowThePassword) {
  try {
    parse_redis_url("redis://alice:TopSecret99@host:badport");
    FAIL() << "accepted a bad port";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find("TopSecret99"), std::string::npos) << message;
    EXPECT_NE(message.find("alice:***@host"), std::string::npos) << message;
  }
  EXPECT_EQ(parse_redis_url("redis://alice:TopSecret99@host:1").display().find("TopSecret99"), std::string::npos);
}

// Issue 13, defect 11: the parser and the masking of error messages must agree on which '@' ends
// the credentials. Each password below holds a character that a naive split gets wrong; for each,
// the parser must recover it exactly, and an error about the same URL (a bad port) must show the
// user and the host but no part of the password.
TEST(RedisUrl, PasswordsWithReservedCharactersParseAndAreMaskedByOneRule) {
  const std::vector<std::string> passwords = {"se@cret", "a@b@c", "x:y@z", "pa/ss", "p@ss/w:rd", "q?x#y", "@lead",
                                              "trail@"};
  for (const auto& password : passwords) {
    const std::string base = "redis://alice:" + password + "@host";
    const RedisEndpoint e = parse_redis_url(base + ":7000/2");
    EXPECT_EQ(e.user, "alice") << base;
    EXPECT_EQ(e.password, password) << base;
    EXPECT_EQ(e.host, "host") << base;
    EXPECT_EQ(e.port, 7000) << base;
    EXPECT_EQ(e.db, 2) << base;
    try {
      parse_redis_url(base + ":badport");
      FAIL() << "accepted a bad port: " << base;
    } catch (const InvalidArgument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("redis://alice:***@host:badport"), std::string::npos) << message;
      // No fragment of the password of 3 characters or more survives (a shorter one, like "y",
      // could match other text of the message).
      for (std::size_t begin = 0; begin + 3 <= password.size(); ++begin) {
        EXPECT_EQ(message.find(password.substr(begin, 3)), std::string::npos) << password << ": " << message;
      }
    }
  }
}

// The same rule covers a URL whose scheme is unknown or missing: the parser refuses it, and its
// message still hides the password.
TEST(RedisUrl, UnknownOrMissingSchemeStillMasksThePassword) {
  for (const std::string url : {"rediss://bob:Hush@Secret1@host:6379", "bob:Hush@Secret1@host:6379"}) {
    try {
      parse_redis_url(url);
      FAIL() << "accepted " << url;
    } catch (const InvalidArgument& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.find("Hush"), std::string::npos) << message;
      EXPECT_EQ(message.find("Secret1"), std::string::npos) << message;
      EXPECT_NE(message.find("bob:***@host:6379"), std::string::npos) << message;
    }
  }
}

TEST(RedisUrl, PasswordFileIsReadWithoutItsTrailingNewline) {
  test::TempDir dir;
  const std::string path = (dir.path() / "pw").string();
  std::ofstream(path) << "from-file\n";
  EXPECT_EQ(read_password_file(path), "from-file");
  std::ofstream(path, std::ios::trunc) << "\n";
  EXPECT_THROW(read_password_file(path), InvalidArgument);
  EXPECT_THROW(read_password_file((dir.path() / "missing").string()), InvalidArgument);
}

// The password taken out of a URL (for a password file) leaves a URL that names the same server
// and user, and parses without a password; the masked form and the in-place scrub of an argv
// entry find the same password, '@' and ':' in it included.
TEST(RedisUrl, APasswordIsSplitMaskedAndScrubbedByTheSameRule) {
  const auto [without, password] = split_password("redis://bob:Hu:sh@1@db.example:6380/2");
  EXPECT_EQ(without, "redis://bob@db.example:6380/2");
  EXPECT_EQ(password, "Hu:sh@1");
  const RedisEndpoint e = parse_redis_url(without);
  EXPECT_EQ(e.user, "bob");
  EXPECT_FALSE(e.password.has_value());
  EXPECT_EQ(e.port, 6380);
  EXPECT_EQ(e.db, 2);
  EXPECT_EQ(split_password("redis://:pw@h:1").first, "redis://h:1");
  EXPECT_FALSE(split_password("redis://bob@h:1").second.has_value());
  EXPECT_FALSE(split_password("unix:///run/a@b.sock").second.has_value());
  EXPECT_EQ(mask_password("redis://:pw@h:1"), "redis://:***@h:1");

  for (const auto& [arg, shown] : std::vector<std::pair<std::string, std::string>>{
           {"redis://:Secret@h:1", "redis://:******@h:1"},
           {"--redis=rediss://bob:S@c@h", "--redis=rediss://bob:***@h"},
           {"redis://h:1", "redis://h:1"},
           {"--job", "--job"},
           {"unix:///tmp/x@y", "unix:///tmp/x@y"}}) {
    std::string text = arg;
    scrub_password(text.data());
    EXPECT_EQ(text, shown) << arg;
  }
}

// redis+sentinel://: the sentinels (default port 26379, IPv6 in brackets), the master's name and
// the data nodes' credentials and db.
TEST(RedisUrl, SentinelUrlListsTheSentinelsAndTheMasterName) {
  auto e = parse_redis_url("redis+sentinel://s1.example,10.0.0.2:26380,[::1]:5000/mymaster");
  EXPECT_TRUE(e.is_sentinel());
  EXPECT_FALSE(e.is_unix());
  const std::vector<std::pair<std::string, int>> expected = {{"s1.example", 26379}, {"10.0.0.2", 26380}, {"::1", 5000}};
  EXPECT_EQ(e.sentinels, expected);
  EXPECT_EQ(e.master_name, "mymaster");
  EXPECT_EQ(e.db, 0);
  EXPECT_FALSE(e.password);
  EXPECT_FALSE(e.sentinel_password);
  EXPECT_EQ(e.display(), "sentinel 'mymaster' via s1.example:26379,10.0.0.2:26380,[::1]:5000");
  EXPECT_FALSE(parse_redis_url("redis://h:1").is_sentinel());
}

TEST(RedisUrl, SentinelUrlCarriesTheDataNodesCredentialsAndDb) {
  auto e = parse_redis_url("redis+sentinel://alice:p@ss:w/rd@h1:1,h2/hdp/3");
  EXPECT_EQ(e.user, "alice");
  EXPECT_EQ(e.password, "p@ss:w/rd");  // the credentials end at the last '@', as for redis://
  EXPECT_EQ(e.master_name, "hdp");
  EXPECT_EQ(e.db, 3);
  ASSERT_EQ(e.sentinels.size(), 2u);
  EXPECT_EQ(e.sentinels[1], std::make_pair(std::string("h2"), 26379));
  EXPECT_FALSE(e.sentinel_password);  // the sentinels' password never comes from the URL
  EXPECT_EQ(e.display(), "alice@sentinel 'hdp'/3 via h1:1,h2:26379");
  EXPECT_EQ(e.display().find("p@ss"), std::string::npos);
  EXPECT_EQ(parse_redis_url("redis+sentinel://h/hdp/").db, 0);
  EXPECT_EQ(parse_redis_url("redis+sentinel://%61l:x@h/hdp").user, "al");
}

TEST(RedisUrl, MalformedSentinelUrlsAreRejectedWithTheReasonAndNoPassword) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"redis+sentinel://h1,h2", "master name is missing"},
      {"redis+sentinel://h1,h2/", "master name is missing"},
      {"redis+sentinel://h1//2", "master name is missing"},
      {"redis+sentinel:///hdp", "list of sentinels is empty"},
      {"redis+sentinel://u:Secret77@/hdp", "list of sentinels is empty"},
      {"redis+sentinel://h1,,h2/hdp", "entry of the list of sentinels is empty"},
      {"redis+sentinel://h1,/hdp", "entry of the list of sentinels is empty"},
      {"redis+sentinel://,h1/hdp", "entry of the list of sentinels is empty"},
      {"redis+sentinel://h1:0/hdp", "port"},
      {"redis+sentinel://u:Secret77@h1,h2:x/hdp", "port"},
      {"redis+sentinel://h1:70000/hdp", "port"},
      {"redis+sentinel://h1:/hdp", "port"},
      {"redis+sentinel://:26379/hdp", "host is missing"},
      {"redis+sentinel://[::1/hdp", "unterminated"},
      {"redis+sentinel://h1/hdp/x", "database"},
      {"redis+sentinel://u:Secret77@h1/hdp/-1", "database"}};
  for (const auto& [url, reason] : cases) {
    try {
      parse_redis_url(url);
      ADD_FAILURE() << "accepted " << url;
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(reason), std::string::npos) << url << " -> " << message;
      EXPECT_EQ(message.find("Secret77"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST(RedisUrl, SentinelUrlPasswordIsSplitMaskedAndScrubbedByTheSameRule) {
  const std::string url = "redis+sentinel://bob:Hu:sh@1@s1:1,s2:2/hdp/2";
  EXPECT_EQ(mask_password(url), "redis+sentinel://bob:***@s1:1,s2:2/hdp/2");
  const auto [without, password] = split_password(url);
  EXPECT_EQ(without, "redis+sentinel://bob@s1:1,s2:2/hdp/2");
  EXPECT_EQ(password, "Hu:sh@1");
  const RedisEndpoint e = parse_redis_url(without);
  EXPECT_EQ(e.user, "bob");
  EXPECT_FALSE(e.password);
  EXPECT_EQ(e.master_name, "hdp");
  EXPECT_EQ(split_password("redis+sentinel://:pw@s1/hdp").first, "redis+sentinel://s1/hdp");
  for (const auto& [arg, shown] : std::vector<std::pair<std::string, std::string>>{
           {"redis+sentinel://:Secret@s1,s2/hdp", "redis+sentinel://:******@s1,s2/hdp"},
           {"--redis=redis+sentinel://bob:S@c@s1:1/hdp", "--redis=redis+sentinel://bob:***@s1:1/hdp"},
           {"redis+sentinel://s1,s2/hdp", "redis+sentinel://s1,s2/hdp"}}) {
    std::string text = arg;
    scrub_password(text.data());
    EXPECT_EQ(text, shown) << arg;
  }
}

}  // namespace
}  // namespace hdp::elastic
