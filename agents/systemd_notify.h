// File: agents/systemd_notify.h
//
// sd_notify(3) for an agent run by systemd (Type=notify): READY=1, STATUS= lines and the
// watchdog keep-alive. Every call is a no-op when NOTIFY_SOCKET is not set.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace hdp::agents {

void notify_ready(const std::string& status);
void notify_status(const std::string& status);
void notify_stopping();
void notify_watchdog();
// Half of WatchdogSec when systemd asked for keep-alives, else nullopt.
std::optional<std::chrono::milliseconds> watchdog_interval();

}  // namespace hdp::agents
