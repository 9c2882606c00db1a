# syntax=docker/dockerfile:1
# kubetrain-operator image (kubetrain/operator:0.1.0), built from the repository root:
#   docker build -f docker/operator.Dockerfile -t kubetrain/operator:0.1.0 .
# Build stage: the same build as `make` (scripts/install-deps, then the Makefile's cmake configure
# and build, tests off). Runtime stage: debian:bookworm-slim plus only the packages holding the
# operator's shared libraries (ldd + dpkg -S, docker/runtime-packages.sh; the build stage fails
# when RUNTIME_PACKAGES no longer covers them), running as the non-root UID 65532.
# scripts/check-deploy (CTest deploy_check) checks every COPY source and these build commands.

ARG RUNTIME_PACKAGES="libabsl20220623 libbrotli1 libc6 libcpp-httplib0.11 libgcc-s1 libprometheus-cpp-core1.0 libssl3 libstdc++6 libyaml-cpp0.7 zlib1g"

FROM debian:bookworm AS build
# Up to the package install, this stage is byte-identical to worker.Dockerfile's (CPU variant):
# a builder with a layer cache installs the build packages once for both images.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/install-deps scripts/install-k8s-tools scripts/
RUN ./scripts/install-deps --build-only && rm -rf /var/lib/apt/lists/*
COPY CMakeLists.txt Makefile ./
COPY cmake/ cmake/
COPY proto/ proto/
COPY common/ common/
COPY operator/ operator/
COPY ps/ ps/
COPY worker/ worker/
COPY bench/ bench/
COPY e2e/ e2e/
COPY localkube/ localkube/
# The build tree lives in a cache mount, so a rebuild after a source change recompiles only
# what changed, decided by content as in worker.Dockerfile (sources dated to 2000, those whose
# content differs from the last build's to now); the stripped binary is copied out of it to
# /src/dist. It is compiled at make's -O2 without the debug info the strip would drop (a third
# of the compile time).
RUN --mount=type=cache,id=kubetrain-operator-build,target=/src/build \
    sums=$(find CMakeLists.txt cmake proto common operator ps worker bench e2e localkube -type f \
        -print0 | xargs -0 sha256sum | LC_ALL=C sort) && \
    { [[ -f build/.sources.sha256 ]] || : > build/.sources.sha256; } && \
    find CMakeLists.txt cmake proto common operator ps worker bench e2e localkube -type f \
        -print0 | xargs -0 touch -d @946684800 && \
    LC_ALL=C comm -13 build/.sources.sha256 <(echo "$sums") | cut -c67- | xargs -r -d '\n' touch && \
    echo "$sums" > build/.sources.sha256 && \
    cmake -S . -B build -DKUBETRAIN_TESTS=OFF -DKUBETRAIN_CUDA=OFF \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" && \
    cmake --build build -j "$(nproc)" --target kubetrain-operator && \
    mkdir -p dist && strip --strip-debug -o dist/kubetrain-operator build/bin/kubetrain-operator
COPY docker/runtime-packages.sh docker/
ARG RUNTIME_PACKAGES
RUN needed=$(./docker/runtime-packages.sh dist/kubetrain-operator) && \
    missing=$(comm -23 <(echo "$needed") <(tr ' ' '\n' <<<"$RUNTIME_PACKAGES" | sort -u)) && \
    if [[ -n "$missing" ]]; then \
      echo "operator.Dockerfile: add to RUNTIME_PACKAGES: $missing" >&2; exit 1; \
    fi

FROM debian:bookworm-slim AS runtime
ARG RUNTIME_PACKAGES
RUN apt-get update -q && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $RUNTIME_PACKAGES && \
    rm -rf /var/lib/apt/lists/*
COPY --from=build /src/dist/kubetrain-operator /usr/local/bin/kubetrain-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/kubetrain-operator"]
LABEL org.opencontainers.image.title="kubetrain-operator" \
      org.opencontainers.image.description="Kubernetes operator for TrainingJob (kubetrain.dev/v1)" \
      org.opencontainers.image.version="0.1.0"
