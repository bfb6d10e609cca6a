// The roll call a stuck rank's watchdog makes (Communicator::roll_call): the parts every engine
// shares, the grace period and the sentence that names the ranks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace stoke::dist {

// heard[r] when rank r did not answer.
inline constexpr int64_t kRollCallNotHeard = std::numeric_limits<int64_t>::min();

// How long a roll call listens: a quarter of the timeout, within [1 s, 10 s] (the live ranks'
// watchdogs fire within about the same time, as they all wait on the same call).
inline std::chrono::milliseconds roll_call_grace(std::chrono::milliseconds timeout) {
  return std::clamp<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(1000),
                                               std::chrono::milliseconds(10000));
}

// heard[r]: the collective rank r said it is stuck in (-1: a point-to-point call), or
// kRollCallNotHeard.
// "; rank 1 did not arrive (...)", "; rank 2 is stuck in collective #7", or "; every rank
// answered from the same call ..." when all answered with seq.
std::string describe_roll_call(const std::vector<int64_t>& heard, int64_t seq,
                               std::chrono::milliseconds grace);

}  // namespace stoke::dist
