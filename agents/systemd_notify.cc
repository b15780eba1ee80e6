#include "agents/systemd_notify.h"

#include <systemd/sd-daemon.h>

namespace hdp::agents {

void notify_ready(const std::string& status) { sd_notify(0, ("READY=1\nSTATUS=" + status).c_str()); }

void notify_status(const std::string& status) { sd_notify(0, ("STATUS=" + status).c_str()); }

void notify_stopping() { sd_notify(0, "STOPPING=1"); }

void notify_watchdog() { sd_notify(0, "WATCHDOG=1"); }

std::optional<std::chrono::milliseconds> watchdog_interval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  return std::chrono::milliseconds(usec / 2000);
}

}  // namespace hdp::agents
