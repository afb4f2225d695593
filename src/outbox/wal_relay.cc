#include "outbox/wal_relay.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include "outbox/failpoint.h"
#include "outbox/per_row_relay.h"
#include "outbox/record_headers.h"

namespace outbox {
namespace {

bool ValidSlotName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// verify, check and status peek at an inactive slot (pg_logical_slot_peek_binary_changes),
// which holds it for that one statement. A relay starting meanwhile waits this long for it, in
// steps of kPeekStep, before it calls the slot busy. A walsender is another WAL relay: no wait.
constexpr int kPeekSteps = 250;
constexpr std::chrono::milliseconds kPeekStep{20};

// True when a walsender (a WAL relay's stream) holds the slot; false when nothing does, or an
// ordinary backend does (a peek).
bool HeldByWalsender(pg::Connection& sql, const std::string& slot) {
  return sql.QueryInt("SELECT count(*) FROM pg_replication_slots s JOIN pg_stat_activity a ON "
                      "a.pid = s.active_pid WHERE s.slot_name = $1 AND a.backend_type = "
                      "'walsender'",
                      {pg::Param::Text(slot)}, "look for the slot's walsender") > 0;
}

// Records the outbox's unpublished rows as ones the slot will never stream (table
// outbox_wal_unstreamed), so that verify, check and status count them pending for the polling
// relay instead of confirmed by the slot (WalProgress). Run right after the slot is created (rows
// committed before it) or the outbox is added back to the publication. A row committed between
// that and this read is streamed and recorded too: it then stays pending to the readers until
// the polling relay sends it once more (a duplicate, never a loss). The table goes with the
// outbox at a reset (its ids are the outbox's): created here in the insert's own transaction, so
// a reset that runs meanwhile drops it before or after, never between.
void RecordUnstreamed(pg::Connection& sql) {
  sql.Exec("CREATE TABLE IF NOT EXISTS outbox_wal_unstreamed (id bigint PRIMARY KEY); "
           "INSERT INTO outbox_wal_unstreamed SELECT id FROM outbox WHERE NOT published "
           "ON CONFLICT DO NOTHING",
           "record the rows the slot does not stream");
}

// Records slot as this schema's WAL relay slot (table outbox_wal_slot, which a reset keeps, as
// it keeps the slots), so that verify, check and status read the slot a relay --source wal
// --slot NAME streams, not the default name.
void RecordSlot(pg::Connection& sql, const std::string& slot) {
  sql.Exec("CREATE TABLE IF NOT EXISTS outbox_wal_slot (slot text PRIMARY KEY, "
           "recorded_at timestamptz NOT NULL DEFAULT clock_timestamp())",
           "create the table of WAL relay slots");
  sql.Query("INSERT INTO outbox_wal_slot(slot) VALUES ($1) ON CONFLICT (slot) DO UPDATE SET "
            "recorded_at = clock_timestamp()",
            {pg::Param::Text(slot)}, "record the WAL relay's slot");
}

pg::Lsn QueryLsn(pg::Connection& sql, const std::string& query, const std::string& what) {
  const pg::Result result = sql.Query(query, {}, what);
  if (result.rows() == 0 || result.IsNull(0, 0)) return 0;
  const auto lsn = pg::ParseLsn(result.Text(0, 0));
  if (!lsn) throw pg::PgError(fmt::format("{}: not an LSN: '{}'", what, result.Text(0, 0)), "");
  return *lsn;
}

}  // namespace

std::string DefaultWalSlotName(const std::string& database, const std::string& schema) {
  std::string name = "outbox_wal_" + database + "_" + schema;
  for (char& c : name) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) c = '_';
  }
  if (name.size() > 63) name.resize(63);
  return name;
}

