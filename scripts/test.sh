#!/usr/bin/env bash
# The test command (README, .ci/run): installs what is missing, builds, and runs
# every Catch2 unit test and every crash scenario under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --with-browser  # the browser group: scenarios/report-browser.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2 "$@"
