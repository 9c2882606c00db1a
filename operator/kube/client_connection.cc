// kube::Client's connections (see client.h): TLS material from PEM (CA, client certificate
// and chain, key), dialling, the keep-alive pool, requests in flight and their cancellation
// (WatchCancel, Shutdown), and the error for a request that got no HTTP answer. The REST verbs
// and the reading of answers are in client.cc.
#include "operator/kube/client.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <mutex>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/openssl_ptr.h"

namespace kubetrain::kube {
namespace {

constexpr int kPoolSize = 8;
constexpr absl::Duration kMaxIdle = absl::Seconds(20);
constexpr char kTlsVerificationPayload[] = "type.kubetrain.dev/tls-verification";

// PEM text → OpenSSL objects.
BioPtr PemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

X509StorePtr CaStore(const std::string& pem) {
  BioPtr bio = PemBio(pem);
  X509StorePtr store(X509_STORE_new());
  while (X509Ptr cert{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) {
    X509_STORE_add_cert(store.get(), cert.get());  // takes a reference of its own
  }
  return store;
}

X509Ptr Cert(const std::string& pem) {
  return X509Ptr(PEM_read_bio_X509(PemBio(pem).get(), nullptr, nullptr, nullptr));
}

// The certificates after the first in `pem` (intermediates) are sent with the client
// certificate, as Go's tls.X509KeyPair does.
void AddChain(SSL_CTX* ctx, const std::string& pem) {
  BioPtr bio = PemBio(pem);
  if (X509Ptr leaf{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) {
    while (X509Ptr cert{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) {
      SSL_CTX_add1_chain_cert(ctx, cert.get());  // add1: takes a reference of its own
    }
  }
  // Reading stops at the end of the text with an error left on this thread's queue.
  ERR_clear_error();
}

EvpPkeyPtr Key(const std::string& pem) {
  return EvpPkeyPtr(PEM_read_bio_PrivateKey(PemBio(pem).get(), nullptr, nullptr, nullptr));
}

}  // namespace

bool IsTlsVerificationError(const absl::Status& s) {
  return s.GetPayload(kTlsVerificationPayload).has_value();
}

void WatchCancel::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (conn_ != nullptr) conn_->stop();
}

bool WatchCancel::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void WatchCancel::Attach(httplib::ClientImpl* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  conn_ = conn;
}

void WatchCancel::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  conn_ = nullptr;
}

absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> Client::Connect(
    absl::Duration read_timeout, const ExecCredentialProvider::Credential* exec_cred) {
  std::unique_ptr<httplib::ClientImpl> conn;
  if (config_.scheme == "https") {
    std::unique_ptr<httplib::SSLClient> ssl;
    bool from_exec = exec_cred != nullptr && !exec_cred->client_cert_pem.empty();
    const std::string& cert_pem = from_exec ? exec_cred->client_cert_pem : config_.client_cert_pem;
    const std::string& key_pem = from_exec ? exec_cred->client_key_pem : config_.client_key_pem;
    if (!cert_pem.empty()) {
      X509Ptr cert = Cert(cert_pem);
      EvpPkeyPtr key = Key(key_pem);
      if (cert == nullptr || key == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(config_.source, from_exec ? ": the exec plugin's" : ":",
                         " client certificate or key is not valid PEM"));
      }
      // The client's SSL_CTX takes references of its own.
      ssl = std::make_unique<httplib::SSLClient>(config_.host, config_.port, cert.get(), key.get());
      AddChain(ssl->ssl_context(), cert_pem);
    } else {
      ssl = std::make_unique<httplib::SSLClient>(config_.host, config_.port);
    }
    // The client owns the store from here on.
    if (!config_.ca_pem.empty()) ssl->set_ca_cert_store(CaStore(config_.ca_pem).release());
    ssl->enable_server_certificate_verification(!config_.insecure_skip_tls_verify);
    conn = std::move(ssl);
  } else {
    conn = std::make_unique<httplib::ClientImpl>(config_.host, config_.port);
  }
  // Microseconds: a sub-second timeout (the leader elector's) must not truncate to 0 s.
  conn->set_connection_timeout(
      absl::ToChronoMicroseconds(std::min(absl::Seconds(5), options_.timeout)));
  conn->set_read_timeout(absl::ToChronoMicroseconds(read_timeout));
  conn->set_write_timeout(absl::ToChronoMicroseconds(options_.timeout));
  conn->set_keep_alive(true);
  // httplib sends a request's headers and body in separate writes; with Nagle on, the body of
  // every POST/PUT/PATCH waits for the server's delayed ACK (~40 ms on Linux), which capped each
  // pooled connection near 25 writes/s. Go's client (kubectl, client-go) sets it too.
  conn->set_tcp_nodelay(true);
  return conn;
}

std::unique_ptr<httplib::ClientImpl> Client::TakeConnection(int64_t cert_generation) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  // The exec plugin's certificate changed: connections made with the old one are closed, as
  // client-go closes them on rotation.
  std::erase_if(pool_,
                [&](const PooledConnection& p) { return p.cert_generation != cert_generation; });
  // Servers close idle keep-alive connections (often after 30 s); a TLS connection closed that
  // way still looks alive to httplib and fails on first use. Drop connections idle that long.
  absl::Time now = absl::Now();
  while (!pool_.empty() && now - pool_.back().last_used > kMaxIdle) pool_.pop_back();
  if (pool_.empty()) return nullptr;
  auto conn = std::move(pool_.back().conn);
  pool_.pop_back();
  return conn;
}