WalRelay::WalRelay(std::string url, OutboxStore& store, Publisher& publisher, WalRelayOptions options)
    : url_(std::move(url)), store_(store), publisher_(publisher), options_(std::move(options)) {
  if (options_.batch_size < 1)
    throw ConfigError(fmt::format("batch size {}: must be at least 1", options_.batch_size));
  if (options_.wait_ms < 1)
    throw ConfigError(fmt::format("wait {} ms: must be at least 1 ms", options_.wait_ms));
  if (options_.max_attempts < 1)
    throw ConfigError(fmt::format("max attempts {}: must be at least 1", options_.max_attempts));
  if (!options_.slot.empty() && !ValidSlotName(options_.slot))
    throw ConfigError(fmt::format("slot name '{}': PostgreSQL allows only lower-case letters, "
                                  "digits and '_', 1 to 63 of them",
                                  options_.slot));
}

WalRelay::~WalRelay() = default;

// pg_advisory_lock(key1, key2)'s first key for a WAL relay's setup; the second is the slot
// name's hashtext. Any fixed int4 ("outb" in ASCII).
constexpr std::int64_t kWalSetupLockKey = 0x6f757462;

WalOpenReport WalRelay::Open() {
  stream_.reset();
  batch_failed_ = false;
  open_.reset();
  ready_.clear();
  relations_.clear();
  keepalive_end_ = 0;
  sql_ = std::make_unique<pg::Connection>(url_);
  pg::Connection& sql = *sql_;
  WalOpenReport report;

  const pg::Result settings = sql.Query(
      "SELECT current_setting('wal_level'), current_database(), current_schema()", {},
      "read wal_level");
  if (settings.Text(0, 0) != "logical")
    throw WalRelayError(
        WalRelayError::Kind::kWalLevel,
        fmt::format("relay --source wal: the server runs with wal_level={}; logical decoding needs "
                    "wal_level=logical (postgresql.conf or -c wal_level=logical, then a restart; "
                    "scripts/postgres.sh starts its clusters so)",
                    settings.Text(0, 0)));
  if (settings.IsNull(0, 2))
    throw ConfigError("relay --source wal: no current schema (the search_path names no existing "
                      "schema); run reset first");
  const std::string schema = settings.Text(0, 2);
  slot_ = options_.slot.empty() ? DefaultWalSlotName(settings.Text(0, 1), schema) : options_.slot;
  report.slot = slot_;
  report.publication = slot_;
  // Two relays started at once would both find nothing and race to create the publication and
  // the slot: the loser failed on the catalog's unique index (exit 11), or found the publication
  // the winner had just made without its slot yet and called the slot dropped. The look, the
  // creation and the stream's start run under a session advisory lock of the slot's name, so
  // the second relay finds the first one's slot active (exit 24).
  sql.Query("SELECT pg_advisory_lock($1::int, hashtext($2))",
            {pg::Param::Int(kWalSetupLockKey), pg::Param::Text(slot_)}, "lock the slot's setup");
  struct SetupUnlock {
    pg::Connection& sql;
    const std::string& slot;
    ~SetupUnlock() {
      try {
        sql.Query("SELECT pg_advisory_unlock($1::int, hashtext($2))",
                  {pg::Param::Int(kWalSetupLockKey), pg::Param::Text(slot)},
                  "unlock the slot's setup");
      } catch (const std::exception&) {
        // A lost connection ended the session, and its lock with it.
      }
    }
  } unlock_setup{sql, slot_};

  // The publication first: pgoutput reads it with the catalog as of each change, so it must
  // exist before the slot's first change.
  const bool publication_exists =
      sql.Query("SELECT 1 FROM pg_publication WHERE pubname = $1", {pg::Param::Text(slot_)},
                "look for the publication")
          .rows() > 0;
  if (!publication_exists) {
    try {
      sql.Exec(fmt::format("CREATE PUBLICATION {} FOR TABLE outbox, outbox_run",
                           sql.QuoteIdentifier(slot_)),
               "create the publication");
      report.created_publication = true;
    } catch (const pg::PgError& e) {
      if (e.sqlstate() != "42710") throw;  // duplicate_object: another relay created it just now
    }
  } else {
    // outbox_run is missing from a publication an older outbox-lab created. The outbox is
    // missing after a reset by an older outbox-lab, which took it out of the publication (a reset
    // now lists the new tables in its own transaction): the rows committed since are not in the
    // slot's stream, whatever is added now.
    const auto listed = [&sql, this](const char* table) {
      return sql.Query("SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND "
                       "schemaname = current_schema() AND tablename = $2",
                       {pg::Param::Text(slot_), pg::Param::Text(table)},
                       "look for the outbox in the publication")
                 .rows() > 0;
    };
    for (const char* table : {"outbox", "outbox_run"}) {
      if (listed(table)) continue;
      sql.Exec(fmt::format("ALTER PUBLICATION {} ADD TABLE {}", sql.QuoteIdentifier(slot_), table),
               "add the outbox to the publication");
      if (std::string(table) == "outbox") {
        report.unstreamed =
            sql.QueryInt("SELECT count(*) FROM outbox", {}, "count the rows not streamed");
        RecordUnstreamed(sql);
      }
    }
  }

  const auto read_slot = [&sql, this]() {
    return sql.Query(
        "SELECT plugin, database, COALESCE(wal_status, ''), active, COALESCE(active_pid, 0), "
        "COALESCE(confirmed_flush_lsn::text, '') FROM pg_replication_slots WHERE slot_name = $1",
        {pg::Param::Text(slot_)}, "look for the replication slot");
  };
  pg::Result slot = read_slot();
  for (int step = 0; step < kPeekSteps && slot.rows() > 0 && slot.Text(0, 3) == "t" &&
                     !HeldByWalsender(sql, slot_);
       ++step) {
    std::this_thread::sleep_for(kPeekStep);
    slot = read_slot();
  }
  if (slot.rows() == 0) {
    if (publication_exists)
      throw WalRelayError(
          WalRelayError::Kind::kSlotLost,
          fmt::format("relay --source wal: the replication slot '{}' is gone (dropped) but its "
                      "publication exists: changes since its last confirmed LSN may not be "
                      "streamed any more; resync: run the polling relay (relay --until-empty) "
                      "for the unmarked rows, then DROP PUBLICATION {} and start relay --source "
                      "wal again (docs/wal-relay.md)",
                      slot_, slot_));
    try {
      sql.Query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                {pg::Param::Text(slot_)}, "create the replication slot");
      report.created_slot = true;
    } catch (const pg::PgError& e) {
      if (e.sqlstate() != "42710") throw;
    }
    if (report.created_slot) {
      report.unpublished_at_creation =
          sql.QueryInt("SELECT count(*) FROM outbox WHERE NOT published", {},
                       "count the rows older than the slot");
      RecordUnstreamed(sql);
    }
  } else {
    if (slot.Text(0, 0) != "pgoutput" || slot.Text(0, 1) != settings.Text(0, 1))
      throw WalRelayError(
          WalRelayError::Kind::kSlotMismatch,
          fmt::format("relay --source wal: the replication slot '{}' exists with plugin '{}' on "
                      "database '{}', not pgoutput on '{}'; name another with --slot",
                      slot_, slot.Text(0, 0), slot.IsNull(0, 1) ? "" : slot.Text(0, 1),
                      settings.Text(0, 1)));
    if (slot.Text(0, 2) == "lost")
      throw WalRelayError(
          WalRelayError::Kind::kSlotLost,
          fmt::format("relay --source wal: the replication slot '{}' was invalidated (wal_status "
                      "lost: it fell more than max_slot_wal_keep_size behind); the WAL past its "
                      "LSN {} is gone; resync: run the polling relay (relay --until-empty) for "
                      "the unmarked rows, then SELECT pg_drop_replication_slot('{}'), DROP "
                      "PUBLICATION {} and start relay --source wal again (docs/wal-relay.md)",
                      slot_, slot.Text(0, 5), slot_, slot_));
    if (slot.Text(0, 3) == "t")
      throw WalRelayError(
          WalRelayError::Kind::kSlotActive,
          fmt::format("relay --source wal: refused: the replication slot '{}' is active for PID "
                      "{}: another WAL relay streams it, and a slot has one reader at a time",
                      slot_, slot.Text(0, 4)));
  }

  RecordSlot(sql, slot_);
  // Rows the slot never streams wait for the polling relay; a later row of one of their
  // aggregates streamed first would reach the topic before them (a reordered aggregate). So
  // nothing is streamed until they are published; the rows committed meanwhile wait in the slot.
  std::int64_t older_count = 0, older_first = 0;
  try {
    const pg::Result older = sql.Query(
        "SELECT count(*), COALESCE(min(o.id), 0) FROM outbox_wal_unstreamed u JOIN outbox o "
        "ON o.id = u.id WHERE NOT o.published",
        {}, "count the unpublished rows the slot does not stream");
    older_count = older.Int(0, 0);
    older_first = older.Int(0, 1);
  } catch (const pg::PgError& e) {
    if (e.sqlstate() != "42P01") throw;  // undefined_table: none recorded, or a reset dropped it
  }
  if (older_count > 0)
    throw WalRelayError(
        WalRelayError::Kind::kOlderRows,
        fmt::format("relay --source wal: refused: {} unpublished rows (the first: outbox id {}) "
                    "were committed before the slot '{}' streamed the outbox, so it will never "
                    "stream them, and streaming later rows of their aggregates first would "
                    "reorder them; send them with the polling relay (relay --until-empty), then "
                    "start relay --source wal again (the rows committed meanwhile wait in the "
                    "slot)",
                    older_count, older_first, slot_));
  report.confirmed = QueryLsn(
      sql, fmt::format("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE "
                       "slot_name = '{}'",
                       slot_),
      "read the slot's confirmed LSN");
  report.wal_at_open = QueryLsn(sql, "SELECT pg_current_wal_lsn()::text", "read the WAL position");
  // The walsender reads only flushed WAL, and pg_current_wal_lsn() may lie inside a record that
  // no one flushes yet (another session's, idle in its transaction): CaughtUp would then wait
  // for the server's next snapshot record, 15 s on an idle server. A commit flushes the WAL
  // before it only when its transaction wrote WAL and synchronous_commit is on (an xid alone is
  // an asynchronous commit: https://www.postgresql.org/docs/15/wal-async-commit.html), so the
  // transaction writes one transactional logical message, which pgoutput does not send unless
  // asked for messages (https://www.postgresql.org/docs/15/protocol-logical-replication.html).
  sql.Exec("BEGIN; SET LOCAL synchronous_commit = on; "
           "SELECT pg_logical_emit_message(true, 'outbox-relay', 'flush'); COMMIT",
           "flush the WAL up to the position read");
  confirmed_ = report.confirmed;
  wal_at_open_ = report.wal_at_open;
  // The run and its outbox table in one snapshot, before the stream starts: a reset that commits
  // after it commits past the confirmed position, so it is in the stream, in its place.
  if (!opened_) {
    const pg::Result run = sql.Query(
        "SELECT to_regclass('outbox')::oid::bigint, (SELECT run_id FROM outbox_run LIMIT 1)", {},
        "read the run id");
    open_outbox_oid_ = run.IsNull(0, 0) ? 0 : static_cast<std::uint32_t>(run.Int(0, 0));
    open_run_id_ = run.IsNull(0, 1) ? std::string() : run.Text(0, 1);
    opened_ = true;
  }
  // A transaction is streamed again only if it commits past the confirmed position, so the
  // resets at or before it are behind: the run is the last of them, and every outbox insert
  // after it in commit order is of that run until the next reset in the stream.
  run_id_ = open_run_id_;
  outbox_oid_ = open_outbox_oid_;
  for (const RunAt& seen : runs_seen_) {
    if (seen.end_lsn > confirmed_) break;
    run_id_ = seen.run;
    outbox_oid_ = 0;
  }
  dropped_ = 0;
  streamed_open_outbox_ = false;

  for (int step = 0;; ++step) {
    stream_ = std::make_unique<pg::ReplicationStream>(url_);
    try {
      stream_->Start(slot_, slot_);
      break;
    } catch (const pg::PgError& e) {
      // object_in_use: "replication slot ... is active for PID n". A peek that took the slot
      // after the look above is waited out; another walsender is not.
      if (e.sqlstate() == "55006" && step < kPeekSteps && !HeldByWalsender(sql, slot_)) {
        std::this_thread::sleep_for(kPeekStep);
        continue;
      }
      if (e.sqlstate() == "55006")
        throw WalRelayError(WalRelayError::Kind::kSlotActive,
                            fmt::format("relay --source wal: refused: {}: another WAL relay streams "
                                        "it, and a slot has one reader at a time",
                                        e.what()));
      if (e.sqlstate() == "42704")
        throw WalRelayError(WalRelayError::Kind::kSlotLost,
                            fmt::format("relay --source wal: {} (dropped while this relay started); "
                                        "resync as docs/wal-relay.md says",
                                        e.what()));
      throw;
    }
  }
  report.walsender_pid = stream_->backend_pid();
  return report;
}

