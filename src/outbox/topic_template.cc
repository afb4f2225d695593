#include "outbox/topic_template.h"

#include <fmt/format.h>

#include "outbox/error.h"

namespace outbox {
namespace {

// Kafka's Topic.MAX_NAME_LENGTH: 249, so that "<topic>-<partition>" fits a file name of 255.
constexpr std::size_t kMaxTopicLength = 249;

bool LegalTopicChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

}  // namespace

std::string TopicNameProblem(std::string_view topic) {
  if (topic.empty()) return "a topic name cannot be empty";
  if (topic == "." || topic == "..") return fmt::format("a topic cannot be named '{}'", topic);
  if (topic.size() > kMaxTopicLength)
    return fmt::format("a topic name has at most {} characters, got {}", kMaxTopicLength,
                       topic.size());
  for (std::size_t i = 0; i < topic.size(); ++i)
    if (!LegalTopicChar(topic[i]))
      return fmt::format(
          "a topic name takes only the letters a-z and A-Z, digits, '.', '_' and '-' (Kafka's "
          "rule), byte {} is 0x{:02x}",
          i + 1, static_cast<unsigned char>(topic[i]));
  return {};
}

TopicTemplate TopicTemplate::Parse(const std::string& text) {
  const auto fail = [&text](const std::string& why) {
    return ConfigError(fmt::format("topic template '{}': {}", text, why));
  };
  if (text.empty()) throw fail("empty");
  TopicTemplate parsed;
  parsed.text_ = text;
  std::size_t literal_length = 0;
  bool any_placeholder = false;
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] == '{') {
      const std::size_t close = text.find('}', i);
      if (close == std::string::npos) throw fail(fmt::format("the '{{' at byte {} is never closed", i + 1));
      const std::string name = text.substr(i + 1, close - i - 1);
      if (name == "aggregate_type")
        throw fail("{aggregate_type}: the outbox table has no aggregate_type column (its "
                   "fields: event_id, aggregate_id, event_type, payload); use {event_type}");
      if (name != "event_type")
        throw fail(fmt::format("unknown placeholder {{{}}}; the one placeholder is {{event_type}}",
                               name));
      parsed.parts_.push_back({true, {}});
      any_placeholder = true;
      i = close + 1;
      continue;
    }
    if (text[i] == '}') throw fail(fmt::format("the '}}' at byte {} closes nothing", i + 1));
    if (!LegalTopicChar(text[i]))
      throw fail(fmt::format("byte {} (0x{:02x}) cannot be in a topic name: Kafka takes a-z, "
                             "A-Z, 0-9, '.', '_' and '-'",
                             i + 1, static_cast<unsigned char>(text[i])));
    if (parsed.parts_.empty() || parsed.parts_.back().placeholder) parsed.parts_.push_back({});
    parsed.parts_.back().literal += text[i];
    ++literal_length;
    ++i;
  }
  if (!any_placeholder)
    throw fail("no placeholder: for one topic for every row use --topic; a template names "
               "{event_type}");
  if (literal_length >= kMaxTopicLength)
    throw fail(fmt::format("its fixed part has {} characters, and a topic name at most {}",
                           literal_length, kMaxTopicLength));
  return parsed;
}

RoutedTopic TopicTemplate::Render(const OutboxEvent& event) const noexcept {
  try {
    RoutedTopic routed;
    for (const Part& part : parts_) routed.topic += part.placeholder ? event.event_type : part.literal;
    const std::string problem = TopicNameProblem(routed.topic);
    if (!problem.empty()) {
      routed.topic.clear();
      routed.error =
          fmt::format("topic template '{}': the row's topic is illegal: {}", text_, problem);
    }
    return routed;
  } catch (const std::exception& e) {
    return {{}, fmt::format("topic template '{}': cannot be filled in: {}", text_, e.what())};
  }
}

}  // namespace outbox
