// The Catch2 runner for outbox_tests. The lab's failpoints are registered once, as the
// outbox-lab binary does before it reads OUTBOX_FAILPOINTS.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "lab/faults/lab_failpoints.h"

int main(int argc, char* argv[]) {
  outbox::lab::RegisterLabFailpoints();
  return Catch::Session().run(argc, argv);
}