void WalRelay::OnInsert(const pg::PgoutputInsert& insert) {
  const auto found = relations_.find(insert.relation_oid);
  if (found == relations_.end())
    throw pg::DecodeError(fmt::format("decode pgoutput 'I' message: relation oid {} was not "
                                      "described by a Relation message",
                                      insert.relation_oid));
  const OutboxColumns& columns = found->second;
  if (columns.is_run && open_) return OnNewRun(insert, columns);
  if (!columns.is_outbox || !open_) return;
  if (outbox_oid_ != 0 && insert.relation_oid != outbox_oid_) {
    // A row of an outbox that a reset dropped before Open: its run is not known, and the reset
    // meant it gone.
    ++dropped_;
    return;
  }
  streamed_open_outbox_ = true;
  const auto text = [&](int index, const char* name, std::string& out) -> std::string {
    if (index < 0 || static_cast<std::size_t>(index) >= insert.values.size())
      return fmt::format("column {} is missing", name);
    const pg::TupleValue& value = insert.values[static_cast<std::size_t>(index)];
    if (value.kind != pg::TupleValue::Kind::kText)
      return fmt::format("column {} is {}", name,
                         value.kind == pg::TupleValue::Kind::kNull ? "NULL" : "not text");
    out = value.bytes;
    return {};
  };
  std::string id_text;
  std::int64_t id = 0;
  std::string why = text(columns.id, "id", id_text);
  if (why.empty()) {
    const auto [end, error] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (error != std::errc() || end != id_text.data() + id_text.size())
      why = fmt::format("column id is not an integer ({} bytes)", id_text.size());
  }
  OutboxRow row;
  row.id = id;
  std::string payload_text;
  if (why.empty()) why = text(columns.event_id, "event_id", row.event.event_id);
  if (why.empty()) why = text(columns.aggregate_id, "aggregate_id", row.event.aggregate_id);
  if (why.empty()) why = text(columns.event_type, "event_type", row.event.event_type);
  if (why.empty()) why = text(columns.payload, "payload", payload_text);
  if (why.empty()) {
    try {
      row.event.payload = pg::DecodeHexBytea(payload_text, "payload");
    } catch (const pg::DecodeError& e) {
      why = e.what();
    }
  }
  ParsedHeaders headers;
  if (why.empty() && columns.headers >= 0 &&
      static_cast<std::size_t>(columns.headers) < insert.values.size() &&
      insert.values[static_cast<std::size_t>(columns.headers)].kind == pg::TupleValue::Kind::kText) {
    headers = ParseRecordHeaders(insert.values[static_cast<std::size_t>(columns.headers)].bytes);
    if (!headers.ok()) why = headers.error;
  }
  if (!why.empty()) {
    if (options_.on_skipped) options_.on_skipped(id, why);
    ++skipped_in_batch_;
    return;
  }
  OutboundMessage message = MessageForRow(row);
  message.headers = std::move(headers.headers);
  message.run_id = run_id_;
  if (options_.key == KeyChoice::kAggregateId) message.key = row.event.aggregate_id;
  open_->messages.push_back(std::move(message));
  open_->aggregates.push_back(std::move(row.event.aggregate_id));
}

