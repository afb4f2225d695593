#include "outbox/error.h"

#include <fmt/format.h>

#include <cstring>

namespace outbox {

void ThrowSystemError(const std::string& what, int errno_value) {
  throw SystemError(fmt::format("{}: {}", what, std::strerror(errno_value)), errno_value);
}

}  // namespace outbox
