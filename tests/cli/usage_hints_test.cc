// The hints main prints for a rejected command line (src/cli/usage_hints.h),
// on a CLI11 app shaped like outbox-lab's: global options with fallthrough and
// one required subcommand.
#include "cli/usage_hints.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace {

using outbox::cli::ClosestName;
using outbox::cli::CommandLine;
using outbox::cli::ExplainParseError;
using outbox::cli::Invocation;
using outbox::cli::ShellQuote;

// A small outbox-lab: --db, --topic, -X; reset, verify --no-kafka, write N --quiet.
struct LabLikeApp {
  CLI::App app{"test", "outbox-lab"};
  std::string db = "outbox.db";
  std::string topic = "v2c7.outbox";
  std::vector<std::string> properties;
  bool no_kafka = false;
  bool quiet = false;
  int count = 0;

  LabLikeApp() {
    app.require_subcommand(1);
    app.fallthrough();
    app.add_option("--db", db, "SQLite database file");
    app.add_option("--topic", topic, "Kafka topic");
    app.add_option("-X", properties, "librdkafka property");
    app.add_subcommand("reset", "Create the database");
    app.add_subcommand("verify", "Count")->add_flag("--no-kafka", no_kafka, "Skip Kafka");
    CLI::App* write = app.add_subcommand("write", "Write N loans");
    write->add_option("N", count, "Loans")->required();
    write->add_flag("--quiet", quiet, "Only the final line");
    outbox::cli::ShowGlobalOptionsInSubcommandHelp(app);
  }

  // The message for args (without argv[0]), or "parsed" when CLI11 accepted them.
  std::string Explain(std::vector<std::string> args, const std::string& frontend = "") {
    args.insert(args.begin(), "outbox-lab");
    std::vector<const char*> argv;
    for (const std::string& arg : args) argv.push_back(arg.c_str());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      return ExplainParseError(app, e, args, Invocation{frontend, db});
    }
    return "parsed";
  }
};

TEST_CASE("A mistyped subcommand is named with the closest real one", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"verfy"}) == "unknown subcommand 'verfy'; did you mean 'verify'? (see --help)");
}

TEST_CASE("A mistyped subcommand after global options is still found", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"--db", "/tmp/x.db", "rset", "--no-kafka"}) ==
        "unknown subcommand 'rset'; did you mean 'reset'? (see --help)");
}

TEST_CASE("A mistyped subcommand right after the database path is not taken for a split path",
          "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"--db", "/tmp/x.db", "verfy"}) ==
        "unknown subcommand 'verfy'; did you mean 'verify'? (see --help)");
}

TEST_CASE("A word far from every subcommand gets no suggestion", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"frobnicate"}) == "unknown subcommand 'frobnicate' (see --help for the list)");
}

TEST_CASE("No subcommand at all says one is required", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"--db", "x.db"}) == "a subcommand is required (see --help for the list)");
}

TEST_CASE("The chapter's -Doutbox.db with a space before the path names the spelling with =",
          "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"-Doutbox.db", "/tmp/x", "reset"}, "./run.sh") ==
        "-Doutbox.db takes its path after '=', with no space: -Doutbox.db=/tmp/x");
}

TEST_CASE("The chapter's -Doutbox.db given to the binary names --db", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"-Doutbox.db=/tmp/x", "reset"}) ==
        "-Doutbox.db=/tmp/x is run.sh's spelling (the chapter's); outbox-lab takes --db /tmp/x");
}

TEST_CASE("An unquoted database path with spaces is shown quoted", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"--db", "/tmp/my", "dir/x.db", "reset"}) ==
        "'dir/x.db' follows the value of --db: a value with spaces must be quoted, as in "
        "--db '/tmp/my dir/x.db'");
}

TEST_CASE("Behind run.sh an unquoted path with spaces is shown in run.sh's spelling", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"--db", "/tmp/my", "dir/x.db", "OutboxLab", "reset"}, "./run.sh") ==
        "'dir/x.db' follows the value of --db: a value with spaces must be quoted, as in "
        "-Doutbox.db='/tmp/my dir/x.db'");
}

