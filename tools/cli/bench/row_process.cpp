#include "row_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

extern char** environ;

namespace sluice::cli::bench {

Result<std::string> run_child(const std::vector<std::string>& args, double timeout_s) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return make_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<char*> argv;
  std::string program = "sluice";
  argv.push_back(program.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return make_error(std::string("cannot start a row process: ") + std::strerror(rc));
  }
  std::string out;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  for (;;) {
    int wait_ms = -1;
    if (timeout_s > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) {
        timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(std::min<long long>(left, 1000));
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return make_error("stopped after " + std::to_string(static_cast<int>(timeout_s)) + " s (--row-timeout)");
  if (WIFSIGNALED(status)) return make_error(std::string("the row process died of signal ") + strsignal(WTERMSIG(status)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // The child writes {"error": ...} on stdout before exiting 1; the caller reads the message from it.
    if (!out.empty()) return out;
    return make_error("the row process exited with status " + std::to_string(WEXITSTATUS(status)));
  }
  return out;
}

}  // namespace sluice::cli::bench
