// SettleGate: shows without timing that a relay's settle on its settle store
// (RelayOptions::settle_store) overlaps the next read on its own store. The relay's store calls
// NoteRead for each page read, claim or look; its on_phase calls NoteMarking at each "marking"
// (a settle handed off); the settle store's settle n waits in WaitForReadAfterMarking.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

namespace outbox::testing {

struct SettleGate {
  std::mutex mutex;  // guards the members below, and whatever the settle stores count under it
  std::condition_variable changed;
  int reads = 0;
  std::vector<int> reads_at_marking;  // reads seen at each "marking", in order

  void NoteRead() {
    {
      std::lock_guard lock(mutex);
      ++reads;
    }
    changed.notify_all();
  }
  void NoteMarking() {
    std::lock_guard lock(mutex);
    reads_at_marking.push_back(reads);
  }
  // With lock held on mutex: waits until a read came after the n-th (1, 2, ...) "marking";
  // true when one did, false after 20 s (a bound only so that a failing test ends: with an
  // inline settle no read can come). Throws std::out_of_range before the n-th marking.
  bool WaitForReadAfterMarking(std::unique_lock<std::mutex>& lock, int n) {
    const int handed_off_at = reads_at_marking.at(static_cast<std::size_t>(n) - 1);
    return changed.wait_for(lock, std::chrono::seconds(20), [&] { return reads > handed_off_at; });
  }
};

}  // namespace outbox::testing
