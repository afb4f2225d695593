#include "outbox/kafka/transactional_publisher.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "outbox/error.h"
#include "outbox/failpoint.h"

namespace outbox::kafka {
namespace {

constexpr int kPollMs = 100;
constexpr int kCreateTopicMaxMs = 3000;

KafkaPublisherOptions WithTransactions(const TransactionalPublisherOptions& options) {
  if (options.transactional_id.empty())
    throw ConfigError("transactional id: must not be empty (relay --exactly-once)");
  if (options.transaction_timeout_ms < options.publisher.delivery_timeout_ms)
    throw ConfigError(fmt::format(
        "transaction timeout {} ms: must be at least the delivery timeout {} ms (librdkafka: "
        "message.timeout.ms <= transaction.timeout.ms)",
        options.transaction_timeout_ms, options.publisher.delivery_timeout_ms));
  KafkaPublisherOptions out = options.publisher;
  // Before -X: a user's own transactional.id or timeout wins, as every -X does.
  out.properties.insert(out.properties.begin(),
                        {{"transactional.id", options.transactional_id},
                         {"enable.idempotence", "true"},
                         {"transaction.timeout.ms", std::to_string(options.transaction_timeout_ms)}});
  return out;
}

// Milliseconds left until deadline, >= 0.
int LeftMs(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

// Creates topic (one partition, compacted) unless it exists. The embedded broker (librdkafka's
// mock cluster) has no CreateTopics: it creates a topic on first use, uncompacted; that error is
// returned, not thrown (a relay can run without compaction, its state topic only grows).
std::string CreateCompactedTopic(rd_kafka_t* client, const std::string& topic, int timeout_ms) {
  // Already there: nothing to create (and no CreateTopics for the mock cluster to leave
  // unanswered). All topics: asking for this one by name would let the broker auto-create it.
  const rd_kafka_metadata_t* raw = nullptr;
  if (rd_kafka_metadata(client, 1, nullptr, &raw, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    MetadataHandle metadata(raw);
    for (int t = 0; t < metadata->topic_cnt; ++t)
      if (metadata->topics[t].topic == topic && metadata->topics[t].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        return {};
  }
  char errstr[256] = {};
  NewTopicHandle new_topic(rd_kafka_NewTopic_new(topic.c_str(), 1, -1, errstr, sizeof errstr));
  if (!new_topic) return errstr;
  rd_kafka_NewTopic_set_config(new_topic.get(), "cleanup.policy", "compact");
  AdminOptionsHandle admin(rd_kafka_AdminOptions_new(client, RD_KAFKA_ADMIN_OP_CREATETOPICS));
  rd_kafka_AdminOptions_set_request_timeout(admin.get(), timeout_ms, errstr, sizeof errstr);
  QueueHandle queue(rd_kafka_queue_new(client));
  rd_kafka_NewTopic_t* topics[] = {new_topic.get()};
  rd_kafka_CreateTopics(client, topics, 1, admin.get(), queue.get());
  EventHandle event(rd_kafka_queue_poll(queue.get(), timeout_ms + 1000));
  if (!event) return "CreateTopics: no answer";
  if (rd_kafka_event_error(event.get()))
    return DescribeError(rd_kafka_event_error(event.get()));
  const rd_kafka_CreateTopics_result_t* result = rd_kafka_event_CreateTopics_result(event.get());
  std::size_t count = 0;
  const rd_kafka_topic_result_t** results = rd_kafka_CreateTopics_result_topics(result, &count);
  for (std::size_t i = 0; i < count; ++i) {
    const rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
      return DescribeError(err);
  }
  return {};
}

}  // namespace

std::string RelayStateTopic(const std::string& topic) { return topic + ".outbox-relay-state"; }

std::string DefaultTransactionalId(const std::string& topic, const std::string& db_identity) {
  return fmt::format("outbox-relay:{}:{}", topic, db_identity);
}

std::string RelayStateValue(const std::string& transactional_id, const std::string& run_id,
                            const std::vector<std::int64_t>& outbox_ids,
                            const std::vector<std::string>& event_ids) {
  nlohmann::ordered_json hex = nlohmann::ordered_json::array();
  for (const std::string& event_id : event_ids) {
    std::string bytes;
    bytes.reserve(2 * event_id.size());
    for (const unsigned char c : event_id) bytes += fmt::format("{:02x}", c);
    hex.push_back(std::move(bytes));
  }
  nlohmann::ordered_json value = {{"transactional_id", transactional_id},
                                  {"run_id", run_id},
                                  {"outbox_ids", outbox_ids},
                                  {"event_ids_hex", std::move(hex)}};
  return value.dump();
}

namespace {

// "6576" -> "ev"; nullopt for anything that is not pairs of hex digits.
std::optional<std::string> FromHex(const std::string& hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string bytes;
  bytes.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(hex.data() + i, hex.data() + i + 2, value, 16);
    if (ec != std::errc() || end != hex.data() + i + 2) return std::nullopt;
    bytes += static_cast<char>(value);
  }
  return bytes;
}

}  // namespace

RelayState ParseRelayState(const std::string& value) {
  const nlohmann::json parsed = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("outbox_ids") || !parsed["outbox_ids"].is_array())
    throw KafkaError(fmt::format("relay-state record '{}': not a JSON object with an outbox_ids "
                                 "array (written by another client?)",
                                 value.substr(0, 80)),
                     RD_KAFKA_RESP_ERR__BAD_MSG);
  RelayState state;
  if (parsed.contains("run_id") && parsed["run_id"].is_string())
    state.run_id = parsed["run_id"].get<std::string>();
  std::vector<std::int64_t>& ids = state.outbox_ids;
  for (const auto& id : parsed["outbox_ids"]) {
    if (!id.is_number_integer())
      throw KafkaError(fmt::format("relay-state record '{}': an outbox id is not an integer",
                                   value.substr(0, 80)),
                       RD_KAFKA_RESP_ERR__BAD_MSG);
    ids.push_back(id.get<std::int64_t>());
  }
  // Optional (older records lack it); a field of another shape is ignored as a whole.
  if (parsed.contains("event_ids_hex") && parsed["event_ids_hex"].is_array() &&
      parsed["event_ids_hex"].size() == ids.size()) {
    for (const auto& hex : parsed["event_ids_hex"]) {
      std::optional<std::string> bytes =
          hex.is_string() ? FromHex(hex.get<std::string>()) : std::nullopt;
      if (!bytes) {
        state.event_ids.clear();
        break;
      }
      state.event_ids.push_back(std::move(*bytes));
    }
  }
  return state;
}

TransactionalPublisher::TransactionalPublisher(const TransactionalPublisherOptions& options)
    : options_(options.publisher),
      transactional_id_(options.transactional_id),
      state_topic_(RelayStateTopic(options.publisher.topic)),
      transaction_timeout_ms_(options.transaction_timeout_ms),
      publisher_(WithTransactions(options)) {}

TransactionalPublisher::~TransactionalPublisher() {
  // A batch in flight at teardown (an exception): abort rather than leave the brokers to time it
  // out, so read_committed readers are not held back. A kill -9 runs no destructor: then the
  // next init_transactions of this transactional.id, or transaction.timeout.ms, aborts it.
  if (transaction_open_) Abort(nullptr, /*retry=*/false);
}

std::vector<std::int64_t> TransactionalPublisher::Recover(int timeout_ms,
                                                          const std::string& run_id,
                                                          const PendingTest& is_pending) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (!initialized_) {
    ErrorHandle error(rd_kafka_init_transactions(publisher_.handle(), timeout_ms));
    if (error)
      ThrowKafkaError(fmt::format("init transactions of transactional.id '{}'", transactional_id_),
                      error.get());
    initialized_ = true;
  }
  // At most 3 s, or half the time left: the embedded broker (librdkafka's mock cluster) has no
  // CreateTopics handler and never answers it; it creates the topic on first use instead.
  CreateCompactedTopic(publisher_.handle(), state_topic_,
                       std::max(1, std::min(kCreateTopicMaxMs, LeftMs(deadline) / 2)));

