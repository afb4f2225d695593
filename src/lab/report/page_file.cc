#include "lab/report/page_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "outbox/error.h"

namespace outbox::lab {

namespace {

// Throws ConfigError naming path's folder when it does not exist or is not a folder: the
// temporary file's strerror ("write 'out/x.html.tmp': No such file or directory") names a file
// the user never asked for.
void RequireFolderOf(const std::string& path) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) return;
  std::error_code ec;
  const auto status = std::filesystem::status(folder, ec);
  if (status.type() == std::filesystem::file_type::not_found)
    throw ConfigError(fmt::format("write '{}': the folder '{}' does not exist (create it first: "
                                  "mkdir -p '{}')",
                                  path, folder.string(), folder.string()));
  if (!ec && status.type() != std::filesystem::file_type::directory)
    throw ConfigError(
        fmt::format("write '{}': '{}' is not a folder", path, folder.string()));
}

}  // namespace

void WriteFileAtomically(const std::string& path, const std::string& text) {
  RequireFolderOf(path);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) throw ConfigError(fmt::format("write '{}': {}", tmp, std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    throw ConfigError(fmt::format("write '{}': {}", path, std::strerror(error)));
  }
}

void RequireWritableFile(const std::string& path) {
  RequireFolderOf(path);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ConfigError(fmt::format("write '{}': {}", tmp, std::strerror(errno)));
  }
  std::remove(tmp.c_str());
}

}  // namespace outbox::lab
