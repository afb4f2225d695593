#include "lab/faults/wal_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "outbox/error.h"

namespace outbox::lab {
namespace {

std::uint32_t BigEndian32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::uint32_t LittleEndian32(const unsigned char* p) {
  return (std::uint32_t{p[3]} << 24) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[1]} << 8) |
         std::uint32_t{p[0]};
}

// SQLite's WAL checksum (walChecksumBytes): over 32-bit word pairs, continuing from s.
void Checksum(const unsigned char* data, std::size_t size, bool big_endian, std::uint32_t s[2]) {
  for (std::size_t i = 0; i + 8 <= size; i += 8) {
    const std::uint32_t x0 = big_endian ? BigEndian32(data + i) : LittleEndian32(data + i);
    const std::uint32_t x1 = big_endian ? BigEndian32(data + i + 4) : LittleEndian32(data + i + 4);
    s[0] += x0 + s[1];
    s[1] += x1 + s[0];
  }
}

}  // namespace

WalSummary ReadWalSummary(const std::string& path) {
  WalSummary summary;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    if (error == ENOENT) return summary;
    throw SystemError(fmt::format("read WAL '{}': {}", path, std::strerror(error)), error);
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* data = reinterpret_cast<const unsigned char*>(text.data());
  constexpr std::size_t kHeader = 32, kFrameHeader = 24;
  if (text.size() < kHeader) return summary;
  const std::uint32_t magic = BigEndian32(data);
  if (magic != 0x377f0682 && magic != 0x377f0683) return summary;
  const bool big_endian = (magic & 1) != 0;
  const std::uint32_t page_size = BigEndian32(data + 8);
  if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0) return summary;
  std::uint32_t s[2] = {0, 0};
  Checksum(data, 24, big_endian, s);
  if (s[0] != BigEndian32(data + 24) || s[1] != BigEndian32(data + 28)) return summary;
  summary.present = true;
  summary.salt1 = BigEndian32(data + 16);
  const std::uint32_t salt2 = BigEndian32(data + 20);
  std::int64_t frames = 0, commits = 0;
  for (std::size_t at = kHeader; at + kFrameHeader + page_size <= text.size();
       at += kFrameHeader + page_size) {
    const unsigned char* frame = data + at;
    if (BigEndian32(frame + 8) != summary.salt1 || BigEndian32(frame + 12) != salt2) break;
    Checksum(frame, 8, big_endian, s);
    Checksum(frame + kFrameHeader, page_size, big_endian, s);
    if (s[0] != BigEndian32(frame + 16) || s[1] != BigEndian32(frame + 20)) break;
    ++frames;
    if (BigEndian32(frame + 4) != 0) {  // commit frame: database size after the commit
      ++commits;
      summary.frames = frames;
      summary.commits = commits;
    }
  }
  return summary;
}

}  // namespace outbox::lab
