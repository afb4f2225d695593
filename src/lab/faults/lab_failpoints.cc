#include "lab/faults/lab_failpoints.h"

#include <fmt/format.h>

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
  const char* env = std::getenv("OUTBOX_FAILPOINTS");
  // Entries later in a spec replace earlier ones for the same point, so the
  // environment's own entry for point, if any, wins over this hold.
  ConfigureFailpoints(fmt::format("{}=hold;{}", point, env ? env : ""));
}

}  // namespace outbox::lab
