// tests/unit/readme_test.cc - the README stays true for the code: short,
// every registered engine in its engine table (and no other), every path
// of its layout tree and every docs/ path it names present in the source
// tree (PMHASH_SOURCE_DIR).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pmhash/store.h"

namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = PMHASH_SOURCE_DIR;

std::vector<std::string> readme_lines() {
  std::ifstream in(kSourceDir / "README.md");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The lines of the section whose heading is exactly `heading`, up to the
// next heading of the same or a higher level.
std::vector<std::string> section(const std::vector<std::string>& lines, const std::string& heading) {
  std::vector<std::string> out;
  bool inside = false;
  bool in_code = false;
  for (const std::string& line : lines) {
    if (line.rfind("```", 0) == 0) in_code = !in_code;
    if (!in_code && line.rfind("## ", 0) == 0) {
      if (inside) break;
      inside = line == heading;
      continue;
    }
    if (inside) out.push_back(line);
  }
  return out;
}

// The first cell of every body row of the section's markdown table,
// without its backquotes.
std::set<std::string> table_first_column(const std::vector<std::string>& lines) {
  std::set<std::string> names;
  for (const std::string& line : lines) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::size_t end = line.find('`', 3);
    if (end != std::string::npos) names.insert(line.substr(3, end - 3));
  }
  return names;
}

// Every backquoted span of `line` that starts with "docs/".
std::vector<std::string> docs_paths(const std::string& line) {
  std::vector<std::string> out;
  for (std::size_t at = line.find("`docs/"); at != std::string::npos; at = line.find("`docs/", at + 1)) {
    const std::size_t end = line.find('`', at + 1);
    if (end == std::string::npos) break;
    out.push_back(line.substr(at + 1, end - at - 1));
    at = end;
  }
  return out;
}

// The first word of every line inside the section's code block.
std::vector<std::string> tree_paths(const std::vector<std::string>& lines) {
  std::vector<std::string> paths;
  bool in_code = false;
  for (const std::string& line : lines) {
    if (line.rfind("```", 0) == 0) {
      in_code = !in_code;
      continue;
    }
    if (!in_code) continue;
    std::istringstream words(line);
    std::string first;
    if (words >> first) paths.push_back(first);
  }
  return paths;
}

TEST(ReadmeTest, IsAtMost250Lines) {
  const std::vector<std::string> lines = readme_lines();
  ASSERT_FALSE(lines.empty()) << "no README.md under " << kSourceDir;
  EXPECT_LE(lines.size(), 250u) << "README.md grew past 250 lines; move detail into docs/";
}

TEST(ReadmeTest, EngineTableListsExactlyTheRegisteredEngines) {
  const std::set<std::string> table =
      table_first_column(section(readme_lines(), "## Choosing an engine"));
  ASSERT_FALSE(table.empty()) << "README.md has no engine table under '## Choosing an engine'";
  std::set<std::string> registered;
  for (const std::string& e : pmhash::Store::engines()) registered.insert(e);
  for (const std::string& e : pmhash::Store::remote_engines()) registered.insert(e);
  ASSERT_FALSE(registered.empty());
  for (const std::string& e : registered) {
    EXPECT_TRUE(table.count(e)) << "engine '" << e << "' is registered but missing from the README's table";
  }
  for (const std::string& e : table) {
    EXPECT_TRUE(registered.count(e)) << "the README's table names '" << e << "', which is not a registered engine";
  }
}

TEST(ReadmeTest, LayoutTreeNamesOnlyPathsThatExist) {
  const std::vector<std::string> paths = tree_paths(section(readme_lines(), "## Layout"));
  ASSERT_GE(paths.size(), 10u) << "README.md has no layout tree under '## Layout'";
  for (const std::string& p : paths) {
    EXPECT_TRUE(fs::exists(kSourceDir / p)) << "the README's layout tree names '" << p << "', which does not exist";
  }
}

TEST(ReadmeTest, EveryEngineFolderIsInTheLayoutTree) {
  const std::vector<std::string> paths = tree_paths(section(readme_lines(), "## Layout"));
  for (const auto& entry : fs::directory_iterator(kSourceDir / "src/engine")) {
    if (!entry.is_directory()) continue;
    const std::string folder = "src/engine/" + entry.path().filename().string() + "/";
    EXPECT_NE(std::find(paths.begin(), paths.end(), folder), paths.end())
        << folder << " is missing from the README's layout tree";
  }
}

TEST(ReadmeTest, EveryDocsPathItNamesExists) {
  int named = 0;
  for (const std::string& line : readme_lines()) {
    for (const std::string& p : docs_paths(line)) {
      if (p.find('<') != std::string::npos) continue;
      ++named;
      EXPECT_TRUE(fs::exists(kSourceDir / p)) << "README.md names " << p << ", which does not exist";
    }
  }
  EXPECT_GT(named, 0);
}

}  // namespace
