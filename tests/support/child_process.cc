#include "tests/support/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

}  // namespace

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string output_path, std::vector<std::string> env) {
  if (argv.empty()) throw std::invalid_argument("ChildProcess: empty argv");
  std::vector<char*> args = c_strings(argv);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    int out = open(output_path.empty() ? "/dev/null" : output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (out >= 0) {
      dup2(out, STDOUT_FILENO);
      dup2(out, STDERR_FILENO);
      close(out);
    }
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0) dup2(in, STDIN_FILENO);
    for (auto& assignment : env) putenv(assignment.data());
    execvp(args[0], args.data());
    _exit(127);
  }
}

ChildProcess::~ChildProcess() { kill(); }

bool ChildProcess::running() { return !wait_for(std::chrono::milliseconds(0)).has_value(); }

void ChildProcess::signal(int signo) {
  if (!status_) ::kill(pid_, signo);
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      status_ = status;
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void ChildProcess::kill() {
  if (pid_ <= 0 || status_) return;
  ::kill(pid_, SIGCONT);  // a stopped process still dies of SIGKILL, but be explicit
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  status_ = status;
}

CommandResult run_command(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::chrono::milliseconds timeout) {
  TempDir dir("hdp-cmd");
  const std::string out_path = (dir.path() / "out").string(), err_path = (dir.path() / "err").string();
  std::vector<std::string> args = argv;
  std::vector<std::string> environment = env;
  std::vector<char*> c_args = c_strings(args);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    dup2(in, STDIN_FILENO);
    for (auto& assignment : environment) putenv(assignment.data());
    execvp(c_args[0], c_args.data());
    _exit(127);
  }
  CommandResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  return result;
}

}  // namespace hdp::test
