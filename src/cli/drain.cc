#include "cli/drain.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/publishing.h"
#include "lab/broker/json_bytes.h"
#include "lab/chapter/history.h"
#include "outbox/open_store.h"
#include "lab/chapter/recording_publisher.h"
#include "lab/chapter/relay_owner.h"
#include "outbox/change_watcher.h"
#include "outbox/timed_waiter.h"
#include "outbox/kafka/kafka_publisher.h"

namespace outbox::cli {

std::int64_t ReleaseDeadOwners(OutboxStore& store) {
  const lab::DeadOwnersReleased released = lab::ReleaseDeadOwners(store);
  std::int64_t released_lease = 0;
  if (released.lease.token > 0) {
    fmt::print("[relay] released the leader lease (token {}) of dead owner {}\n",
               released.lease.token, lab::EscapeBytes(released.lease.owner));
    std::fflush(stdout);
    released_lease = released.lease.token;
  }
  for (const ClaimOwner& claim : released.claims) {
    fmt::print("[relay] released {} rows claimed by dead owner {} {} ms ago\n", claim.rows,
               lab::EscapeBytes(claim.owner), claim.age_ms);
    std::fflush(stdout);
  }
  return released_lease;
}

LoopReport DrainOutbox(const GlobalOptions& global, std::int64_t delivery_timeout_ms) {
  const std::unique_ptr<OutboxStore> owned_store =
      OpenStore(global.db, OpenMode::kExisting, global.MakeStoreOptions());
  OutboxStore& store = *owned_store;
  kafka::KafkaPublisherOptions publisher_options;
  publisher_options.brokers = global.RequireBrokers();
  publisher_options.topic = global.topic;
  publisher_options.delivery_timeout_ms = static_cast<int>(delivery_timeout_ms);
  publisher_options.properties = ProducerProperties(global);
  publisher_options.run_id = store.RunId();
  kafka::KafkaPublisher publisher(publisher_options);
  const auto history = global.OpenHistory();
  lab::RecordingPublisher recording(publisher, history.get());
  RelayOptions relay_options;
  relay_options.owner = lab::DefaultRelayOwner();
  // The relay's routing: a drain sends each row where relay would (its headers are the lab's).
  if (!global.topic_template.empty())
    relay_options.topic_template = TopicTemplate::Parse(global.topic_template);
  relay_options.lease_ms = std::max<std::int64_t>(relay_options.lease_ms, 2 * delivery_timeout_ms);
  const bool noted = NoteBrokerIncarnation(global, store, delivery_timeout_ms);
  if (history || !noted)
    relay_options.on_settle = [h = history.get(), &global, &store, noted = noted](
                                  const SettleRecord& settle) mutable {
    if (h) lab::RecordSettle(h, settle.token, settle.marked, settle.parked, settle.fenced);
    if (!noted && !settle.marked.empty()) noted = NoteBrokerIncarnation(global, store, 2000);
  };
  ReleaseDeadOwners(store);
  Relay relay(store, recording, relay_options);
  LoopOptions loop_options;
  loop_options.mode = LoopMode::kUntilEmpty;
  if (store.backend() == Backend::kPostgres) {
    TimedWaiter waiter(/*stop_fd=*/-1);
    return RunRelayLoopReconnecting(relay, waiter, loop_options, [](const BatchReport&) {});
  }
  ChangeWatcher watcher(global.db, /*stop_fd=*/-1);
  return RunRelayLoop(relay, watcher, loop_options, [](const BatchReport&) {});
}

}  // namespace outbox::cli
