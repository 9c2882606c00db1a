// mpi_allreduce: the reference side of allreduce_bench, run by it under mpirun.
//
//   mpirun -np 2 --mca pml ob1 --mca btl tcp,self ... mpi_allreduce --sizes=1048576,4194304
//       [--iters=20] [--warmup=5]
//
// For each size (bytes of floats) every rank does `warmup` untimed and `iters` timed in-place
// MPI_Allreduce(MPI_SUM) calls, each preceded by a fresh FillPattern and an MPI_Barrier, and
// checks every result. Rank 0 prints one "result" line per size (pattern.h) with the slowest
// rank's time of each timed iteration; the driver parses those lines exactly as it parses the
// Gloo ranks' output. Exit status 0 only when every sum was right.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/allreduce/pattern.h"

namespace {

struct Options {
  std::vector<size_t> sizes;
  int iters = 20;
  int warmup = 5;
};

bool ParseSizes(const char* text, std::vector<size_t>* sizes) {
  while (*text != '\0') {
    char* end = nullptr;
    const unsigned long long bytes = std::strtoull(text, &end, 10);
    if (end == text || bytes == 0 || bytes % sizeof(float) != 0) return false;
    sizes->push_back(static_cast<size_t>(bytes));
    text = end;
    if (*text == ',')
      ++text;
    else if (*text != '\0')
      return false;
  }
  return !sizes->empty();
}

bool ParseInt(const char* text, int* value) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 0 || v > 1000000) return false;
  *value = static_cast<int>(v);
  return true;
}

bool Parse(int argc, char** argv, Options* opt) {
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strncmp(arg, "--sizes=", 8) == 0) {
      if (!ParseSizes(arg + 8, &opt->sizes)) return false;
    } else if (std::strncmp(arg, "--iters=", 8) == 0) {
      if (!ParseInt(arg + 8, &opt->iters) || opt->iters < 1) return false;
    } else if (std::strncmp(arg, "--warmup=", 9) == 0) {
      if (!ParseInt(arg + 9, &opt->warmup)) return false;
    } else {
      return false;
    }
  }
  return !opt->sizes.empty();
}

// Runs one size on every rank; returns the number of wrong elements over all ranks, the same on
// every rank so that all of them stop together. MPI errors abort the job (MPI_ERRORS_ARE_FATAL).
unsigned long long RunSize(size_t bytes, const Options& opt, int rank, int world) {
  const size_t count = bytes / sizeof(float);
  std::vector<float> data(count);
  std::vector<double> seconds;
  unsigned long long wrong = 0;
  for (int it = 0; it < opt.warmup + opt.iters; ++it) {
    kubetrain::bench::FillPattern(data.data(), count, rank, it);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    wrong += kubetrain::bench::CountWrong(data.data(), count, world, it);
    if (it >= opt.warmup) seconds.push_back(s);
  }
  std::vector<double> slowest(seconds.size());
  unsigned long long wrong_total = 0;
  MPI_Reduce(seconds.data(), slowest.data(), static_cast<int>(seconds.size()), MPI_DOUBLE, MPI_MAX,
             0, MPI_COMM_WORLD);
  MPI_Allreduce(&wrong, &wrong_total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) kubetrain::bench::PrintResult(bytes, wrong_total, slowest);
  return wrong_total;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Options opt;
  if (!Parse(argc, argv, &opt)) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "usage: mpi_allreduce --sizes=BYTES[,BYTES...] [--iters=N] [--warmup=N]\n"
                   "(sizes are byte counts, multiples of 4)\n");
    }
    MPI_Finalize();
    return 2;
  }
  bool ok = true;
  for (size_t bytes : opt.sizes) {
    // A size whose count does not fit MPI's int count cannot be expressed in one call.
    if (bytes / sizeof(float) > static_cast<size_t>(2147483647)) {
      if (rank == 0) std::fprintf(stderr, "mpi_allreduce: %zu bytes is too large\n", bytes);
      ok = false;
      break;
    }
    if (const unsigned long long wrong = RunSize(bytes, opt, rank, world); wrong != 0) {
      if (rank == 0) {
        std::fprintf(stderr, "mpi_allreduce: %zu bytes: %llu wrong elements\n", bytes, wrong);
      }
      ok = false;
      break;
    }
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
