// A process's memory as the kernel reports it in /proc/<pid>/status, for the benchmarks that
// measure resident memory (operator_scale, informer_memory).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace kubetrain::bench {

// A field of /proc/<pid>/status in kB (VmRSS, VmHWM); pid 0 is this process. -1 when absent.
inline int64_t ProcStatusKb(const std::string& field, pid_t pid = 0) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status")
                            : "/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    int64_t kb = -1;
    std::istringstream rest(line.substr(field.size() + 1));
    rest >> kb;
    return kb;
  }
  return -1;
}

}  // namespace kubetrain::bench
