#!/bin/sh
# The wheel folder the prepared GPU check (`python -m benchmarks gpu_check --full`) carries to a
# GPU host that has no network: swapd's wheel, its dependencies' and NVIDIA's CUDA bindings
# (`cuda-bindings`, the `cuda` extra, with `cuda-pathfinder`); no torch. Built here, with this
# interpreter (the GPU host must run the same Python minor version and CPU architecture), then:
#
#   python -m venv .venv && .venv/bin/pip install --no-index --find-links dist/gpu-wheels 'swapd[cuda]'
#   .venv/bin/python -m benchmarks gpu_check --full
#
# run from a checkout of swapd (benchmarks/ and tests/support/ come from it). Prints the folder's
# size: it must stay within what a device run carries (64 MiB).
#
#   sh benchmarks/gpu_wheels.sh [FOLDER]        (default dist/gpu-wheels)
#   PYTHON=python3.12 CUDA_BINDINGS='cuda-bindings==12.9.*' sh benchmarks/gpu_wheels.sh
#
# CUDA_BINDINGS pins the bindings (default: the newest; 13.x needs a driver for CUDA 13, 580 or
# later; 12.9.* works with 570 and later, the first with the checkpoint API).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/dist/gpu-wheels}
python=${PYTHON:-python3}
bindings=${CUDA_BINDINGS:-cuda-bindings}
rm -rf "$out"
mkdir -p "$out"
# swapd and every dependency, as wheels (a dependency published only as a source is built here).
"$python" -m pip wheel --quiet --wheel-dir "$out" "$here"
# The bindings and their own dependency, binary only (they are not built from source).
"$python" -m pip download --quiet --only-binary=:all: --dest "$out" "$bindings"
ls -l "$out" | awk 'NR > 1 {printf "%10d  %s\n", $5, $9}'
du -sb "$out" | awk '{printf "%.1f MiB in all (%s)\n", $1 / 1048576, $2}'