TEST_CASE("An option of another subcommand names the subcommand that has it", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"reset", "--no-kafka"}) ==
        "reset has no option --no-kafka; verify has it (see `outbox-lab reset --help`)");
}

TEST_CASE("A subcommand's option before the subcommand says to write it after", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"--quiet", "write", "3"}, "./run.sh") ==
        "--quiet is an option of write: write it after the subcommand, as in "
        "`./run.sh OutboxLab write --quiet`");
}

TEST_CASE("A mistyped option gets the closest option of its subcommand", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"verify", "--no-kafak"}) ==
        "unknown option --no-kafak; did you mean --no-kafka? (see `outbox-lab verify --help`)");
}

TEST_CASE("Global options after the subcommand still parse", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"write", "3", "--db", "/tmp/x.db", "-X", "acks=all"}) == "parsed");
  CHECK(lab.db == "/tmp/x.db");
}

TEST_CASE("Each subcommand's help lists the global options", "[cli]") {
  LabLikeApp lab;
  for (const char* name : {"reset", "verify", "write"}) {
    const std::string help = lab.app.get_subcommand(name)->help();
    INFO(help);
    CHECK(help.find("Global options (before or after the subcommand)") != std::string::npos);
    CHECK(help.find("--db") != std::string::npos);
    CHECK(help.find("--topic") != std::string::npos);
    CHECK(help.find("-X") != std::string::npos);
  }
}

TEST_CASE("Command lines quote paths and follow the frontend the user runs", "[cli]") {
  CHECK(CommandLine(Invocation{"", "/tmp/x.db"}, "reset") == "outbox-lab --db /tmp/x.db reset");
  CHECK(CommandLine(Invocation{"./run.sh", "/tmp/mqrel7-outbox/outbox"}, "reset") ==
        "./run.sh -Doutbox.db=/tmp/mqrel7-outbox/outbox OutboxLab reset");
  CHECK(CommandLine(Invocation{"", "/tmp/my dir/x.db"}, "reset") ==
        "outbox-lab --db '/tmp/my dir/x.db' reset");
  CHECK(ShellQuote("it's") == "'it'\\''s'");
  CHECK(ShellQuote("") == "''");
}

TEST_CASE("ClosestName prefers a prefix and allows one edit per three letters", "[cli]") {
  const std::vector<std::string> names = {"reset", "verify", "write", "write-hold", "relay"};
  CHECK(ClosestName("wri", names) == "write");
  CHECK(ClosestName("rely", names) == "relay");
  CHECK(ClosestName("relya", names).empty());  // two edits in five letters: too far
  CHECK(ClosestName("xyz", names).empty());
  CHECK(ClosestName("", names).empty());
}

}  // namespace

TEST_CASE("An option given under both of its names says they are the same option", "[cli]") {
  LabLikeApp lab;
  std::string timeout;
  lab.app.get_subcommand("verify")->add_option("--delivery-timeout,--send-timeout", timeout,
                                               "A timeout");
  CHECK(lab.Explain({"verify", "--send-timeout", "5s", "--delivery-timeout", "6s"}) ==
        "--send-timeout and --delivery-timeout are the same option; give one");
  CHECK(lab.Explain({"verify", "--send-timeout=5s", "--send-timeout", "6s"}) ==
        "--send-timeout is given 2 times; give it once");
}

TEST_CASE("A global option of one value given twice says to give it once", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"--topic", "a", "reset", "--topic", "b"}) ==
        "--topic is given 2 times; give it once");
}

TEST_CASE("A subcommand without its required count names itself and shows an example", "[cli]") {
  LabLikeApp lab;
  CHECK(lab.Explain({"--db", "/tmp/x.db", "write"}) ==
        "write needs N (Loans), e.g. `outbox-lab --db /tmp/x.db write 5`");
  LabLikeApp behind_run_sh;
  CHECK(behind_run_sh.Explain({"--db", "/tmp/x.db", "write"}, "./run.sh") ==
        "write needs N (Loans), e.g. `./run.sh -Doutbox.db=/tmp/x.db OutboxLab write 5`");
}
