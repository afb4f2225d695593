// The lab's failpoints: the points on the chapter's workload (write.*,
// consume.*) and the chapter's two hold points, registered with the outbox
// library's failpoint registry (outbox/failpoint.h) so that OUTBOX_FAILPOINTS,
// `outbox-lab failpoints` and the crash sweep treat them like the library's.
#pragma once

namespace outbox::lab {

// write-hold: every loan committed, nothing sent. Armed with `hold` by
// write-hold (the chapter's line), reached and left alone by write.
inline constexpr const char* kWriteHoldBeforePublish = "write.hold_before_publish";
// The chapter's line up to "kill -9"; the hold action adds "; kill -9 PID".
inline constexpr const char* kWriteHoldLine = "[write] committed all, HOLD before publish";

// publish-hold: every record sent and acknowledged, none marked published.
inline constexpr const char* kPublishHoldBeforeMark = "publish.hold_before_mark";

// Registers the lab's points (idempotent). Call before ConfigureFailpoints.
void RegisterLabFailpoints();

// Makes `point=hold` the configuration, unless OUTBOX_FAILPOINTS configures
// point itself (then that wins): how write-hold and publish-hold arm their
// hold. Keeps every other entry of OUTBOX_FAILPOINTS. Throws ConfigError as
// ConfigureFailpoints does.
void ArmHoldUnlessConfigured(const char* point);

}  // namespace outbox::lab
