// Typed errors of the outbox library.
//
// Every error the library raises derives from outbox::Error. Messages read
// "what we did: on what: why", e.g.
//   open database 'x.db': file is not a database (SQLITE_NOTADB)
// Expected outcomes (a failed delivery, an empty batch) are values, not errors.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace outbox {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An SQLite call failed. code() is the extended SQLite result code
// (https://www.sqlite.org/rescode.html).
class DbError : public Error {
 public:
  // reason: SQLite's own words for the problem (sqlite3_errmsg), without what
  // we did; empty means the message is all there is.
  DbError(const std::string& message, int sqlite_code, std::string reason = {})
      : Error(message), code_(sqlite_code), reason_(std::move(reason)) {}
  int code() const noexcept { return code_; }
  // SQLite's words, e.g. "database is locked"; what() when none were given.
  const std::string& reason() const noexcept { return reason_.empty() ? message_ : reason_; }
  // Primary result code (the low byte), e.g. SQLITE_BUSY for SQLITE_BUSY_SNAPSHOT.
  int primary_code() const noexcept { return code_ & 0xff; }

 private:
  int code_;
  std::string reason_;
  std::string message_ = what();
};

// The database file does not exist or lacks the lab's tables: nothing was
// created or changed; `outbox-lab reset` creates the schema. The message says
// what is missing; the program adds how to reset, in the user's own words
// (the CLI's main: "run `./run.sh -Doutbox.db=... OutboxLab reset` first").
class SchemaMissingError : public Error {
 public:
  using Error::Error;
};

// KafkaError::code() of a producer that hit a fatal error (RD_KAFKA_RESP_ERR__FATAL): it can
// send nothing more, and the relay stops (Relay::FinishBatch).
inline constexpr int kProducerFatalCode = -150;

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
