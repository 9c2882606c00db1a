// Writes an event file for tests/independent_reader_test.sh: the file version, then steps
// 0, 10, ..., 90 each with loss = 1 / (1 + step), accuracy = step / 100 and
// examples_per_second = 1000 + step. Prints the file's path.
//
//   summary_sample_writer DIR
#include <cstdio>

#include "worker/summary/event_file_writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: summary_sample_writer DIR\n");
    return 2;
  }
  auto writer = kubetrain::summary::EventFileWriter::Create({.directory = argv[1]});
  if (!writer.ok()) {
    std::fprintf(stderr, "%s\n", writer.status().ToString().c_str());
    return 1;
  }
  for (int step = 0; step < 100; step += 10) {
    absl::Status s = (*writer)->AddScalars(step, 1.7e9 + step,
                                           {{"loss", 1.0f / (1 + step)},
                                            {"accuracy", step / 100.0f},
                                            {"examples_per_second", 1000.0f + step}});
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (absl::Status s = (*writer)->Flush(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%s\n", (*writer)->path().c_str());
  return 0;
}
