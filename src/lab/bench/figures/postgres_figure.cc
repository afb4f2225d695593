// The relay pair and the write path on PostgreSQL (issue 12 item 7), measured as their SQLite
// namesakes (throughput_figure.cc, write_path_figure.cc) so the two columns of `bench` compare.
#include <fmt/format.h>
#include <libpq-fe.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string_view>
#include <utility>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "lab/broker/subprocess.h"
#include "lab/chapter/loans.h"
#include "outbox/error.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/open_store.h"
#include "outbox/per_row_relay.h"
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/relay.h"

namespace outbox::lab::bench {
namespace {

struct ConninfoFree {
  void operator()(PQconninfoOption* options) const noexcept { PQconninfoFree(options); }
};
struct PqFree {
  void operator()(char* memory) const noexcept { PQfreemem(memory); }
};

}  // namespace

// The bench puts its schemas first in search_path through the URL's options=, which would
// replace the user's own options= (libpq keeps the last): refuse such a URL instead of silently
// measuring under other settings. libpq parses the URL (PQconninfoParse).
void RequirePostgresBenchUrl(const std::string& url) {
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, ConninfoFree> parsed(PQconninfoParse(url.c_str(), &error));
  std::unique_ptr<char, PqFree> error_owner(error);
  if (!parsed)
    throw ConfigError(fmt::format("bench --db '{}': {}", pg::RedactPassword(url),
                                  error ? std::string_view(error) : "not a connection URL"));
  for (const PQconninfoOption* option = parsed.get(); option->keyword != nullptr; ++option) {
    if (std::string_view(option->keyword) == "options" && option->val && *option->val)
      throw ConfigError(fmt::format(
          "bench --db '{}': the URL has options= of its own; bench sets search_path there for "
          "its schemas, so give the URL without options (set the server's defaults with ALTER "
          "DATABASE ... SET instead)",
          pg::RedactPassword(url)));
  }
  pg::Connection probe(url);  // an unreachable server fails now, not after the SQLite figures
}

namespace {

// A schema of the bench's own in the URL's database, dropped with everything in it on scope exit;
// url() connects with it as the search_path, so the lab's tables land there. The name is ours
// (outbox_bench_PID_SUFFIX), quoted anyway: DDL takes no parameters.
class ScratchSchema {
 public:
  ScratchSchema(pg::Connection& admin, const std::string& base_url, std::string_view suffix)
      : admin_(admin), name_(fmt::format("outbox_bench_{}_{}", getpid(), suffix)) {
    std::unique_ptr<char, PqFree> quoted(PQescapeIdentifier(admin.get(), name_.data(), name_.size()));
    if (!quoted)
      throw pg::PgError(fmt::format("quote schema name '{}': {}", name_, PQerrorMessage(admin.get())), "");
    quoted_ = quoted.get();
    admin_.Exec(fmt::format("DROP SCHEMA IF EXISTS {0} CASCADE; CREATE SCHEMA {0}", quoted_),
                fmt::format("create schema {}", name_));
    url_ = base_url + (base_url.find('?') == std::string::npos ? "?" : "&") +
           "options=-csearch_path%3D" + name_;
  }
  ~ScratchSchema() {
    try {
      admin_.Exec(fmt::format("DROP SCHEMA IF EXISTS {} CASCADE", quoted_), "drop a bench schema");
    } catch (const pg::PgError&) {
      // Left behind, named outbox_bench_*: a lost connection must not hide the bench's own error.
    }
  }
  ScratchSchema(const ScratchSchema&) = delete;
  ScratchSchema& operator=(const ScratchSchema&) = delete;

  const std::string& url() const noexcept { return url_; }
  const std::string& quoted() const noexcept { return quoted_; }  // for DDL and qualified names

