#!/usr/bin/env bash
# Installs what stoke needs to build, test and benchmark on Debian 12, as root.
# Idempotent and quiet: when every package is already installed, apt is not touched at all.
#
#   bash scripts/install-deps.sh             # everything, including python3-torch
#   bash scripts/install-deps.sh --no-torch  # skip python3-torch, -torchvision and -pil (only the
#                                            # benchmarks' PyTorch peers and the fixture generator
#                                            # tests/fixtures/make_fixtures.py use them)
set -euo pipefail

with_torch=1
for arg in "$@"; do
  case "$arg" in
    --no-torch) with_torch=0 ;;
    -h | --help)
      sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "install-deps.sh: unknown argument '$arg' (expected --no-torch)" >&2
      exit 2
      ;;
  esac
done

# libopenmpi-dev, openmpi-bin: dist::MpiCommunicator (dist/mpi.h) and mpirun for its tests.
# libpng-dev, libjpeg62-turbo-dev: decoding image folders (data/image_decode.h). clang,
# libclang-rt-dev: the libFuzzer harnesses (fuzz/, -DSTOKE_FUZZ=ON, scripts/fuzz.sh).
packages=(build-essential cmake catch2 libopenblas-dev zlib1g-dev nlohmann-json3-dev libstb-dev
  libpng-dev libjpeg62-turbo-dev clang libclang-rt-dev dataset-fashion-mnist libopenmpi-dev
  openmpi-bin)
if [[ $with_torch == 1 ]]; then
  # python3-pil: the loader benchmark's torch peer decodes PNGs with it (a recommendation of
  # python3-torch that --no-install-recommends skips). tests/peers/check_peer_imports.py checks
  # that every module a peer script imports is here. python3-torchvision: the interop twins of
  # EfficientNet-B0 and ConvNeXt are torchvision's own models (bench/torch_models.py).
  packages+=(python3-torch python3-pil python3-torchvision)
fi

# Only the packages not yet installed ("install ok installed" is dpkg's status for a complete one).
missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} == 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

if [[ $(id -u) != 0 ]]; then
  echo "install-deps: must run as root to install: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
