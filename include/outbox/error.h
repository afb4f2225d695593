// Typed errors of the outbox library.
//
// Every error the library raises derives from outbox::Error. Messages read
// "what we did: on what: why", e.g.
//   open database 'x.db': file is not a database (SQLITE_NOTADB)
// Expected outcomes (a failed delivery, an empty batch) are values, not errors.
#pragma once

#include <stdexcept>
#include <string>

namespace outbox {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An SQLite call failed. code() is the extended SQLite result code
// (https://www.sqlite.org/rescode.html).
class DbError : public Error {
 public:
  DbError(const std::string& message, int sqlite_code)
      : Error(message), code_(sqlite_code) {}
  int code() const noexcept { return code_; }
  // Primary result code (the low byte), e.g. SQLITE_BUSY for SQLITE_BUSY_SNAPSHOT.
  int primary_code() const noexcept { return code_ & 0xff; }

 private:
  int code_;
};

// The database file does not exist or lacks the lab's tables: nothing was
// created or changed; `outbox-lab reset` creates the schema. The message says
// what is missing; the program adds how to reset, in the user's own words
// (the CLI's main: "run `./run.sh -Doutbox.db=... OutboxLab reset` first").
class SchemaMissingError : public Error {
 public:
  using Error::Error;
};

// A librdkafka call failed or the broker could not be reached. code() is the
// rd_kafka_resp_err_t value (negative codes are local to the client).
class KafkaError : public Error {
 public:
  KafkaError(const std::string& message, int rd_kafka_code)
      : Error(message), code_(rd_kafka_code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// An operating-system call failed: inotify, a socket, signalfd, a history or
// address file, fork/exec. The message ends with strerror(errno); errno_value()
// keeps the number (0 when the failure had none, e.g. a short write).
class SystemError : public Error {
 public:
  explicit SystemError(const std::string& message, int errno_value = 0)
      : Error(message), errno_value_(errno_value) {}
  int errno_value() const noexcept { return errno_value_; }

 private:
  int errno_value_;
};

// Throws SystemError "<what>: <strerror(errno_value)>".
[[noreturn]] void ThrowSystemError(const std::string& what, int errno_value);

// Invalid configuration: an unknown or invalid librdkafka property, a bad
// option value.
class ConfigError : public Error {
 public:
  using Error::Error;
};

}  // namespace outbox
