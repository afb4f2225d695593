// The Catch2 runner for outbox_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
