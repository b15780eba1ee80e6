// The exit codes are defined once (cli/exit_codes.h); the tables users read (docs/errors.md and
// the systemd/Slurm table of docs/deploy.md) must list exactly those codes with the same meaning.
#include "cli/exit_codes.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

namespace hdp::cli {
namespace {

std::string read_doc(const std::string& name) {
  std::ifstream in(std::string(HDP_SOURCE_DIR) + "/docs/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The rows "| <code> | <first cell> |..." of the first table after `heading`.
std::map<int, std::string> exit_table(const std::string& doc, const std::string& heading) {
  std::map<int, std::string> rows;
  const auto at = doc.find(heading);
  if (at == std::string::npos) return rows;
  std::istringstream lines(doc.substr(at + heading.size()));
  static const std::regex row(R"(^\| (\d+) \| ([^|]*)\|)");
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("|")) {
      in_table = true;
      if (std::smatch m; std::regex_search(line, m, row)) rows[std::stoi(m[1])] = m[2];
    } else if (in_table) {
      break;
    } else if (line.starts_with("#")) {
      break;  // the next section, no table
    }
  }
  return rows;
}

const std::map<int, std::string> kExpected = {{kExitOk, "success"},
                                              {kExitFailure, "runtime failure"},
                                              {kExitUsage, "usage error"},
                                              {kExitJobFailed, "job failed permanently"},
                                              {kExitDrained, "drained"},
                                              {kExitRefused, "refused by the running job"}};

TEST(ExitCodes, ErrorsDocListsExactlyTheCodesOfTheHeader) {
  const auto table = exit_table(read_doc("errors.md"), "## Exit codes of `hdp`");
  ASSERT_EQ(table.size(), kExpected.size()) << "docs/errors.md's exit code table";
  for (const auto& [code, meaning] : kExpected) {
    ASSERT_TRUE(table.count(code)) << "docs/errors.md lacks exit code " << code;
    EXPECT_NE(table.at(code).find(meaning), std::string::npos) << code << ": " << table.at(code);
  }
  // An agent refused for a node id held by a live agent is an agent error (1), which systemd and
  // Slurm retry, not a usage error (issue 13, defect 12).
  EXPECT_NE(table.at(kExitFailure).find("node id held by another live agent"), std::string::npos)
      << table.at(kExitFailure);
}

TEST(ExitCodes, DeployDocListsExactlyTheCodesOfTheHeader) {
  const auto table = exit_table(read_doc("deploy.md"), "### Exit codes");
  ASSERT_EQ(table.size(), kExpected.size()) << "docs/deploy.md's exit code table";
  for (const auto& [code, meaning] : kExpected) EXPECT_TRUE(table.count(code)) << "docs/deploy.md lacks " << code;
  EXPECT_NE(table.at(kExitFailure).find("node id held by another live agent"), std::string::npos)
      << table.at(kExitFailure);
}

}  // namespace
}  // namespace hdp::cli
