# syntax=docker/dockerfile:1
# kubetrain-worker + kubetrain-ps image (kubetrain/worker:0.1.0 GPU, :0.1.0-cpu CPU), with the Fashion-MNIST data
# (Debian/Ubuntu package dataset-fashion-mnist, /usr/share/datasets/fashion-mnist). From the
# repository root:
#   GPU (default; CUDA 13 + cuDNN 9 runtime base nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04,
#   build stage the matching -cudnn-devel image: the worker's convolutions run through cuDNN;
#   machine code for sm_75, sm_80, sm_86, sm_89, sm_90 and sm_100 plus PTX for compute_100, as
#   cmake/Cuda.cmake; nodes need NVIDIA driver 580 or newer, which CUDA 13 requires; an older
#   driver makes --device=auto train on the CPU with a warning):
#     docker build -f docker/worker.Dockerfile -t kubetrain/worker:0.1.0 .
#   CPU only (debian:bookworm build, debian:bookworm-slim runtime, OpenBLAS):
#     docker build -f docker/worker.Dockerfile --build-arg VARIANT=cpu -t kubetrain/worker:0.1.0-cpu .
# Build stage: the same build as `make` (scripts/install-deps, the Makefile's cmake configure and
# build, tests off). Runtime stage: the base plus only the packages holding the binaries' shared
# libraries, found in the build stage with ldd + dpkg -S (docker/runtime-packages.sh) on the
# same distribution as the runtime base. Runs as the non-root UID 65532.
# One image for every task, as a TensorFlow program's: the ENTRYPOINT, kubetrain-entrypoint
# (worker/entrypoint/entrypoint.h), reads TF_CONFIG and execs kubetrain-ps for a ps task and
# kubetrain-worker for chief, master, worker and evaluator tasks, with the container's `args`;
# without TF_CONFIG (a one-replica TFJob) kubetrain-worker trains alone. A pod may still name the
# program (command: [kubetrain-worker] or [kubetrain-ps]); all three are on PATH.
# scripts/check-deploy (CTest deploy_check) checks every COPY source and these build commands.

ARG VARIANT=gpu
ARG CUDA_VERSION=13.0.0

# ---- build stages (BuildKit builds only the one VARIANT selects) -------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu24.04 AS build-gpu

FROM debian:bookworm AS build-cpu

FROM build-${VARIANT} AS build
# Up to the package install, this stage is byte-identical to operator.Dockerfile's (for the CPU
# variant): a builder with a layer cache installs the build packages once for both images.
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
COPY docker/runtime-packages.sh docker/
ARG VARIANT
# The build tree lives in a cache mount, so a rebuild after a source change recompiles only
# what changed (a VARIANT switch reconfigures it); the stripped binaries go to /src/dist. What
# changed is decided by content, not by the context's modification times, which COPY keeps: a
# fresh clone's are all new (make would recompile everything), and a source edited before the
# last build is older than its object (make would miss it). So every source is dated to 2000,
# then those whose content differs from the last build's (build/.sources.sha256) to now. The
# host code is compiled at make's -O2 without the debug info the strip would drop (a third of
# the compile time).
RUN --mount=type=cache,id=kubetrain-worker-build,target=/src/build \
    if [[ "$VARIANT" == gpu ]]; then \
      flags="-DKUBETRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=75-real;80-real;86-real;89-real;90-real;100-real;100-virtual"; \
    else \
      flags="-DKUBETRAIN_CUDA=OFF"; \
    fi && \
    sums=$(find CMakeLists.txt cmake proto common operator ps worker bench e2e localkube -type f \
        -print0 | xargs -0 sha256sum | LC_ALL=C sort) && \
    { [[ -f build/.sources.sha256 ]] || : > build/.sources.sha256; } && \
    find CMakeLists.txt cmake proto common operator ps worker bench e2e localkube -type f \
        -print0 | xargs -0 touch -d @946684800 && \
    LC_ALL=C comm -13 build/.sources.sha256 <(echo "$sums") | cut -c67- | xargs -r -d '\n' touch && \
    echo "$sums" > build/.sources.sha256 && \
    cmake -S . -B build -DKUBETRAIN_TESTS=OFF $flags \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" && \
    cmake --build build -j "$(nproc)" --target kubetrain-worker kubetrain-ps kubetrain-entrypoint && \
    mkdir -p dist && \
    strip --strip-debug -o dist/kubetrain-worker build/bin/kubetrain-worker && \
    strip --strip-debug -o dist/kubetrain-ps build/bin/kubetrain-ps && \
    strip --strip-debug -o dist/kubetrain-entrypoint build/bin/kubetrain-entrypoint && \
    ./docker/runtime-packages.sh dist/kubetrain-worker dist/kubetrain-ps dist/kubetrain-entrypoint \
      > dist/runtime-packages.txt && \
    echo "runtime packages: $(tr '\n' ' ' < dist/runtime-packages.txt)"

# ---- runtime stages ---------------------------------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-ubuntu24.04 AS runtime-gpu
# The NVIDIA container toolkit mounts the driver; compute is all these programs use.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility

FROM debian:bookworm-slim AS runtime-cpu

FROM runtime-${VARIANT} AS runtime
COPY --from=build /src/dist/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update -q && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      $(cat /tmp/runtime-packages.txt) dataset-fashion-mnist && \
    rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /src/dist/kubetrain-worker /src/dist/kubetrain-ps /src/dist/kubetrain-entrypoint \
     /usr/local/bin/
ENV KUBETRAIN_DATA_DIR=/usr/share/datasets/fashion-mnist
USER 65532:65532
WORKDIR /tmp
EXPOSE 2222 8080
# No CMD: a container without `command` or `args` runs its task's role, as TensorFlow's do.
ENTRYPOINT ["/usr/local/bin/kubetrain-entrypoint"]
LABEL org.opencontainers.image.title="kubetrain-worker" \
      org.opencontainers.image.description="kubetrain-worker and kubetrain-ps with Fashion-MNIST" \
      org.opencontainers.image.version="0.1.0"
