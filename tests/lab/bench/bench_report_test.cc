// Bench report: the figures as bars, each check beside its target.
#include "lab/bench/bench_report.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace {

std::size_t Count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("The bench page draws every check beside its target and the drain's throughput over time",
          "[bench]") {
  outbox::lab::BenchmarkOptions options;
  outbox::lab::BenchmarkResult result;
  result.topic = "<b>topic</b>";
  result.chapter = {2000, 20, 100};
  result.relay = {200000, 4, 50000};
  result.raw = {200000, 2, 100000};
  result.relay_by_workload = {{"own", 200000, {200000, 4, 50000}},
                              {"50", 50, {200000, 5, 40000}},
                              {"zipf", 1000, {200000, 8, 25000}}};
  result.write.business_only_tps = {900, 1000, 1100};
  result.write.with_outbox_tps = {850, 950, 1000};
  const std::vector<outbox::lab::BenchmarkCheck> checks = {{"relay_over_chapter", 500, 100, true, {}},
                                                           {"relay_over_raw", 0.5, 0.3, true, {}},
                                                           {"write_ratio", 0.9, 0.95, true, {}},
                                                           {"history_ratio", 2.0, 1.5, false, {}},
                                                           {"relay_peak_rss_mib", 20, 32, false, {}}};
  result.rss.events = 3000;
  result.rss.progress = {{0.0, 0}, {0.25, 1000}, {0.5, 1500}, {0.75, 3000}};
  const std::string html = outbox::lab::RenderBenchmarkHtml(options, result, checks);
  // Three intervals of 0.25 s: 4000, 2000 and 6000 events/s.
  CHECK(html.find("data-samples=\"4\" data-max-rate=\"6000\"") != std::string::npos);
  CHECK(Count(html, "<rect class=\"drain\"") == 3);
  CHECK(html.find("data-from=\"0.250\" data-rate=\"2000\"") != std::string::npos);
  CHECK(Count(html, "<g class=\"check pass\"") == 3);
  CHECK(Count(html, "<g class=\"check miss\"") == 2);
  CHECK(html.find("data-name=\"write_ratio\" data-value=\"0.9\" data-target=\"0.95\" "
                  "data-pass=\"false\"") != std::string::npos);
  CHECK(
      html.find(
          "data-name=\"history_ratio\" data-value=\"2\" data-target=\"1.5\" data-pass=\"false\"") !=
      std::string::npos);
  CHECK(Count(html, "<g class=\"bar\"") == 7 + 2 + 6 + 2 + 1);
  CHECK(html.find("relay (leader), 200000 events, workload zipf") != std::string::npos);
  CHECK(html.find("25000/s") != std::string::npos);
  CHECK(html.find("<b>topic</b>") == std::string::npos);
  CHECK(html.find("&lt;b&gt;topic&lt;/b&gt;") != std::string::npos);
  CHECK(html.find("http://") == std::string::npos);
}