void Client::ReturnConnection(std::unique_ptr<httplib::ClientImpl> conn, int64_t cert_generation) {
  if (exec_ != nullptr && exec_->cert_generation() != cert_generation) return;
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (pool_.size() < kPoolSize) pool_.push_back({std::move(conn), absl::Now(), cert_generation});
}

absl::Status Client::TransportError(const std::string& what, httplib::ClientImpl& conn,
                                    int error_code) {
  if (shutdown_.load()) return absl::CancelledError(what + ": the client is shutting down");
  auto error = static_cast<httplib::Error>(error_code);
  std::string server = absl::StrCat(config_.scheme, "://", config_.host, ":", config_.port);
  if (error == httplib::Error::SSLServerVerification) {
    long result = X509_V_OK;
    if (auto* ssl = dynamic_cast<httplib::SSLClient*>(&conn)) {
      result = ssl->get_openssl_verify_result();
    }
    std::string why = result == X509_V_OK ? "its certificate does not name host " + config_.host
                                          : X509_verify_cert_error_string(result);
    std::string ca = config_.ca_source.empty()
                         ? std::string("the system's trusted CAs (no certificate-authority given)")
                         : "the CA in " + config_.ca_source;
    absl::Status s = absl::UnavailableError(absl::StrCat(
        what, ": TLS certificate verification of the API server ", server, " failed: ", why,
        "; verified against ", ca,
        ". Give the cluster's CA (certificate-authority) or the right server in ", config_.source));
    s.SetPayload(kTlsVerificationPayload, absl::Cord(server));
    return s;
  }
  std::string hint;
  if (error == httplib::Error::SSLConnection) {
    hint = " (the TLS handshake failed: does the server speak HTTPS?)";
  } else if (error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout) {
    hint = absl::StrCat(" (is it running, and is the server in ", config_.source, " right?)");
  }
  return absl::UnavailableError(absl::StrCat(what, ": cannot reach the API server at ", server,
                                             ": ", httplib::to_string(error), hint));
}

void Client::TrackInFlight(httplib::ClientImpl* conn, bool add) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (add) {
    in_flight_.push_back(conn);
    // Shutdown may have run between the caller's check and here: stop this one too.
    if (shutdown_.load()) conn->stop();
  } else {
    std::erase(in_flight_, conn);
  }
}

void Client::Shutdown() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  shutdown_ = true;
  for (httplib::ClientImpl* conn : in_flight_) conn->stop();
}

}  // namespace kubetrain::kube
