#include "worker/collective/tcp_ring.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/collective/float_reductions.h"
#include "worker/core/random.h"

namespace kubetrain::worker {
namespace {

// How long a waiting rank keeps trying its sockets before it sleeps in poll(): a neighbour's
// next bytes usually come within microseconds, and a sleep and a wake-up cost tens of them.
constexpr absl::Duration kSpinFor = absl::Milliseconds(1);
// A sleeping rank wakes at least this often to look at the stop flag and the clock.
constexpr int kPollMillis = 2;
// The greeting a dialling rank sends: "ktring1 <its rank> <the listener's nonce>\n", padded.
constexpr size_t kHelloBytes = 64;
constexpr absl::string_view kHelloMagic = "ktring1";

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("tcp ring: ", what, ": ", std::strerror(errno)));
}

// The first address `host` resolves to (numeric or a name), with `port`.
absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("tcp ring: cannot resolve \"", host, "\": ", ::gai_strerror(rc)));
  }
  return found;
}

// Both ring sockets are made non-blocking where they are created (socket, accept4).
void SetNoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Waits for `events` on `fd` until `deadline`; false on timeout.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(
        &p, 1,
        static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, kPollMillis * 50)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// Writes or reads all of `bytes` on the non-blocking `fd` by `deadline`.
bool WriteAll(int fd, const char* data, size_t bytes, absl::Time deadline) {
  while (bytes > 0) {
    const ssize_t n = ::send(fd, data, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      bytes -= static_cast<size_t>(n);
    } else if ((n < 0 && errno != EAGAIN && errno != EINTR) || !WaitFor(fd, POLLOUT, deadline)) {
      return false;
    }
  }
  return true;
}

bool ReadAll(int fd, char* data, size_t bytes, absl::Time deadline) {
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, data, bytes, 0);
    if (n > 0) {
      data += n;
      bytes -= static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR) || !WaitFor(fd, POLLIN, deadline)) {
      return false;
    }
  }
  return true;
}

// Dials host:port until it answers or `deadline` passes (the neighbour may not listen yet).
absl::StatusOr<int> Dial(const std::string& host, int port, absl::Time deadline) {
  ASSIGN_OR_RETURN(addrinfo * found, Resolve(host, port));
  absl::Cleanup free_found = [&] { ::freeaddrinfo(found); };
  while (true) {
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Errno("socket");
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) return fd;
    if (errno == EINPROGRESS && WaitFor(fd, POLLOUT, deadline)) {
      int error = 0;
      socklen_t len = sizeof(error);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0) return fd;
    }
    ::close(fd);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("tcp ring: could not connect to ", JoinHostPort(host, port)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::string Hello(int rank, const std::string& nonce) {
  std::string hello = absl::StrCat(kHelloMagic, " ", rank, " ", nonce, "\n");
  hello.resize(kHelloBytes, ' ');
  return hello;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpRing>> TcpRing::Connect(KeyValueStore& store,
                                                          const TcpRingOptions& options) {
  const int n = options.size;
  if (n < 1 || options.rank < 0 || options.rank >= n) {
    return absl::InvalidArgumentError(absl::StrCat("tcp ring: rank ", options.rank, " of ", n));
  }
  const int next = (options.rank + 1) % n, previous = (options.rank + n - 1) % n;
  std::unique_ptr<TcpRing> ring(new TcpRing(options));
  if (n == 1) return ring;
  const absl::Time deadline = absl::Now() + options.timeout;

  // 1. Listen on this rank's address (any port) and say where, with a nonce the dialler must
  // bring back.
  ASSIGN_OR_RETURN(addrinfo * local, Resolve(options.hostname, 0));
  absl::Cleanup free_local = [&] { ::freeaddrinfo(local); };
  const int listener = ::socket(local->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listener < 0) return Errno("socket");
  absl::Cleanup close_listener = [&] { ::close(listener); };
  if (::bind(listener, local->ai_addr, local->ai_addrlen) != 0) {
    return Errno(absl::StrCat("bind ", options.hostname));
  }
  if (::listen(listener, 16) != 0) return Errno("listen");
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    return Errno("getsockname");
  }
  const int port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const std::string nonce = RandomHexId() + RandomHexId();
  RETURN_IF_ERROR(store.Set(absl::StrCat("ring/", options.rank),
                            absl::StrCat(options.hostname, " ", port, " ", nonce)));

  // 2. Dial the next rank and greet it with its nonce (the connection completes in its
  // listen queue, so every rank can dial before any accepts).
  ASSIGN_OR_RETURN(std::string said,
                   store.Get(absl::StrCat("ring/", next), deadline - absl::Now()));
  std::vector<std::string> parts = absl::StrSplit(said, ' ');
  int next_port = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &next_port) || next_port < 1 ||
      next_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("tcp ring: rank ", next, " published a malformed address \"", said, "\""));
  }
  ASSIGN_OR_RETURN(ring->next_fd_, Dial(parts[0], next_port, deadline));
  const std::string hello = Hello(options.rank, parts[2]);
  if (!WriteAll(ring->next_fd_, hello.data(), hello.size(), deadline)) {
    return Errno(absl::StrCat("greeting rank ", next));
  }

  // 3. Accept the previous rank: the first connection that brings this rank's nonce and the
  // previous rank's number (anything else is closed and the wait goes on).
  const std::string expected = Hello(previous, nonce);
  while (ring->previous_fd_ < 0) {
    if (!WaitFor(listener, POLLIN, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("tcp ring: rank ", previous,
                                                      " did not connect within ",
                                                      absl::FormatDuration(options.timeout)));
    }
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    std::string got(kHelloBytes, '\0');
    const absl::Time greet_by = std::min(deadline, absl::Now() + absl::Seconds(5));
    if (ReadAll(fd, got.data(), got.size(), greet_by) && got == expected) {
      ring->previous_fd_ = fd;
    } else {
      log::Warn(
          "Turned away a connection to the all-reduce ring that did not greet as this "
          "rank's neighbour",
          {{"rank", options.rank}, {"neighbour", previous}});
      ::close(fd);
    }
  }
  SetNoDelay(ring->next_fd_);
  SetNoDelay(ring->previous_fd_);
  return ring;
}