  const std::string what = fmt::format("read relay-state topic '{}' (read_committed)", state_topic_);
  std::vector<Property> properties = {
      {"bootstrap.servers", options_.brokers},
      {"group.id", "outbox-relay-recovery"},  // assign() needs one; nothing is committed
      {"enable.auto.commit", "false"},
      {"enable.partition.eof", "true"},
      {"log_level", "2"},
  };
  // -X may carry security settings the consumer needs too; the isolation level is not the user's.
  for (const Property& p : options_.properties)
    if (p.first.rfind("security.", 0) == 0 || p.first.rfind("sasl.", 0) == 0 ||
        p.first.rfind("ssl.", 0) == 0)
      properties.push_back(p);
  properties.push_back({"isolation.level", "read_committed"});
  KafkaHandle consumer;
  std::int64_t low = 0, high = 0;
  // read_committed: the high end is the last stable offset (ListOffsets with the isolation level).
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  for (;;) {
    // A new client each try: librdkafka caches a topic its metadata answer did not list as an
    // errored topic, then answers from that cache (_UNKNOWN_PARTITION) without asking again.
    consumer = MakeClient(RD_KAFKA_CONSUMER, MakeConf(properties));
    err = rd_kafka_query_watermark_offsets(consumer.get(), state_topic_.c_str(), 0, &low, &high,
                                           std::max(1, LeftMs(deadline)));
    // A topic created moments ago is not served yet: its partition has no leader, or the broker
    // that answered the metadata request does not list the topic yet (KRaft brokers apply the
    // controller's metadata asynchronously). Both measured on Kafka 4.3.0 in the crash sweep's
    // first read after CreateTopics: NOT_LEADER_FOR_PARTITION, and under CI load
    // _UNKNOWN_PARTITION. Wait for it within the bound; at the deadline the error is raised,
    // never read as "no state", which would re-send what a committed transaction carries.
    const bool not_ready_yet = err == RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION ||
                               err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE ||
                               err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION ||
                               err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    if (!not_ready_yet || LeftMs(deadline) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
  }
  if (err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) return {};
  if (err) ThrowKafkaError(what + ": watermarks", err);
  // init_transactions aborted our own open transaction, so the last stable offset is below the
  // high watermark only while ANOTHER producer's transaction is open on the topic (another outbox
  // on the same topic, or one database reached by two paths). Reading up to it would miss the
  // state our committed transactions wrote after that transaction began, and re-send what they
  // carried: wait for it to end within the bound, and fail rather than read less.
  {
    std::vector<Property> uncommitted = properties;
    uncommitted.back() = {"isolation.level", "read_uncommitted"};
    KafkaHandle peek = MakeClient(RD_KAFKA_CONSUMER, MakeConf(uncommitted));
    std::int64_t peek_low = 0, high_watermark = 0;
    err = rd_kafka_query_watermark_offsets(peek.get(), state_topic_.c_str(), 0, &peek_low,
                                           &high_watermark, std::max(1, LeftMs(deadline)));
    if (err) ThrowKafkaError(what + ": high watermark", err);
    while (high < high_watermark) {
      if (LeftMs(deadline) == 0)
        throw KafkaError(
            fmt::format("{}: another producer's open transaction holds offsets {}..{} of it back "
                        "(last stable offset {}); the recovery cannot read the state it may hide "
                        "and sends nothing; run again once that transaction ends (its "
                        "transaction.timeout.ms aborts a dead producer's)",
                        what, high, high_watermark - 1, high),
            RD_KAFKA_RESP_ERR__TIMED_OUT);
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
      err = rd_kafka_query_watermark_offsets(consumer.get(), state_topic_.c_str(), 0, &low, &high,
                                             std::max(1, LeftMs(deadline)));
      if (err) ThrowKafkaError(what + ": watermarks", err);
    }
  }
  std::set<std::int64_t> ids;
  if (high <= low) return {};
  TopicPartitionListHandle assignment(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(assignment.get(), state_topic_.c_str(), 0)->offset = low;
  err = rd_kafka_assign(consumer.get(), assignment.get());
  if (err) ThrowKafkaError(what + ": assign", err);
  // Until the end of what read_committed may see (librdkafka reports the partition's EOF at the
  // last stable offset): the commit markers take offsets too, so counting records would not end.
  for (;;) {
    if (LeftMs(deadline) == 0)
      throw KafkaError(fmt::format("{}: timed out after {} ms", what, timeout_ms),
                       RD_KAFKA_RESP_ERR__TIMED_OUT);
    MessageHandle msg(rd_kafka_consumer_poll(consumer.get(), std::min(kPollMs, LeftMs(deadline))));
    if (!msg) continue;
    if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) break;
    if (msg->err) ThrowKafkaError(what, msg->err);
    if (!msg->payload) continue;  // a tombstone
    const std::string value(static_cast<const char*>(msg->payload), msg->len);
    const RelayState state = ParseRelayState(value);
    if (!run_id.empty() && state.run_id != run_id) continue;  // another run's ids
    for (std::size_t i = 0; i < state.outbox_ids.size(); ++i)
      if (!is_pending || state.event_ids.empty() ||
          is_pending(state.outbox_ids[i], state.event_ids[i]))
        ids.insert(state.outbox_ids[i]);
  }
  rd_kafka_consumer_close(consumer.get());
  return {ids.begin(), ids.end()};
}

std::vector<DeliveryResult> TransactionalPublisher::Publish(
    const std::vector<OutboundMessage>& messages) {
  Send(messages);
  return AwaitOldest();
}

void TransactionalPublisher::Send(const std::vector<OutboundMessage>& messages) {
  if (publisher_.InFlight() > 0)
    throw std::logic_error("TransactionalPublisher::Send: one transaction at a time; await the "
                           "batch in flight first");
  if (!initialized_)
    throw std::logic_error("TransactionalPublisher::Send: call Recover first (init_transactions)");
  if (messages.empty()) {
    publisher_.Send(messages);  // no transaction: AwaitOldest returns no results
    return;
  }
  ErrorHandle error(rd_kafka_begin_transaction(publisher_.handle()));
  if (error) ThrowKafkaError("begin transaction", error.get());
  transaction_open_ = true;
  std::vector<std::int64_t> ids;
  std::vector<std::string> event_ids;
  ids.reserve(messages.size());
  event_ids.reserve(messages.size());
  for (const OutboundMessage& m : messages) {
    ids.push_back(m.outbox_id);
    event_ids.push_back(m.event_id);
  }
  const std::string& run = messages.front().run_id.empty() ? options_.run_id
                                                           : messages.front().run_id;
  const std::string value = RelayStateValue(transactional_id_, run, ids, event_ids);
  // No opaque: its delivery report is nobody's slot; commit_transaction fails if it failed.
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__QUEUE_FULL;
  while (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
    err = rd_kafka_producev(
        publisher_.handle(), RD_KAFKA_V_TOPIC(state_topic_.c_str()),
        // Partition 0, the one Recover reads, even on a state topic of several partitions (one
        // created by hand, or auto-created where CreateTopics is missing: the embedded broker).
        RD_KAFKA_V_PARTITION(0),
        // Keyed by the transactional.id, one per outbox: two outboxes on one topic share the
        // state topic, and under the topic as the key compaction kept only the last record of
        // either, so one outbox's unmarked last transaction could be compacted away by the other's.
        RD_KAFKA_V_KEY(transactional_id_.data(), transactional_id_.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) rd_kafka_poll(publisher_.handle(), kPollMs);
  }
  if (err) {
    Abort(nullptr);
    ThrowKafkaError(fmt::format("produce relay-state record to '{}'", state_topic_), err);
  }
  publisher_.Send(messages);
}

void TransactionalPublisher::FailAll(std::vector<DeliveryResult>& results,
                                     const std::string& reason, bool producer_fatal) {
  for (DeliveryResult& r : results) {
    r.ok = false;
    r.error = reason;
    r.producer_fatal = producer_fatal;
  }
}

bool TransactionalPublisher::Abort(std::string* reason, bool retry) {
  transaction_open_ = false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(transaction_timeout_ms_);
  for (;;) {
    // Each call within what is left of the bound, so the whole wait stays inside it.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    const int timeout_ms = retry ? static_cast<int>(std::clamp<std::int64_t>(
                                       left, 1, options_.delivery_timeout_ms))
                                 : options_.delivery_timeout_ms;
    ErrorHandle error(rd_kafka_abort_transaction(publisher_.handle(), timeout_ms));
    if (!error) {
      ++aborted_;
      return true;
    }
    if (retry && rd_kafka_error_is_retriable(error.get()) &&
        std::chrono::steady_clock::now() < deadline)
      continue;  // librdkafka resumes the abort it began
    if (reason) *reason = DescribeError(error.get());
    return false;
  }
}

std::vector<DeliveryResult> TransactionalPublisher::AwaitOldest() {
  std::vector<DeliveryResult> results = publisher_.AwaitOldest();
  if (!transaction_open_) return results;  // an empty batch
  const auto failed = std::find_if(results.begin(), results.end(),
                                   [](const DeliveryResult& r) { return !r.ok; });
  if (failed != results.end()) {
    // The producer failed (fenced, fatal): no abort can pass; every row stays for a new producer.
    if (failed->producer_fatal) {
      transaction_open_ = false;
      FailAll(results, failed->error, true);
      return results;
    }
    const std::string why = fmt::format("transaction aborted: a record of the batch failed ({})",
                                        failed->error.empty() ? "delivery failed" : failed->error);
    std::string abort_error;
    if (!Abort(&abort_error)) {
      FailAll(results, fmt::format("{}; the abort failed too: {}", why, abort_error), true);
      return results;
    }
    // Only the records that failed are at fault: the others were accepted and are rolled back
    // with them (no attempt counted), or one poison row would park every row batched with it.
    for (DeliveryResult& r : results) {
      if (!r.ok) continue;
      r.ok = false;
      r.rolled_back = true;
      r.error = why;
    }
    return results;
  }
  HitFailpoint("relay.txn_before_commit");
  for (;;) {
    ErrorHandle error(
        rd_kafka_commit_transaction(publisher_.handle(), options_.delivery_timeout_ms));
    if (!error) break;
    if (rd_kafka_error_is_retriable(error.get())) continue;  // the outcome is not known yet
    const std::string why = fmt::format("commit transaction: {}", DescribeError(error.get()));
    if (rd_kafka_error_txn_requires_abort(error.get())) {
      std::string abort_error;
      const bool aborted = Abort(&abort_error);
      FailAll(results, aborted ? why + "; aborted" : why + "; the abort failed: " + abort_error,
              !aborted);
      return results;
    }
    // Fatal (fenced by a newer producer of this transactional.id, or another fatal error):
    // whether the commit happened is unknown here; the next term's Recover reads it.
    transaction_open_ = false;
    FailAll(results, why, true);
    return results;
  }
  transaction_open_ = false;
  ++committed_;
  return results;
}

}  // namespace outbox::kafka
