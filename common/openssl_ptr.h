// std::unique_ptr owners for OpenSSL objects, so that no path leaks one on an early return.
//
// Header-only, and kubetrain::common does not link OpenSSL: include it only from targets that
// link OpenSSL::Crypto themselves (kubetrain::kube, kubetrain::localkube).
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <memory>

namespace kubetrain {

// The deleter: OpenSSL's own free function (unique_ptr never calls it with nullptr).
template <auto Free>
struct OpenSslFree {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};

using BioPtr = std::unique_ptr<BIO, OpenSslFree<&BIO_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree<&EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, OpenSslFree<&X509_free>>;
using X509ExtensionPtr = std::unique_ptr<X509_EXTENSION, OpenSslFree<&X509_EXTENSION_free>>;
using X509StorePtr = std::unique_ptr<X509_STORE, OpenSslFree<&X509_STORE_free>>;

}  // namespace kubetrain
