#!/usr/bin/env bash
# check-test-names.sh TEST_BINARY: fails if any Catch2 test case name holds a character that
# CMake or Catch2 treats specially. catch_discover_tests registers one ctest entry per name:
# CMake splits a name at ';', and Catch2 reads ',' (or), '[' ']' (tags), '*' (wildcard),
# '~' (not) and '\' (escape) as test-spec syntax, so such an entry matches no test case. And
# a late ': ' crashes Catch2's console reporter (below).
set -euo pipefail
binary=${1:?usage: check-test-names.sh TEST_BINARY}
# Catch2 v2 exits with the number of names listed, so its status says nothing here.
names=$("$binary" --list-test-names-only) || true
[ -n "$names" ] || { echo "check-test-names: $binary lists no test case" >&2; exit 1; }
bad=$(grep -E '[],;[*~\\]' <<<"$names" || true)
if [ -n "$bad" ]; then
  echo "check-test-names: test case names with one of ; , [ ] * ~ \\ (rename them):" >&2
  while IFS= read -r name; do echo "  $name"; done <<<"$bad" >&2
  exit 1
fi
# Catch2 v2's console reporter indents the wrapped lines of a failing test's name past its first
# ": " (ConsoleReporter::printHeaderString). Past column 77 of its 80-column console that leaves
# no width: the reporter throws std::out_of_range, and the whole run ends at that failure,
# reporting no other test. Column 60 keeps a margin.
late=$(awk '{ i = index($0, ": "); if (i > 60) print }' <<<"$names")
if [ -n "$late" ]; then
  echo "check-test-names: test case names with ': ' past column 60 (Catch2's reporter crashes on their failure; move it earlier or drop it):" >&2
  while IFS= read -r name; do echo "  $name"; done <<<"$late" >&2
  exit 1
fi
echo "check-test-names: $(grep -c . <<<"$names") test case names, none with ; , [ ] * ~ \\ or a late ': '"
