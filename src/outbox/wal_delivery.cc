// WalRelay: a batch's records delivered in waves, one record per aggregate a wave, each wave
// retried until it is acknowledged (the WAL relay cannot park a row).
#include "outbox/wal_relay.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "outbox/error.h"
#include "outbox/failpoint.h"

namespace outbox {

void WalRelay::Publish(std::vector<OutboundMessage> messages,
                       const std::vector<std::string>& aggregates, WalBatchReport& report) {
  std::vector<std::vector<OutboundMessage>> waves;
  std::unordered_map<std::string_view, std::size_t> seen;  // records per aggregate so far
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::size_t wave = seen[aggregates[i]]++;
    if (wave == waves.size()) waves.emplace_back();
    waves[wave].push_back(std::move(messages[i]));
  }
  auto last_status = std::chrono::steady_clock::now();
  for (std::size_t w = 0; w < waves.size(); ++w) {
    // A hot aggregate's waves can outlast wal_sender_timeout (60 s by default): answer the server
    // between them (the confirmed position is unchanged). A stop request lets the batch finish:
    // only a wave waiting for a retry ends on one.
    if (w > 0 && std::chrono::steady_clock::now() - last_status >= std::chrono::seconds(1)) {
      stream_->SendStatus(confirmed_, false);
      last_status = std::chrono::steady_clock::now();
    }
    DeliverWave(std::move(waves[w]), w == 0, report);
  }
}

void WalRelay::DeliverWave(std::vector<OutboundMessage> messages, bool first,
                           WalBatchReport& report) {
  // Fresh per wave: a wave starts only once the one before it was delivered whole, so a broker
  // outage met here is a new one.
  std::unordered_map<std::int64_t, int> attempts;
  std::int64_t outage_tries = 0;
  while (!messages.empty()) {
    publisher_.Send(messages);
    if (first) HitFailpoint("relay.wal.after_produce");
    first = false;
    const std::vector<DeliveryResult> results = publisher_.AwaitOldest();
    std::vector<OutboundMessage> failed;
    std::string first_error;
    bool outage = false;
    for (std::size_t i = 0; i < results.size() && i < messages.size(); ++i) {
      if (results[i].ok) {
        ++report.records;
        continue;
      }
      if (results[i].producer_fatal) throw KafkaError(results[i].error, kProducerFatalCode);
      if (first_error.empty()) first_error = results[i].error;
      if (results[i].outage) {
        outage = true;
      } else if (++attempts[messages[i].outbox_id] >= options_.max_attempts) {
        throw WalRelayError(
            WalRelayError::Kind::kUndeliverable,
            fmt::format("relay --source wal: outbox id {} (event {}) failed {} times: {}; the WAL "
                        "relay cannot park a row (it writes nothing to the outbox), so nothing "
                        "past its commit is confirmed; fix the cause (a record too large: the "
                        "topic's max.message.bytes and -X message.max.bytes) and start it again, "
                        "which streams the row again, or resync past it: relay --until-empty "
                        "(the polling relay), then drop this relay's slot and publication "
                        "(docs/wal-relay.md, \"A slot that was dropped or invalidated\")",
                        messages[i].outbox_id, messages[i].event_id, options_.max_attempts,
                        results[i].error));
      }
      failed.push_back(messages[i]);
    }
    if (failed.empty()) return;
    outage_tries = outage ? outage_tries + 1 : 0;
    // An outage backs off by its length; a row's own failures by that row's attempts, as the
    // polling relay's backoff does.
    std::int64_t row_tries = 1;
    for (const OutboundMessage& m : failed)
      row_tries = std::max<std::int64_t>(row_tries, attempts[m.outbox_id]);
    const std::int64_t tries = outage ? outage_tries : row_tries;
    std::int64_t delay = options_.backoff_base_ms;
    for (std::int64_t t = 1; t < tries && delay < options_.backoff_max_ms; ++t) delay *= 2;
    delay = std::min(delay, options_.backoff_max_ms);
    if (options_.on_retry)
      options_.on_retry(static_cast<std::int64_t>(failed.size()), first_error, delay);
    report.retries += static_cast<std::int64_t>(failed.size());
    Wait(delay);
    if (options_.stop_requested && options_.stop_requested())
      throw WalRelayError(WalRelayError::Kind::kUndeliverable,
                          fmt::format("relay --source wal: stopped while {} records waited for a "
                                      "retry: nothing past the last confirm ({}) is confirmed; "
                                      "they are sent again at the next start",
                                      failed.size(), pg::FormatLsn(confirmed_)));
    messages = std::move(failed);
  }
}

}  // namespace outbox