TcpRing::TcpRing(const TcpRingOptions& options)
    : options_(options), next_fd_(-1), previous_fd_(-1) {}

TcpRing::~TcpRing() { Shutdown(); }

void TcpRing::Shutdown() {
  for (int* fd : {&next_fd_, &previous_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

absl::StatusOr<bool> TcpRing::SendSome(const char* out, size_t bytes, size_t* sent) {
  if (*sent >= bytes) return false;
  const ssize_t k = ::send(next_fd_, out + *sent, bytes - *sent, MSG_NOSIGNAL);
  if (k > 0) {
    *sent += static_cast<size_t>(k);
    return true;
  }
  if (k < 0 && errno != EAGAIN && errno != EINTR) {
    return absl::UnavailableError(absl::StrCat("tcp ring all-reduce: sending to rank ",
                                               (options_.rank + 1) % options_.size, ": ",
                                               std::strerror(errno)));
  }
  return false;
}

absl::StatusOr<bool> TcpRing::ReceiveSome(char* in, size_t bytes, size_t* received) {
  if (*received >= bytes) return false;
  const ssize_t k = ::recv(previous_fd_, in + *received, bytes - *received, 0);
  if (k > 0) {
    *received += static_cast<size_t>(k);
    return true;
  }
  if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
    const int previous = (options_.rank + options_.size - 1) % options_.size;
    return absl::UnavailableError(
        absl::StrCat("tcp ring all-reduce: rank ", previous,
                     k == 0 ? " closed its connection (stopped or gone)" : "'s connection failed: ",
                     k == 0 ? "" : std::strerror(errno)));
  }
  return false;
}

absl::Status TcpRing::WaitIdle(absl::Time* idle_since, absl::Time deadline, bool can_send,
                               bool can_receive) {
  const absl::Time now = absl::Now();
  if (*idle_since == absl::InfiniteFuture()) *idle_since = now;
  if (now - *idle_since < kSpinFor) {
    ::sched_yield();  // a peer sharing this CPU (ranks on one host) runs now, not at the poll
    return absl::OkStatus();
  }
  // Idle for a while: sleep until a socket is ready, looking at the stop flag and the clock.
  if (options_.stop != nullptr && options_.stop->load()) {
    return absl::CancelledError("tcp ring all-reduce: stopped");
  }
  if (now >= deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat("tcp ring all-reduce: a peer did not send or receive within ",
                     absl::FormatDuration(options_.timeout), " (stalled or gone)"));
  }
  // A direction with nothing to do is left out (fd -1): a socket its peer closed would otherwise
  // report POLLHUP at once, every time.
  pollfd p[2] = {{can_send ? next_fd_ : -1, POLLOUT, 0},
                 {can_receive ? previous_fd_ : -1, POLLIN, 0}};
  ::poll(p, 2, kPollMillis);
  return absl::OkStatus();
}

namespace {

// INVALID_ARGUMENT for the first value of `values` that was finite but is not once in `wire`
// (`encoded`): fp16's range overflowed. Values that were already inf or NaN pass as they are.
absl::Status CheckEncoded(ps::WireFloat wire, const float* values, const uint16_t* encoded,
                          size_t count, size_t first_element) {
  if (wire != ps::WireFloat::kFloat16) return absl::OkStatus();
  bool any = false;  // one branch-free pass for the usual case, where there is none
  for (size_t i = 0; i < count; ++i) any |= (encoded[i] & 0x7c00u) == 0x7c00u;
  if (!any) return absl::OkStatus();
  for (size_t i = 0; i < count; ++i) {
    if ((encoded[i] & 0x7c00u) == 0x7c00u && std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gradient-compression=fp16: element ", first_element + i,
          " of an all-reduced gradient buffer is ", values[i],
          ", beyond fp16's largest value 65504; use --gradient-compression=bf16 (float32's "
          "range) or none, or lower the learning rate if the gradients diverge"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TcpRing::AllReduce(float* data, size_t count, ReduceOp op, ps::WireFloat wire) {
  RETURN_IF_ERROR(broken_);
  const int n = options_.size;
  if (n == 1 || count == 0) return absl::OkStatus();
  if (next_fd_ < 0) return absl::FailedPreconditionError("tcp ring: closed");
  const absl::Time deadline = absl::Now() + options_.timeout;
  if (absl::Status e = Stream(data, count, FloatReductionFor(op), wire, deadline); !e.ok()) {
    broken_ = e;
    Shutdown();  // the neighbours' next read fails instead of waiting out their timeout
    return e;
  }
  return absl::OkStatus();
}

absl::Status TcpRing::Stream(float* data, size_t count, FloatReduction reduce, ps::WireFloat wire,
                             absl::Time deadline) {
  const int n = options_.size, r = options_.rank, steps = 2 * (n - 1);
  // Parts as long in values whatever the wire: a compressed exchange moves half the bytes.
  const size_t segment_values = kPartBytes / sizeof(float) * static_cast<size_t>(n);
  const size_t segments = (count + segment_values - 1) / segment_values;
  // What crosses the wire: the float32 values themselves, or their 16-bit codes in wire_.
  const bool compressed = wire != ps::WireFloat::kFloat32;
  const size_t width = ps::WireFloatBytes(wire);
  const size_t longest = std::min(segment_values, count);
  received_.resize(std::max(received_.size(), (longest + n - 1) / n));
  if (compressed) {
    // Sending runs at most one segment ahead of receiving and receiving one ahead of sending
    // (each direction's step t + 1 waits on the other side's step t), so segment k's codes
    // live in one of two slots, k % 2.
    wire_.resize(std::max(wire_.size(), segments > 1 ? 2 * segment_values : longest));
    wire_received_.resize(std::max(wire_received_.size(), (longest + n - 1) / n));
  }
  // Segment k: the values [off, off + len), its parts p at [begin(p), begin(p + 1)) of them.
  struct Segment {
    float* base;
    size_t off, len;
    uint16_t* codes;  // compressed: the segment's values in 16 bits, as sent and received
    size_t begin(int p, int n) const { return len * static_cast<size_t>(p) / n; }
    char* sendable(size_t at) const {  // value `at` as it crosses the wire
      return codes != nullptr ? reinterpret_cast<char*>(codes + at)
                              : reinterpret_cast<char*>(base + at);
    }
  };
  const auto segment = [&](size_t k) {
    const size_t off = k * segment_values;
    return Segment{data + off, off, std::min(segment_values, count - off),
                   compressed ? wire_.data() + (k % 2) * segment_values : nullptr};
  };
  // Step t < n - 1 is the reduce-scatter's step t, later ones the all-gather's step t - (n - 1).
  const auto out_part = [&](int t) {
    return t < n - 1 ? (r - t + 2 * n) % n : (r + 1 - (t - (n - 1)) + 2 * n) % n;
  };
  const auto in_part = [&](int t) {
    return t < n - 1 ? (r - t - 1 + 2 * n) % n : (r - (t - (n - 1)) + 2 * n) % n;
  };
  // Codes the values [from, from + count) of part p of `s` into its slot, refusing an fp16
  // overflow.
  const auto code = [&](const Segment& s, int p, size_t from, size_t count) {
    const size_t at = s.begin(p, n) + from;
    ps::Compress(wire, {s.base + at, count}, {s.codes + at, count});
    return CheckEncoded(wire, s.base + at, s.codes + at, count, s.off + at);
  };
  // Entering a segment, the sender's step 0 needs nothing received: its own part, coded.
  const auto enter = [&](const Segment& s) -> absl::Status {
    if (!compressed) return absl::OkStatus();
    const int p = out_part(0);
    return code(s, p, 0, s.begin(p + 1, n) - s.begin(p, n));
  };
  // The send and receive positions: segment, step. The streams run on across segments: the
  // first step of the next segment leaves as soon as this one's last has, instead of the link
  // idling while the last bytes of a segment arrive at the far rank (up to 3 % of a 64 MiB
  // all-reduce in 4 MiB parts between 2 ranks).
  size_t send_k = 0, receive_k = 0;
  int send_step = 0, receive_step = 0;
  Segment out = segment(0), in = segment(0);
  RETURN_IF_ERROR(enter(out));
  // Bytes of the send step's part sent; of the receive step's part received, and of those ready
  // to be sent on: reduced (the reduce-scatter's, a whole value at a time) or placed (the
  // all-gather's).
  size_t sent = 0, received = 0, ready = 0;
  absl::Time idle_since = absl::InfiniteFuture();
  while (send_k < segments || receive_k < segments) {
    bool moved = false;
    // Step t + 1 sends the part step t received: as much of it as is ready. Step 0's is.
    size_t may_send = 0;
    if (send_k < segments) {
      const int p = out_part(send_step);
      const size_t whole = (out.begin(p + 1, n) - out.begin(p, n)) * width;
      const size_t at = send_k * steps + send_step, got = receive_k * steps + receive_step;
      may_send = send_step == 0 || at <= got ? whole
                 : at == got + 1             ? ready
                                             : 0;  // after an empty part
      ASSIGN_OR_RETURN(moved, SendSome(out.sendable(out.begin(p, n)), may_send, &sent));
      if (sent == whole) {
        sent = 0;
        moved = true;
        if (++send_step == steps) {
          send_step = 0;
          if (++send_k < segments) {
            out = segment(send_k);
            RETURN_IF_ERROR(enter(out));
          }
        }
      }
    }
    if (receive_k < segments) {
      const int p = in_part(receive_step);
      const size_t whole = (in.begin(p + 1, n) - in.begin(p, n)) * width;
      float* const part = in.base + in.begin(p, n);
      const bool reducing = receive_step < n - 1;
      char* const into = reducing ? (compressed ? reinterpret_cast<char*>(wire_received_.data())
                                                : reinterpret_cast<char*>(received_.data()))
                                  : in.sendable(in.begin(p, n));
      ASSIGN_OR_RETURN(const bool receiving, ReceiveSome(into, whole, &received));
      moved |= receiving;
      const size_t done = ready / width, now = received / width;  // whole values
      uint16_t* const codes = compressed ? in.codes + in.begin(p, n) : nullptr;
      if (now > done && reducing) {
        if (compressed) {
          ps::Decompress(wire, {wire_received_.data() + done, now - done},
                         {received_.data() + done, now - done});
        }
        reduce(part + done, part + done, received_.data() + done, now - done);
        if (compressed) {
          // Coded for the next step; this rank's own, fully reduced part is rounded once and
          // kept so, the value every peer decodes from the same bits.
          RETURN_IF_ERROR(code(in, p, done, now - done));
          if (receive_step == n - 2) {
            ps::Decompress(wire, {codes + done, now - done}, {part + done, now - done});
          }
        }
      } else if (now > done && compressed) {  // the all-gather's codes, passed on as they came
        ps::Decompress(wire, {codes + done, now - done}, {part + done, now - done});
      }
      // The all-gather forwards bytes as they arrive; the reduce-scatter whole reduced values.
      ready = reducing ? now * width : received;
      if (received == whole) {
        received = ready = 0;
        moved = true;
        if (++receive_step == steps) {
          receive_step = 0;
          if (++receive_k < segments) in = segment(receive_k);
        }
      }
    }
    if (moved) {
      idle_since = absl::InfiniteFuture();
      continue;
    }
    RETURN_IF_ERROR(WaitIdle(&idle_since, deadline, send_k < segments && sent < may_send,
                             receive_k < segments));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::worker
