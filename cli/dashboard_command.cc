// `hdp dashboard --job J --redis URL [--port P] [--address A]`: a live web page of the job, served
// over HTTP (metrics/http_server.h) from the job state in Redis. The page is a few files of
// cli/dashboard/, built into the binary and each served at its own path (kFiles below): `/` (and
// `/index.html`) the markup, `/dashboard.css` its style, `/dashboard.js` its script (a module that
// imports `/format.js`, `/charts.js` and `/cards.js`); it loads nothing from anywhere else. And
// `/api/job` is the job as JSON (cli/job_json.h, plus `exists`, `redis`, `now_ms`, `error`, and
// `http_connections_closed`: the connections this server closed or refused for a limit of
// metrics/http_server.h, by reason), which the page polls; `/healthz` says ok; any other path is
// 404. A job that does not exist is a page that says so; Redis errors are shown on the page, which
// keeps polling. Runs until SIGINT or SIGTERM. A port in use exits 2.
#include <signal.h>

#include <atomic>
#include <iostream>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/dashboard/cards_js.h"
#include "cli/dashboard/charts_js.h"
#include "cli/dashboard/dashboard_css.h"
#include "cli/dashboard/dashboard_js.h"
#include "cli/dashboard/format_js.h"
#include "cli/dashboard/index_html.h"
#include "cli/job_json.h"
#include "cli/job_options.h"
#include "common/error.h"
#include "common/log.h"
#include "elastic/job_state.h"
#include "metrics/http_server.h"

namespace hdp::cli {
namespace {

// The page's files: the path each is served at, its content type and its text.
struct PageFile {
  std::string_view path;
  std::string_view content_type;
  std::string_view text;
};
constexpr std::string_view kHtml = "text/html; charset=utf-8";
constexpr std::string_view kJs = "text/javascript; charset=utf-8";
constexpr PageFile kFiles[] = {
    {"/", kHtml, kDashboardPage},
    {"/index.html", kHtml, kDashboardPage},
    {"/dashboard.css", "text/css; charset=utf-8", kDashboardCss},
    {"/dashboard.js", kJs, kDashboardJs},
    {"/format.js", kJs, kDashboardFormatJs},
    {"/charts.js", kJs, kDashboardChartsJs},
    {"/cards.js", kJs, kDashboardCardsJs},
};

struct DashboardFlags {
  JobOptions job;
  int port = 8265;
  std::string address = "127.0.0.1";
  int events = 100;
};

class Dashboard {
 public:
  Dashboard(std::string job, std::string redis_display, std::shared_ptr<elastic::Store> store, int events)
      : job_(std::move(job)), redis_(std::move(redis_display)), state_(std::move(store)), events_(events) {}

  // The server, for its counters: set once it is constructed, while it may already be serving.
  void set_server(const metrics::HttpServer* server) { server_ = server; }

  metrics::HttpResponse handle(const metrics::HttpRequest& request) {
    for (const PageFile& file : kFiles) {
      if (request.path == file.path) return {200, std::string(file.content_type), std::string(file.text)};
    }
    if (request.path == "/api/job") return {200, "application/json", api().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
    if (request.path == "/healthz") return {200, "text/plain; charset=utf-8", "ok\n"};
    return {404, "text/plain; charset=utf-8", "not found\n"};
  }

 private:
  nlohmann::json api() {
    nlohmann::json out;
    try {
      if (!state_.exists()) {
        out = {{"exists", false}};
      } else {
        out = job_json(job_, state_.snapshot(static_cast<std::size_t>(events_), elastic::kSamplesKept));
        out["exists"] = true;
      }
      out["error"] = nullptr;
    } catch (const std::exception& e) {
      // Redis unreachable, or a value that does not parse: the page shows it and polls on.
      out = {{"exists", nullptr}, {"error", e.what()}};
    }
    out["job"] = job_;
    out["redis"] = redis_;
    out["now_ms"] = elastic::now_ms();
    metrics::HttpServerStats http;
    if (const metrics::HttpServer* server = server_.load()) http = server->stats();
    out["http_connections_closed"] = {{"head_deadline", http.closed_head_deadline},
                                      {"body_deadline", http.closed_body_deadline},
                                      {"write_deadline", http.closed_write_deadline},
                                      {"idle", http.closed_idle},
                                      {"over_cap", http.refused_over_cap},
                                      {"per_address", http.refused_per_address},
                                      {"too_large_431", http.too_large_431},
                                      {"too_large_413", http.too_large_413}};
    return out;
  }

  const std::string job_, redis_;
  elastic::JobState state_;
  const int events_;
  std::atomic<const metrics::HttpServer*> server_{nullptr};
};

}  // namespace

void add_dashboard_command(CLI::App& app) {
  auto flags = std::make_shared<DashboardFlags>();
  CLI::App* command = app.add_subcommand("dashboard", "Serve a live web page of a job (curves, members, events)");
  flags->job.add_to(*command);
  command->add_option("--port", flags->port, "Port of the page (0: a free one, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  command->add_option("--address", flags->address, "Address to listen on (0.0.0.0: every interface)")
      ->capture_default_str();
  command->add_option("--events", flags->events, "Recent events the page shows")
      ->check(CLI::Range(0, static_cast<int>(elastic::kEventsKept)))
      ->capture_default_str();
  command->callback([flags] {
    const std::string job = flags->job.job_id();
    // SIGINT and SIGTERM are taken by sigwait() below; blocked before the server's thread starts,
    // so that it inherits the mask and never receives them.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    Dashboard dashboard(job, elastic::parse_redis_url(flags->job.redis.url).display(), flags->job.connect_job(),
                        flags->events);
    metrics::HttpServer server(flags->address, flags->port,
                               [&dashboard](const metrics::HttpRequest& request) { return dashboard.handle(request); });
    dashboard.set_server(&server);
    const std::string host = flags->address == "0.0.0.0" ? "127.0.0.1" : flags->address;
    std::cout << "hdp dashboard: job " << job << " at http://" << host << ":" << server.port() << "/" << std::endl;
    int signo = 0;
    sigwait(&stop, &signo);
    std::cout << "hdp dashboard: " << strsignal(signo) << ", stopping" << std::endl;
  });
}

}  // namespace hdp::cli
