#include "localkube/tls.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/openssl_ptr.h"

namespace kubetrain::localkube {
namespace {

bool AddExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext) return false;
  return X509_add_ext(cert, ext.get(), -1) == 1;  // adds a copy
}

std::string ToPem(const std::function<int(BIO*)>& write) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!write(bio.get())) return "";
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, len);
}

}  // namespace

absl::StatusOr<TlsFiles> MakeSelfSignedCert(const std::string& dir,
                                            const std::vector<std::string>& more_ips) {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return absl::InternalError("cannot generate a TLS key");
  X509Ptr cert(X509_new());
  X509_set_version(cert.get(), 2);
  uint64_t serial = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof(serial));
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial >> 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localkube"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  std::string names = "IP:127.0.0.1,DNS:localhost";
  for (const std::string& ip : more_ips) names += ",IP:" + ip;
  if (!AddExtension(cert.get(), NID_subject_alt_name, names.c_str()) ||
      !AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExtension(cert.get(), NID_key_usage, "critical,digitalSignature,keyCertSign")) {
    return absl::InternalError("cannot add certificate extensions");
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return absl::InternalError("cannot sign the certificate");
  }
  TlsFiles files;
  files.cert_pem = ToPem([&](BIO* b) { return PEM_write_bio_X509(b, cert.get()); });
  std::string key_pem = ToPem([&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  });
  files.cert_path = dir + "/cert.pem";
  files.key_path = dir + "/key.pem";
  std::ofstream(files.cert_path) << files.cert_pem;
  if (absl::Status st = WritePrivateFile(files.key_path, key_pem); !st.ok()) return st;
  return files;
}

absl::Status WritePrivateFile(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  // A leftover temporary file keeps its old mode through O_CREAT.
  bool ok = fchmod(fd, 0600) == 0;
  for (size_t done = 0; ok && done < content.size();) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += n;
  }
  int saved = errno;
  if (close(fd) != 0) ok = false;
  if (!ok) {
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(saved)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::localkube
