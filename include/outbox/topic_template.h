// Topic per event: relay --topic-template. A template is a topic name with placeholders that a
// row fills in, e.g. "outbox.{event_type}" sends a LoanCreated row to outbox.LoanCreated. It is
// parsed and checked once (TopicTemplate::Parse); each row's topic is checked again when the row
// is sent (Render), because the row's fields are foreign input: a row whose topic would be
// illegal is refused with the reason (the relay parks it) and never stops the relay.
// Immutable after Parse; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "outbox/event.h"

namespace outbox {

// "" when topic is a legal Kafka topic name, else one line saying why. Kafka's rule
// (org.apache.kafka.common.internals.Topic.validate): 1 to 249 characters, each one of
// a-z A-Z 0-9 . _ -, and not "." or "..". The offending character is named by position and
// code, never echoed (a row's bytes may not be text).
std::string TopicNameProblem(std::string_view topic);

// A row's topic, or why it has none.
struct RoutedTopic {
  std::string topic;  // empty when error is not
  std::string error;  // one line, e.g. "topic template: event_type 'A B' makes the topic ..."
  bool ok() const noexcept { return error.empty(); }
};

class TopicTemplate {
 public:
  // Parses text: literal characters legal in a topic name and the placeholders {event_type}
  // (the row's event type). {aggregate_type} is refused: the outbox table (chapter 7.1) has no
  // aggregate_type column. Throws ConfigError, naming the template, for an empty template, an
  // unknown placeholder, an unbalanced brace, a literal character Kafka forbids, a template
  // without a placeholder (--topic says that), or a literal part already longer than 249.
  static TopicTemplate Parse(const std::string& text);

  // The topic of row: the template with each placeholder replaced by the row's field, checked
  // with TopicNameProblem. A field that makes an illegal topic gives error, e.g.
  //   topic template 'outbox.{event_type}': the row's topic is illegal: a topic name takes only
  //   the letters a-z and A-Z, digits, '.', '_' and '-' (Kafka's rule), byte 12 is 0x20
  // Throws nothing.
  RoutedTopic Render(const OutboxEvent& event) const noexcept;

  // The template as given.
  const std::string& text() const noexcept { return text_; }

 private:
  struct Part {
    bool placeholder = false;  // true: the row's event_type; false: literal
    std::string literal;
  };
  std::string text_;
  std::vector<Part> parts_;
};

}  // namespace outbox
