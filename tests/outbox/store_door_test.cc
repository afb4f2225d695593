// The store is the only door into the outbox tables: no source file outside
// src/outbox names outbox, outbox_fence, outbox_archive, outbox_run, outbox_lease or sqlite_sequence
// in SQL. Reads the source tree (OUTBOX_SOURCE_DIR, set by CMake).
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "test_support.h"

namespace {

namespace fs = std::filesystem;

// SQL that reads or writes a table names it after one of these words.
const std::regex& OutboxTableSql() {
  static const std::regex pattern(
      R"x((from|into|update|join|table|exists)\s+(outbox|outbox_fence|outbox_archive|outbox_run|outbox_lease|sqlite_sequence)\b)x",
      std::regex::icase);
  return pattern;
}

// The code of a line without its // comment: comments may name the table.
std::string CodeOf(const std::string& line) {
  const std::size_t comment = line.find("//");
  return comment == std::string::npos ? line : line.substr(0, comment);
}

// "path:line: text" for each line of each .h/.cc file under root, outside
// skip, whose code matches the pattern.
std::vector<std::string> Offenders(const fs::path& root, const fs::path& skip) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    const fs::path& path = entry.path();
    if (path.extension() != ".h" && path.extension() != ".cc") continue;
    if (path.string().rfind(skip.string(), 0) == 0) continue;
    const std::string text = outbox::testing::ReadFileBytes(path);
    std::size_t line = 1;
    std::size_t start = 0;
    while (start < text.size()) {
      const std::size_t end = std::min(text.find('\n', start), text.size());
      const std::string content = text.substr(start, end - start);
      if (std::regex_search(CodeOf(content), OutboxTableSql()))
        found.push_back(fs::relative(path, root).string() + ":" + std::to_string(line) + ": " +
                        content);
      start = end + 1;
      ++line;
    }
  }
  return found;
}

}  // namespace

TEST_CASE("The pattern for SQL on the outbox tables matches what it must and nothing else",
          "[store]") {
  const auto matches = [](const std::string& line) {
    return std::regex_search(line, OutboxTableSql());
  };
  CHECK(matches(R"x(auto s = db.Prepare("SELECT event_id FROM outbox ORDER BY id");)x"));
  CHECK(matches(R"x("INSERT INTO outbox(event_id) VALUES(?1)")x"));
  CHECK(matches(R"x("UPDATE  outbox SET published = 1")x"));
  CHECK(matches(R"x("select count(*) from outbox_archive")x"));
  CHECK(matches(R"x("SELECT run_id FROM outbox_run WHERE id = 1")x"));
  CHECK(matches(R"x("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'")x"));
  CHECK_FALSE(matches(R"x("SELECT loan_id FROM business_loan")x"));
  CHECK_FALSE(matches(CodeOf("  int deleted = 0;  // published rows removed from outbox")));
  CHECK_FALSE(matches(R"x("SELECT 1 FROM outboxes")x"));
}

TEST_CASE("No source file outside src/outbox runs SQL on the outbox tables", "[store]") {
  const fs::path root = OUTBOX_SOURCE_DIR;
  REQUIRE(fs::is_directory(root / "src" / "outbox"));
  std::vector<std::string> offenders;
  for (const char* dir : {"src", "include"}) {
    const auto found = Offenders(root / dir, root / "src" / "outbox");
    offenders.insert(offenders.end(), found.begin(), found.end());
  }
  INFO("SQL on the outbox tables belongs in src/outbox (sqlite_store/, pg_store/); ask the Store instead");
  CHECK(offenders == std::vector<std::string>{});
}
