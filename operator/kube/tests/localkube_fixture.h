// The live-server test support of kubetrain_kube_testing, under the name the live tests include;
// it lives in operator/kube/testing/localkube.h.
#pragma once

#include "operator/kube/testing/localkube.h"  // IWYU pragma: export
