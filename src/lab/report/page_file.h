// Writing a page (report --html, bench --html) to disk so that a reader never sees half of it.
// Thread-safety: plain functions; two callers must not write one path at once.
#pragma once

#include <string>

namespace outbox::lab {

// Writes text to path.tmp and renames it over path, so that a reader never
// sees half a page. Throws ConfigError naming the file and strerror, or naming
// its folder when that does not exist.
void WriteFileAtomically(const std::string& path, const std::string& text);

// Checks, before a long measurement or read, that WriteFileAtomically(path, ...)
// can create its temporary file: creates path.tmp and removes it again (path
// itself is not touched). Throws ConfigError "write 'path.tmp': <strerror>"
// as WriteFileAtomically would, e.g. when the directory does not exist or is
// not writable.
void RequireWritableFile(const std::string& path);

}  // namespace outbox::lab
