#include "lab/faults/lab_failpoints.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "outbox/failpoint.h"

namespace outbox::lab {

void RegisterLabFailpoints() {
  RegisterFailpoints({
      {"write.before_commit", "nothing of this loan: its business and outbox rows roll back together"},
      {"write.after_commit", "the loan and its outbox row; nothing sent"},
      {kWriteHoldBeforePublish, "every loan of the command and its outbox row; nothing sent", true},
      {kPublishHoldBeforeMark,
       "every loan and outbox row; the sent records acknowledged by the broker; none marked: "
       "re-sent by the next publish",
       true},
      {"consume.after_effect",
       "the consumer's effect and processed_event row; offset not committed: re-delivered, "
       "deduplicated"},
      {"consume.mid_prune",
       "earlier prune batches of processed_event; this batch's deletes roll back"},
  });
}

void ArmHoldUnlessConfigured(const char* point) {
  const std::string env = std::getenv("OUTBOX_FAILPOINTS") ? std::getenv("OUTBOX_FAILPOINTS") : "";
  // The environment's own entry for point, if any, wins over this hold (a point may be named
  // once in a spec: ConfigureFailpoints).
  const std::string prefix = std::string(point) + "=";
  for (std::size_t start = 0; start <= env.size();) {
    const std::size_t end = std::min(env.find(';', start), env.size());
    if (env.compare(start, prefix.size(), prefix) == 0) return ConfigureFailpoints(env);
    start = end + 1;
  }
  ConfigureFailpoints(fmt::format("{}=hold;{}", point, env));
}

}  // namespace outbox::lab