 private:
  pg::Connection& admin_;
  std::string name_;
  std::string quoted_;
  std::string url_;
};

// The lab's tables, empty, in schema: business_loan and the outbox (ResetLabStore).
PgStore& FreshLab(std::unique_ptr<OutboxStore>& holder, const ScratchSchema& schema,
                  const BenchmarkOptions& options) {
  holder = ResetLabStore(schema.url(), options.store);
  return static_cast<PgStore&>(*holder);  // a postgresql:// URL opens a PgStore (lab/chapter/loans.h)
}

// count unpublished outbox rows for events 1..count in ONE transaction (not measured), as
// Populate does on SQLite: one INSERT each, through the store.
void PopulatePg(PgStore& store, std::int64_t count) {
  const std::int64_t now_ms = store.clock().EpochMs();
  auto txn = store.BeginWrite();
  for (std::int64_t i = 1; i <= count; ++i)
    store.Enqueue(txn, LoanCreatedEvent(ChapterLoan(i, now_ms), i));
  txn.Commit();
}

// As MeasureRelays: the chapter's relay and the production relay (claims, SKIP LOCKED), each on
// its own schema and producer, in kSlices alternating slices.
RelayFigures MeasurePgRelays(const BenchmarkOptions& options, pg::Connection& admin,
                             const std::string& brokers, const std::string& topic) {
  // Declaration order is destruction order, reversed: the stores close before their schemas go.
  ScratchSchema chapter_schema(admin, options.postgres_url, "chapter");
  ScratchSchema relay_schema(admin, options.postgres_url, "relay");
  std::unique_ptr<OutboxStore> chapter_holder, relay_holder;
  PgStore& chapter_store = FreshLab(chapter_holder, chapter_schema, options);
  PgStore& relay_store = FreshLab(relay_holder, relay_schema, options);
  PopulatePg(chapter_store, options.chapter_events);
  PopulatePg(relay_store, options.events);

  kafka::KafkaPublisher chapter_publisher(PublisherOptions(options, brokers, topic));
  kafka::KafkaPublisherOptions relay_publisher_options = PublisherOptions(options, brokers, topic);
  relay_publisher_options.linger_ms = kafka::kBatchLingerMs;  // as relay's own
  kafka::KafkaPublisher relay_publisher(relay_publisher_options);
  WarmUp(chapter_publisher);
  WarmUp(relay_publisher);
  RelayOptions relay_options;
  relay_options.batch_size = options.batch_size;
  relay_options.owner = fmt::format("bench-pg-{}", getpid());
  relay_options.coordination = Coordination::kClaims;  // the default on PostgreSQL
  // The settles on a second connection (a second backend), in a worker thread, as `relay` does
  // by default. Declared after the schemas: closed before they are dropped.
  const std::unique_ptr<OutboxStore> settle_store =
      OpenStore(relay_schema.url(), OpenMode::kExisting, options.store);
  relay_options.settle_store = settle_store.get();
  Relay relay(relay_store, relay_publisher, relay_options);

  RelayFigures figures =
      RunInterleaved(options, chapter_store, chapter_publisher, relay, " on PostgreSQL");
  if (relay_store.PendingCount() != 0)
    throw KafkaError(fmt::format("relay on PostgreSQL: {} rows still pending",
                                 relay_store.PendingCount()),
                     RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  figures.chapter.events_per_s = Rate(figures.chapter.events, figures.chapter.seconds);
  figures.relay.events_per_s = Rate(figures.relay.events, figures.relay.seconds);
  return figures;
}

// Transactions [first, last) of one variant, each BEGIN + the loan (+ its outbox row) + COMMIT,
// as write_path_figure.cc's RunWrites. Returns the seconds they took.
double RunPgWrites(PgStore& store, const std::vector<Loan>& loans,
                   const std::vector<OutboxEvent>& events, std::size_t first, std::size_t last,
                   bool with_outbox) {
  const auto start = SteadyClock::now();
  for (std::size_t i = first; i < last; ++i) {
    auto txn = store.BeginWrite();
    InsertLoan(txn.connection(), loans[i]);
    if (with_outbox) store.Enqueue(txn, events[i]);
    txn.Commit();
  }
  return SecondsSince(start);
}

// As MeasureWritePath: both variants on fresh tables each round (MeasureWriteRounds).
WritePathFigure MeasurePgWritePath(const BenchmarkOptions& options, pg::Connection& admin) {
  ScratchSchema schemas[2] = {{admin, options.postgres_url, "write_business"},
                              {admin, options.postgres_url, "write_outbox"}};
  std::unique_ptr<OutboxStore> holders[2];  // the round's: business-only, business+outbox
  return MeasureWriteRounds(options, "PostgreSQL ", [&]() -> WriteRun {
    for (auto& holder : holders) holder.reset();  // the last round's connections first
    PgStore* stores[2] = {&FreshLab(holders[0], schemas[0], options),
                          &FreshLab(holders[1], schemas[1], options)};
    return [stores](bool with_outbox, const std::vector<Loan>& loans,
                    const std::vector<OutboxEvent>& events, std::size_t first, std::size_t last) {
      return RunPgWrites(*stores[with_outbox ? 1 : 0], loans, events, first, last, with_outbox);
    };
  });
}

// One whole-process drain: the lab's tables, empty, in a fresh schema, the backlog's rows copied
// into its outbox (INSERT ... SELECT and ANALYZE, not measured), then `relay --until-empty` in
// mode as a child process, timed from spawn to exit. Requires exit 0 and every row published.
double TimeOnePgDrain(const BenchmarkOptions& options, pg::Connection& admin,
                      const ScratchSchema& backlog, std::int64_t events, const std::string& mode,
                      const std::string& brokers, const std::string& topic,
                      const std::string& output) {
  ScratchSchema run(admin, options.postgres_url, "drain_run");
  {
    std::unique_ptr<OutboxStore> holder;
    FreshLab(holder, run, options);
  }
  // The same CREATE TABLE made both tables: the same columns in the same order.
  admin.Exec(fmt::format("INSERT INTO {0}.outbox SELECT * FROM {1}.outbox; ANALYZE {0}.outbox",
                         run.quoted(), backlog.quoted()),
             "copy the drain's backlog");
  std::vector<std::string> args = {
      options.lab_binary, "relay", "--until-empty", "--quiet", "--coordination", mode,
      "--batch-size", std::to_string(options.batch_size),
      "--delivery-timeout", fmt::format("{}ms", options.delivery_timeout_ms),
      "--lease", fmt::format("{}ms", std::max(30000, 3 * options.delivery_timeout_ms)),
      "--db", run.url(), "--brokers", brokers, "--topic", topic};
  for (const auto& [name, value] : options.properties) {
    args.push_back("-X");
    args.push_back(fmt::format("{}={}", name, value));
  }
  const auto start = SteadyClock::now();
  ChildProcess child(args, output);
  const ChildExit exit = child.Wait();
  const double seconds = SecondsSince(start);
  if (!WIFEXITED(exit.status) || WEXITSTATUS(exit.status) != 0)
    throw Error(fmt::format("child 'relay --coordination {}' on PostgreSQL: {} (output in '{}')",
                            mode, DescribeStatus(exit.status), output));
  const std::int64_t published = admin.QueryInt(
      fmt::format("SELECT COUNT(*) FROM {}.outbox WHERE published", run.quoted()), {},
      "count the drain's published rows");
  if (published != events)
    throw Error(fmt::format("child 'relay --coordination {}' on PostgreSQL: {} of {} rows "
                            "published", mode, published, events));
  return seconds;
}

}  // namespace

void MeasurePgDrains(const BenchmarkOptions& options, const TempDir& dir,
                     const std::string& brokers, const std::string& topic,
                     PostgresFigures& figures) {
  pg::Connection admin(options.postgres_url);
  ScratchSchema backlog(admin, options.postgres_url, "drain_backlog");
  {
    std::unique_ptr<OutboxStore> holder;
    PopulatePg(FreshLab(holder, backlog, options), options.events);
  }
  const std::string batch = std::to_string(options.batch_size);
  figures.leader_drain = {"relay --until-empty --coordination leader --batch-size " + batch,
                          options.events, {}, 0, 0};
  figures.claims_drain = {"relay --until-empty --coordination claims --batch-size " + batch,
                          options.events, {}, 0, 0};
  for (std::int64_t round = 0; round < options.drain_rounds; ++round) {
    // Alternated, so drift (the server's checkpoints, other load) hits both modes alike.
    DrainFigure* order[2] = {&figures.leader_drain, &figures.claims_drain};
    if (round % 2 == 1) std::swap(order[0], order[1]);
    for (DrainFigure* figure : order) {
      const std::string mode = figure == &figures.leader_drain ? "leader" : "claims";
      figure->seconds.push_back(TimeOnePgDrain(options, admin, backlog, options.events, mode,
                                               brokers, topic,
                                               dir.File("pg-drain-" + mode + ".out")));
    }
  }
  for (DrainFigure* figure : {&figures.leader_drain, &figures.claims_drain}) {
    figure->median_seconds = Median(figure->seconds);
    figure->events_per_s = Rate(figure->events, figure->median_seconds);
  }
}

PostgresFigures MeasurePostgres(const BenchmarkOptions& options, const std::string& brokers,
                                const std::string& topic, const ThroughputFigure& raw) {
  RequirePostgresBenchUrl(options.postgres_url);
  pg::Connection admin(options.postgres_url);
  PostgresFigures figures;
  figures.server = admin.display_url();
  figures.server_version =
      admin.Query("SHOW server_version", {}, "read the server version").Text(0, 0);
  figures.synchronous_commit =
      admin.Query("SHOW synchronous_commit", {}, "read synchronous_commit").Text(0, 0);
  if (options.progress)
    options.progress(fmt::format("PostgreSQL {}: chapter algorithm ({} events) and relay ({} "
                                 "events, batches of {}), interleaved",
                                 figures.server_version, options.chapter_events, options.events,
                                 options.batch_size));
  const RelayFigures relays = MeasurePgRelays(options, admin, brokers, topic);
  figures.chapter = relays.chapter;
  figures.relay = relays.relay;
  figures.relay_over_chapter = Ratio(figures.relay.events_per_s, figures.chapter.events_per_s);
  figures.relay_over_raw = Ratio(figures.relay.events_per_s, raw.events_per_s);
  figures.write = MeasurePgWritePath(options, admin);
  return figures;
}

}  // namespace outbox::lab::bench
