#!/usr/bin/env bash
# Checks the images `make images` builds (CTest image_check, label images): each runs as UID
# 65532; kubetrain-operator, kubetrain-worker and kubetrain-ps answer --help inside (every shared
# library present); the worker image holds Fashion-MNIST where KUBETRAIN_DATA_DIR points; the
# runtime stage holds no compiler, no -dev package and no apt lists; prints each image's size.
# Skips (exit 77) when no builder or no image is there; fails on any defect.
# Usage: image_check.sh [buildah|podman|docker]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source e2e/lib.sh

OPERATOR=kubetrain/operator:0.1.0
WORKER=kubetrain/worker:0.1.0-cpu

builder=${1:-}
if [[ -z "$builder" ]]; then
  if command -v docker >/dev/null && timeout 10 docker info >/dev/null 2>&1; then builder=docker
  elif command -v buildah >/dev/null; then builder=buildah
  elif command -v podman >/dev/null; then builder=podman
  else echo "SKIP: no image builder (scripts/install-deps installs buildah)"; exit 77
  fi
fi

have_image() {
  case "$builder" in
    buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    podman) podman image exists "$1" ;;
    docker) docker image inspect "$1" >/dev/null 2>&1 ;;
  esac
}
for image in "$OPERATOR" "$WORKER"; do
  have_image "$image" || { echo "SKIP: $image is not built ($builder); run make images"; exit 77; }
done

# config IMAGE GO-TEMPLATE: a field of the image's OCI config.
config() {
  case "$builder" in
    buildah) buildah inspect --type image --format "{{$2}}" "$1" ;;
    podman | docker) "$builder" image inspect --format "{{$2}}" "$1" ;;
  esac
}
# run_in IMAGE COMMAND...: runs COMMAND in a container of IMAGE as the image's user.
CONTAINERS=()
run_in() {
  local image=$1
  shift
  case "$builder" in
    buildah)
      local ctr
      ctr=$(buildah from --pull-never --quiet "$image")
      CONTAINERS+=("$ctr")
      timeout 60 buildah run --isolation chroot --network host "$ctr" -- "$@"
      ;;
    podman | docker) timeout 60 "$builder" run --rm --network host --entrypoint "" "$image" "$@" ;;
  esac
}
cleanup() {
  local rc=$?
  [[ ${#CONTAINERS[@]} -eq 0 ]] || buildah rm "${CONTAINERS[@]}" >/dev/null 2>&1 || true
  exit $rc
}
trap cleanup EXIT

size_mb() {  # size_mb IMAGE: the image's size in MB
  case "$builder" in
    buildah) buildah images --format '{{.Size}}' --filter "reference=$1" | head -n1 ;;
    podman | docker) "$builder" image inspect --format '{{.Size}}' "$1" |
      awk '{printf "%.0f MB\n", $1 / 1e6}' ;;
  esac
}

user_of() {
  case "$builder" in
    buildah) config "$1" .OCIv1.Config.User ;;
    podman | docker) config "$1" .Config.User ;;
  esac
}

for image in "$OPERATOR" "$WORKER"; do
  step "$image"
  user=$(user_of "$image")
  [[ ${user%%:*} == 65532 ]] || fail "$image: USER is '$user', not 65532"
  uid=$(run_in "$image" id -u) || fail "$image: cannot run id -u"
  [[ $uid == 65532 ]] || fail "$image: runs as UID $uid, not 65532"
  # No build tools or headers in the runtime stage; apt's lists removed.
  found=$(run_in "$image" sh -c 'for c in gcc g++ cc c++ cmake make; do command -v $c; done;
    dpkg-query -W -f "\${Package}\n" | grep -E -- "-dev$"; ls /var/lib/apt/lists | grep -v -x -e lock -e partial; exit 0')
  [[ -z "$found" ]] || fail "$image: the runtime stage holds build things: $(tr '\n' ' ' <<<"$found")"
  echo "$image: UID $uid, no compiler, -dev package or apt lists; size $(size_mb "$image")"
done

step "programs answer --help inside their images, with every shared library present"
check_program() {  # check_program IMAGE PROGRAM
  local out
  out=$(run_in "$1" sh -c "ldd \$(command -v $2)") || fail "$1: ldd $2 failed: $out"
  if has 'not found' <<<"$out"; then fail "$1: $2 lacks libraries: $(grep 'not found' <<<"$out")"; fi
  out=$(run_in "$1" "$2" --help 2>&1) || fail "$1: $2 --help failed: $out"
  has -i 'usage' <<<"$out" || fail "$1: $2 --help printed no usage: $out"
  echo "$1: $2 --help ok"
}
check_program "$OPERATOR" kubetrain-operator
check_program "$WORKER" kubetrain-worker
check_program "$WORKER" kubetrain-ps

step "the worker image holds Fashion-MNIST where KUBETRAIN_DATA_DIR points"
data=$(run_in "$WORKER" sh -c 'echo "$KUBETRAIN_DATA_DIR"; ls "$KUBETRAIN_DATA_DIR"')
dir=$(head -n1 <<<"$data")
[[ -n "$dir" ]] || fail "$WORKER: KUBETRAIN_DATA_DIR is not set"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  has "^$f" <<<"$data" || fail "$WORKER: $dir lacks $f (has: $(tail -n +2 <<<"$data" | tr '\n' ' '))"
done
echo "$WORKER: Fashion-MNIST in $dir"
echo "image checks passed ($builder)"