void WalRelay::OnNewRun(const pg::PgoutputInsert& insert, const OutboxColumns& columns) {
  // A reset's transaction: the outbox and outbox_run dropped and created, and the new run id
  // inserted (PgStore::ResetSchema). An outbox insert commits before the reset's DROP or after
  // its commit, so in commit order every outbox insert after this one is of the new run, and
  // every one before it of an older run: each record carries the run its row was written in.
  std::string run;
  const std::size_t index = static_cast<std::size_t>(columns.run_id);
  if (columns.run_id >= 0 && index < insert.values.size() &&
      insert.values[index].kind == pg::TupleValue::Kind::kText)
    run = insert.values[index].bytes;
  else
    run = store_.RunId();
  // Before the first reset in the stream, the run read at Open is known to have ended here only
  // if a row of its outbox came before: else this may be the reset that began it.
  const bool previous_known = outbox_oid_ == 0 || streamed_open_outbox_;
  if (options_.on_new_run) options_.on_new_run(previous_known ? run_id_ : "", run, dropped_);
  open_->new_run = run;
  run_id_ = std::move(run);
  outbox_oid_ = 0;
  dropped_ = 0;
}

void WalRelay::Handle(const pg::PgoutputMessage& message, std::int64_t& records) {
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, pg::PgoutputBegin>) {
          open_ = Transaction{};
        } else if constexpr (std::is_same_v<T, pg::PgoutputCommit>) {
          if (!open_)
            throw pg::DecodeError("decode pgoutput 'C' message: a commit without its begin");
          open_->end_lsn = m.end_lsn;
          // Streamed again after a reconnect, a reset already seen is not noted twice.
          if (open_->new_run && (runs_seen_.empty() || runs_seen_.back().end_lsn < m.end_lsn))
            runs_seen_.push_back({m.end_lsn, *open_->new_run});
          records += static_cast<std::int64_t>(open_->messages.size());
          ready_.push_back(std::move(*open_));
          open_.reset();
        } else if constexpr (std::is_same_v<T, pg::PgoutputRelation>) {
          OutboxColumns columns;
          columns.is_outbox = m.name == "outbox";
          columns.is_run = m.name == "outbox_run";
          for (std::size_t i = 0; i < m.columns.size(); ++i) {
            const std::string& name = m.columns[i].name;
            const int index = static_cast<int>(i);
            if (name == "id") columns.id = index;
            else if (name == "event_id") columns.event_id = index;
            else if (name == "aggregate_id") columns.aggregate_id = index;
            else if (name == "event_type") columns.event_type = index;
            else if (name == "payload") columns.payload = index;
            else if (name == "headers") columns.headers = index;
            else if (name == "run_id") columns.run_id = index;
          }
          relations_[m.oid] = columns;
        } else if constexpr (std::is_same_v<T, pg::PgoutputInsert>) {
          OnInsert(m);
        }
      },
      message);
}

