#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/command.h"
#include "lab/broker/embedded_broker.h"
#include "lab/faults/broker_control.h"
#include "outbox/error.h"

namespace outbox::cli {
namespace {

struct BrokerOptions {
  int partitions = 1;
  int broker_count = 1;
  std::string addr_file;
  std::string control;
};

// Written to a temporary name and renamed, so a reader never sees half an address.
void WriteAddrFile(const std::string& path, const std::string& bootstrap) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << bootstrap << '\n';
    if (!out.flush()) ThrowSystemError(fmt::format("write address file '{}'", tmp), errno);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) ThrowSystemError(fmt::format("write address file '{}'", path), ec.value());
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
      ->transform(PositiveInteger())
      ->capture_default_str();
  sub->add_option("--broker-count", options->broker_count, "Brokers in the mock cluster")
      ->transform(PositiveInteger())
      ->capture_default_str();
  sub->add_option("--addr-file", options->addr_file,
                  "Write the bootstrap address here once ready (removed on a clean stop)");
  sub->add_option("--control", options->control,
                  "Unix socket for fault injection with `outbox-lab broker-ctl` (down, up, rtt, "
                  "errors)");
  return {sub, [&global, options]() -> ExitCode {
            // Block the stop signals before librdkafka starts its threads (they
            // inherit the mask), so only sigwait below receives them.
            sigset_t stop_signals;
            sigemptyset(&stop_signals);
            sigaddset(&stop_signals, SIGTERM);
            sigaddset(&stop_signals, SIGINT);
            pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

            const int stop_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
            if (stop_fd < 0) ThrowSystemError("signalfd for SIGTERM/SIGINT", errno);
            lab::EmbeddedBroker broker(options->broker_count);
            broker.CreateTopic(global.topic, options->partitions);
            // The control socket exists before anyone learns the broker is ready.
            std::unique_ptr<lab::ControlSocket> control;
            if (!options->control.empty())
              control = std::make_unique<lab::ControlSocket>(options->control);
            const std::string bootstrap = broker.BootstrapServers();
            if (!options->addr_file.empty()) WriteAddrFile(options->addr_file, bootstrap);
            fmt::print("[broker] ready bootstrap={} topic={} partitions={} pid={} "
                       "incarnation={}\n",
                       bootstrap, global.topic, options->partitions, getpid(),
                       broker.Incarnation());
            std::fflush(stdout);

            int signal_number = 0;
            for (;;) {
              pollfd fds[2] = {{stop_fd, POLLIN, 0}, {control ? control->fd() : -1, POLLIN, 0}};
              if (poll(fds, 2, -1) < 0) continue;
              if (fds[0].revents & POLLIN) {
                signalfd_siginfo info{};
                if (read(stop_fd, &info, sizeof info) == sizeof info)
                  signal_number = static_cast<int>(info.ssi_signo);
                break;
              }
              if (control && (fds[1].revents & POLLIN))
                control->ServeOne([&](const std::string& request) {
                  const std::string reply = lab::ApplyBrokerControl(broker, request);
                  fmt::print("[broker] control '{}' -> {}\n", request, reply);
                  std::fflush(stdout);
                  return reply;
                });
            }
            close(stop_fd);
            if (!options->addr_file.empty()) {
              std::error_code ec;
              std::filesystem::remove(options->addr_file, ec);
            }
            fmt::print("[broker] stopping on {}\n", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
            return ExitCode::kOk;
          }};
}

Command AddBrokerCtlCommand(CLI::App& app, const GlobalOptions&) {
  CLI::App* sub = app.add_subcommand(
      "broker-ctl",
      "Inject a fault into a running embedded broker: down [ID] | up [ID] | rtt MS [ID] | "
      "errors produce N CODE | clear produce | ping");
  struct Options {
    std::string control;
    std::vector<std::string> request;
  };
  auto options = std::make_shared<Options>();
  // Not ->required(): without it the error says why, instead of CLI11's bare "is required".
  sub->add_option("--control", options->control,
                  "The embedded broker's --control socket (these faults exist only in librdkafka's "
                  "mock cluster; on real Kafka use scripts/kafka.sh kill NODE | kill-leader TOPIC)")
      ->envname("OUTBOX_BROKER_CONTROL");
  sub->add_option("REQUEST", options->request, "e.g. down, or rtt 3000, or errors produce 5 19")
      ->required();
  return {sub, [options]() -> ExitCode {
            if (options->control.empty())
              throw ConfigError(
                  "broker-ctl needs --control SOCKET: its faults work only on the embedded broker "
                  "(outbox-lab broker --control SOCKET); on real Kafka crash a node with "
                  "scripts/kafka.sh kill NODE or kill-leader TOPIC");
            std::string request;
            for (const auto& word : options->request) request += (request.empty() ? "" : " ") + word;
            const std::string reply = lab::SendBrokerControl(options->control, request);
            if (reply != "ok") throw ConfigError(fmt::format("broker-ctl '{}': {}", request, reply));
            fmt::print("[broker-ctl] {}: ok\n", request);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
