// Shared by the fuzz targets: quiet logs and scratch files for the entry points that read paths.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/string_view.h"
#include "common/logging.h"

namespace kubetrain::fuzz {

// Parsers warn about what they refuse; at thousands of inputs a second that would drown the
// fuzzer's own report.
inline void QuietLogs() {
  log::SetSink([](absl::string_view) {});
}

// A directory of this process's own, in memory where the machine has /dev/shm (file-reading
// targets write every input there), removed at exit.
inline const std::string& ScratchDir() {
  static std::string dir;
  if (dir.empty()) {
    std::string base = std::filesystem::is_directory("/dev/shm")
                           ? "/dev/shm"
                           : std::filesystem::temp_directory_path().string();
    std::string tmpl = base + "/kubetrain-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      perror("mkdtemp");
      abort();
    }
    dir = tmpl;
    // Registered after `dir` exists, so it runs before `dir` is destroyed.
    atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(ScratchDir(), ec);
    });
  }
  return dir;
}

// Replaces `path` with exactly `bytes`; a failure is the environment's, not the target's.
inline void WriteFileOrDie(const std::string& path, absl::string_view bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    perror(path.c_str());
    abort();
  }
  while (!bytes.empty()) {
    ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n <= 0) {
      perror(path.c_str());
      abort();
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  close(fd);
}

// Stops the run with a message: libFuzzer saves the input that broke an invariant.
[[noreturn]] inline void Fail(const std::string& what) {
  fprintf(stderr, "invariant broken: %s\n", what.c_str());
  fflush(stderr);
  abort();
}

}  // namespace kubetrain::fuzz