void WalRelay::Wait(std::int64_t ms) {
  // Sleep in slices, answering the server meanwhile: a walsender that hears nothing for
  // wal_sender_timeout (60 s by default) ends the connection.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    if (options_.stop_requested && options_.stop_requested()) return;
    stream_->SendStatus(confirmed_, false);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(left, std::chrono::milliseconds(1000)));
  }
}

WalBatchReport WalRelay::RunBatch() {
  if (!stream_) throw std::logic_error("WalRelay::RunBatch before Open");
  if (batch_failed_)
    throw std::logic_error("WalRelay::RunBatch after a batch failed: call Open() again, which "
                           "streams the unconfirmed commits again");
  WalBatchReport report;
  skipped_in_batch_ = 0;
  std::int64_t records = 0;
  const auto start = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> first_commit;
  bool asked = false;
  const auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
        .count();
  };
  for (;;) {
    const bool have = !ready_.empty();
    if (have && !first_commit) first_commit = std::chrono::steady_clock::now();
    const std::int64_t waited = ms_since(start);
    // Inside a transaction, wait for its end (pgoutput v1 sends a transaction whole, at its
    // commit). With commits in hand, take what has already arrived, and wait up to linger_ms
    // from the first commit for the batch to fill. With none, wait up to wait_ms.
    std::int64_t timeout = 0;
    if (open_) timeout = 100;
    else if (!have) timeout = std::clamp<std::int64_t>(options_.wait_ms - waited, 0, 100);
    else if (records < options_.batch_size)
      timeout = std::clamp<std::int64_t>(options_.linger_ms - ms_since(*first_commit), 0, 100);
    if (!have && !open_ && waited >= options_.wait_ms) break;
    if (options_.stop_requested && !open_ && options_.stop_requested()) break;
    const pg::StreamMessage message = stream_->Receive(static_cast<int>(timeout));
    if (message.kind == pg::StreamMessage::Kind::kNone) {
      if (have && !open_ && (records >= options_.batch_size || ms_since(*first_commit) >= options_.linger_ms))
        break;
      if (!have && !open_ && !asked) {
        // Idle: ask the server where it is; its keepalive's wal_end tells CaughtUp.
        stream_->SendStatus(confirmed_, true);
        asked = true;
      }
      continue;
    }
    if (message.kind == pg::StreamMessage::Kind::kKeepalive) {
      keepalive_end_ = message.wal_end;
      if (!have && !open_) {
        // Nothing received and unconfirmed: everything the server decoded up to wal_end is
        // confirmed (no outbox insert commits before it), so the slot does not pin that WAL.
        if (message.wal_end > confirmed_) confirmed_ = message.wal_end;
        stream_->SendStatus(confirmed_, false);
      } else if (message.reply_requested) {
        stream_->SendStatus(confirmed_, false);
      }
      continue;
    }
    Handle(pg::DecodePgoutput(message.data), records);
    if (!open_ && records >= options_.batch_size) break;
  }
  report.skipped = skipped_in_batch_;
  if (ready_.empty()) {
    report.idle = true;
    report.confirmed = confirmed_;
    return report;
  }
  // From here until the confirm, an exception leaves this batch unconfirmed: streaming on would
  // confirm past it with the next batch (a loss), so only Open may go on.
  batch_failed_ = true;
  // Received, nothing produced: the server sends these commits again after a crash here.
  HitFailpoint("relay.wal.after_receive");
  std::vector<OutboundMessage> messages;
  std::vector<std::string> aggregates;
  for (Transaction& txn : ready_) {
    for (OutboundMessage& m : txn.messages) messages.push_back(std::move(m));
    for (std::string& a : txn.aggregates) aggregates.push_back(std::move(a));
  }
  Publish(std::move(messages), aggregates, report);
  // Every record acknowledged, nothing confirmed: a crash here re-sends the whole batch.
  HitFailpoint("relay.wal.after_ack_before_confirm");
  confirmed_ = std::max(confirmed_, ready_.back().end_lsn);
  report.transactions = static_cast<std::int64_t>(ready_.size());
  ready_.clear();
  batch_failed_ = false;
  stream_->SendStatus(confirmed_, false);
  report.confirmed = confirmed_;
  return report;
}

bool WalRelay::CaughtUp() const {
  if (open_ || !ready_.empty()) return false;
  // A keepalive's wal_end is how far the walsender has read, and it sends every commit it read
  // before the keepalive. Only that proves a catch-up. Two idle keepalives with one wal_end do
  // not: a walsender stalled across two idle batches answers both questions at once, from where
  // it stalled. pg_current_wal_lsn() at Open is the end of a record or lies inside one; Open
  // then commits a transaction of its own, which flushes the WAL past it, so the walsender reads
  // past it.
  return keepalive_end_ >= wal_at_open_ && confirmed_ >= wal_at_open_;
}

}  // namespace outbox
