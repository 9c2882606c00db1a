// kube-controller-manager's root-ca-cert-publisher: every namespace holds a `kube-root-ca.crt`
// ConfigMap whose data is exactly {"ca.crt": <localkube's CA certificate>} and which carries the
// kubernetes.io/description annotation. The publisher puts it everywhere at start (PublishRootCa),
// and from then on reacts to the store's changes as the controller reacts to its informers: the
// ConfigMap deleted is created again, its data or annotation changed is restored, a namespace
// added gets it (namespaces also get it in the same write, namespace_companions.h). A namespace
// being terminated or gone is left alone. Writes go through Api with manager
// `kube-controller-manager`.
//
// Owns one thread that waits on the store (no periodic resync: only changes wake it; after a
// compaction of the history it looks at every namespace once, as a relist would).
#pragma once

#include <atomic>
#include <set>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "localkube/api.h"

namespace kubetrain::localkube {

class RootCaPublisher {
 public:
  RootCaPublisher(Api* api, std::string ca_pem);
  ~RootCaPublisher();
  RootCaPublisher(const RootCaPublisher&) = delete;
  RootCaPublisher& operator=(const RootCaPublisher&) = delete;

  // Publishes in every namespace, then starts following changes. The error of PublishRootCa.
  absl::Status Start();
  // Returns within about 250 ms plus the write in progress.
  void Stop();

  // Makes namespace `ns`'s ConfigMap what it must be (the thread's work; tests call it).
  void SyncNamespace(const std::string& ns);

 private:
  void Loop(int64_t after);
  // The namespaces whose ConfigMap the events after `after` may have changed; every namespace
  // when that history is gone. `after` moves past what was read.
  std::set<std::string> ChangedNamespaces(int64_t* after) const;

  Api* api_;
  const std::string ca_pem_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace kubetrain::localkube
