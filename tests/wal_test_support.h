// Test support for the WAL relay's [postgres] tests: a scratch schema with the outbox tables whose
// replication slot and publication are dropped at the end (a slot left behind would pin the
// shared server's WAL). Needs a server with wal_level=logical (scripts/postgres.sh starts one).
#pragma once

#include <chrono>
#include <string>
#include <thread>

#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/wal_relay.h"
#include "pg_test_support.h"

namespace outbox::testing {

// Polls for what the server does on its own time (a walsender letting go of its slot, a status
// update reaching confirmed_flush_lsn) end as soon as it is done; their bound is only for a
// failing test: 400 tries, 8 to 20 s. 100 tries (2 to 5 s) left little room on the loaded 2-core
// CI machine, where every PostgreSQL test and scenario shares one server.
constexpr int kWalPollTries = 400;

// A PgSchema (prefix_PID_N) holding the outbox tables; slot() is the WAL relay's default slot
// name for it (DefaultWalSlotName), and the publication has the same name.
class WalSchema : public PgSchema {
 public:
  explicit WalSchema(const std::string& prefix) : PgSchema(prefix) {
    PgStore store(url());
    store.ResetSchema();
    pg::Connection sql(url());
    slot_ = DefaultWalSlotName(sql.Query("SELECT current_database()", {}, "db").Text(0, 0), name());
  }
  ~WalSchema() {
    try {
      pg::Connection sql(url());
      // The walsender of a closed stream exits a moment later: wait for the slot to be free.
      for (int i = 0; i < kWalPollTries; ++i) {
        if (sql.Query("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active",
                      {pg::Param::Text(slot_)}, "slot active")
                .rows() == 0)
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      sql.Query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE "
                "slot_name = $1",
                {pg::Param::Text(slot_)}, "drop the slot");
      sql.Exec("DROP PUBLICATION IF EXISTS " + slot_, "drop the publication");
    } catch (...) {  // a destructor must not throw; PgSchema drops the tables anyway
    }
  }
  const std::string& slot() const { return slot_; }

 private:
  std::string slot_;
};

}  // namespace outbox::testing
