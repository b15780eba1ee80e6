// spawn() (agents/process.h): the child's environment is exactly what is asked for, and no file
// descriptor but stdio crosses exec, whether or not its opener set close-on-exec (issue 13,
// defects 10 and 13). The children are /bin/sh one-liners whose exit status is the answer.
#include "agents/process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>

namespace hdp::agents {
namespace {

// Runs `script` with /bin/sh through spawn() and returns its exit code (-1 when it did not exit).
int run_sh(const std::string& script, std::optional<std::vector<std::string>> environment = std::nullopt) {
  const pid_t pid = spawn({{"/bin/sh", "-c", script}, std::move(environment)});
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(Spawn, ChildGetsExactlyTheGivenEnvironment) {
  ASSERT_EQ(setenv("HDP_SPAWN_TEST", "from-parent", 1), 0);
  // The parent's environment when none is given...
  EXPECT_EQ(run_sh("[ \"$HDP_SPAWN_TEST\" = from-parent ]"), 0);
  // ...and only the given one otherwise: one value per name, the parent's gone.
  EXPECT_EQ(run_sh("[ \"$HDP_SPAWN_TEST\" = given ] && [ -z \"$HOME\" ]", std::vector<std::string>{"HDP_SPAWN_TEST=given"}),
            0);
  EXPECT_EQ(run_sh("[ -z \"${HDP_SPAWN_TEST+set}\" ]", std::vector<std::string>{}), 0);
  unsetenv("HDP_SPAWN_TEST");
}

TEST(Spawn, NoDescriptorButStdioIsInherited) {
  // A pipe and a file opened the careless way (no O_CLOEXEC), as a library might.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const int file = open("/dev/null", O_RDONLY);
  ASSERT_GE(file, 0);
  for (int fd : {pipe_fds[0], pipe_fds[1], file}) {
    ASSERT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    EXPECT_EQ(run_sh("[ ! -e /proc/$$/fd/" + std::to_string(fd) + " ]"), 0) << "fd " << fd << " reached the child";
  }
  // Stdio does reach it.
  EXPECT_EQ(run_sh("[ -e /proc/$$/fd/0 ] && [ -e /proc/$$/fd/1 ] && [ -e /proc/$$/fd/2 ]"), 0);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  close(file);
}

}  // namespace
}  // namespace hdp::agents
