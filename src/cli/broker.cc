#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/command.h"
#include "lab/embedded_broker.h"
#include "outbox/error.h"

namespace outbox::cli {
namespace {

struct BrokerOptions {
  int partitions = 1;
  int broker_count = 1;
  std::string addr_file;
};

// Written to a temporary name and renamed, so a reader never sees half an address.
void WriteAddrFile(const std::string& path, const std::string& bootstrap) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << bootstrap << '\n';
    if (!out.flush()) throw ConfigError(fmt::format("write address file '{}': cannot write", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw ConfigError(fmt::format("write address file '{}': {}", path, ec.message()));
}

}  // namespace

Command AddBrokerCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "broker",
      "Run the embedded Kafka-protocol broker (librdkafka's mock cluster) on loopback until "
      "SIGTERM/SIGINT. In memory only; ephemeral port; each partition keeps at most 100,000 "
      "message sets or 5 MiB");
  auto options = std::make_shared<BrokerOptions>();
  sub->add_option("--partitions", options->partitions, "Partitions of --topic")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--broker-count", options->broker_count, "Brokers in the mock cluster")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--addr-file", options->addr_file,
                  "Write the bootstrap address here once ready (removed on a clean stop)");
  return {sub, [&global, options]() -> ExitCode {
            // Block the stop signals before librdkafka starts its threads (they
            // inherit the mask), so only sigwait below receives them.
            sigset_t stop_signals;
            sigemptyset(&stop_signals);
            sigaddset(&stop_signals, SIGTERM);
            sigaddset(&stop_signals, SIGINT);
            pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

            lab::EmbeddedBroker broker(options->broker_count);
            broker.CreateTopic(global.topic, options->partitions);
            const std::string bootstrap = broker.BootstrapServers();
            if (!options->addr_file.empty()) WriteAddrFile(options->addr_file, bootstrap);
            fmt::print("[broker] ready bootstrap={} topic={} partitions={} pid={}\n", bootstrap,
                       global.topic, options->partitions, getpid());
            std::fflush(stdout);

            int signal_number = 0;
            sigwait(&stop_signals, &signal_number);
            if (!options->addr_file.empty()) {
              std::error_code ec;
              std::filesystem::remove(options->addr_file, ec);
            }
            fmt::print("[broker] stopping on {}\n", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
