// WalSummary: what SQLite would replay from a write-ahead log file, read with
// the rules of https://www.sqlite.org/fileformat2.html#walformat: a frame is
// valid when its salts match the header and its cumulative checksum is right;
// only frames up to the last valid commit frame count.
#pragma once

#include <cstdint>
#include <string>

namespace outbox::lab {

struct WalSummary {
  bool present = false;         // the file exists with a valid 32-byte header
  std::uint32_t salt1 = 0;      // changes each time the WAL is restarted
  std::int64_t frames = 0;      // valid frames up to and including the last commit frame
  std::int64_t commits = 0;     // commit frames among them: transactions
};

// Reads the WAL at path. A missing or short file, or a bad header, gives
// present = false. Throws SystemError when the file exists but cannot be read.
WalSummary ReadWalSummary(const std::string& path);

}  // namespace outbox::lab
