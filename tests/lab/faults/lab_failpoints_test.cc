// The lab's failpoints in the registry: the chapter's holds are named points,
// listed like the library's, armed with hold unless OUTBOX_FAILPOINTS says
// otherwise. tests/main.cc registers them, as the binary does.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <string>

#include "lab/faults/lab_failpoints.h"
#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

const outbox::FailpointInfo* Find(const std::vector<outbox::FailpointInfo>& all,
                                  const std::string& name) {
  for (const auto& point : all)
    if (name == point.name) return &point;
  return nullptr;
}

struct EnvReset {
  ~EnvReset() { unsetenv("OUTBOX_FAILPOINTS"); }
};

}  // namespace

TEST_CASE("The lab registers its write and consume points and the chapter's two holds as once "
          "points",
          "[failpoint]") {
  const auto all = outbox::AllFailpoints();
  for (const char* name : {"write.before_commit", "write.after_commit", "consume.after_effect"}) {
    INFO("failpoint " << name);
    REQUIRE(Find(all, name) != nullptr);
    CHECK_FALSE(Find(all, name)->once);
  }
  for (const char* name : {outbox::lab::kWriteHoldBeforePublish, outbox::lab::kPublishHoldBeforeMark}) {
    INFO("failpoint " << name);
    REQUIRE(Find(all, name) != nullptr);
    CHECK(Find(all, name)->once);
    CHECK_FALSE(std::string(Find(all, name)->durable).empty());
  }
  CHECK(Find(all, "relay.after_claim") != nullptr);  // the library's own stay listed
}

TEST_CASE("ArmHoldUnlessConfigured leaves an OUTBOX_FAILPOINTS entry for the hold point in charge "
          "and keeps the other entries",
          "[failpoint]") {
  outbox::testing::FailpointReset reset;
  EnvReset env_reset;
  REQUIRE(setenv("OUTBOX_FAILPOINTS", "write.hold_before_publish=1*off->error;write.after_commit=error", 1) == 0);

  outbox::lab::ArmHoldUnlessConfigured(outbox::lab::kWriteHoldBeforePublish);

  // The environment's schedule, not a hold: the first hit passes, the second throws.
  CHECK_NOTHROW(outbox::HitFailpoint(outbox::lab::kWriteHoldBeforePublish, outbox::lab::kWriteHoldLine));
  CHECK(outbox::testing::CaptureThrow<outbox::FailpointError>([] {
          outbox::HitFailpoint(outbox::lab::kWriteHoldBeforePublish);
        }).has_value());
  CHECK(outbox::testing::CaptureThrow<outbox::FailpointError>([] {
          outbox::HitFailpoint("write.after_commit");
        }).has_value());
}
