#include "core/sync_debug.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace stoke {
namespace {

constexpr uint8_t kUnset = 0xFF;
std::atomic<uint8_t> g_mode{kUnset};

thread_local DeviceActivity t_activity;
thread_local const char* t_site = nullptr;      // the innermost SyncSite's op
thread_local const char* t_expected = nullptr;  // the innermost ExpectedSync's reason

SyncDebugMode mode_from_env() {
  const char* v = std::getenv("STOKE_SYNC_DEBUG");
  if (!v || !*v || std::strcmp(v, "off") == 0 || std::strcmp(v, "0") == 0)
    return SyncDebugMode::off;
  if (std::strcmp(v, "warn") == 0) return SyncDebugMode::warn;
  if (std::strcmp(v, "error") == 0) return SyncDebugMode::error;
  STOKE_FAIL("STOKE_SYNC_DEBUG", "expected off, warn or error, got '", v, "'");
}

}  // namespace

SyncDebugMode sync_debug_mode() {
  uint8_t m = g_mode.load(std::memory_order_relaxed);
  if (m == kUnset) {
    // A racing first reading reads the same environment: either store is the same value.
    m = static_cast<uint8_t>(mode_from_env());
    g_mode.store(m, std::memory_order_relaxed);
  }
  return static_cast<SyncDebugMode>(m);
}

void set_sync_debug_mode(SyncDebugMode mode) {
  g_mode.store(static_cast<uint8_t>(mode), std::memory_order_relaxed);
}

const char* sync_debug_mode_name(SyncDebugMode mode) {
  switch (mode) {
    case SyncDebugMode::off:
      return "off";
    case SyncDebugMode::warn:
      return "warn";
    case SyncDebugMode::error:
      return "error";
  }
  return "?";
}

DeviceActivity device_activity() {
  DeviceActivity a = t_activity;
  a.launches = detail::t_kernel_launches;
  return a;
}

DeviceActivity operator-(const DeviceActivity& b, const DeviceActivity& a) {
  return {.syncs = b.syncs - a.syncs,
          .expected_syncs = b.expected_syncs - a.expected_syncs,
          .launches = b.launches - a.launches};
}

void note_device_sync(const char* what, bool may_throw) {
  if (t_expected) {
    ++t_activity.expected_syncs;
    return;
  }
  ++t_activity.syncs;
  SyncDebugMode mode = SyncDebugMode::warn;
  try {
    mode = sync_debug_mode();
  } catch (...) {
    if (may_throw) throw;  // a bad STOKE_SYNC_DEBUG: reported where throwing is allowed
  }
  if (mode == SyncDebugMode::off) return;
  const std::string message =
      detail::str_cat(t_site ? t_site : "an operation", " blocked the host on the device (", what,
                      "); a steady-state step needs no such wait: keep the value on the device, "
                      "or read it inside stoke::ExpectedSync where the read is meant");
  if (mode == SyncDebugMode::error && may_throw) detail::throw_error("sync debug", message);
  std::fprintf(stderr, "stoke: sync debug: %s\n", message.c_str());
}

const char* current_sync_site() noexcept {
  return t_site;
}

SyncSite::SyncSite(const char* op) noexcept : previous_(t_site) {
  if (!t_site) t_site = op;  // the outermost names it: the call the user made
}
SyncSite::~SyncSite() {
  t_site = previous_;
}

ExpectedSync::ExpectedSync(const char* why) noexcept : previous_(t_expected) {
  t_expected = why;
}
ExpectedSync::~ExpectedSync() {
  t_expected = previous_;
}

}  // namespace stoke
