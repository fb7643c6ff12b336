#!/usr/bin/env bash
# Build llama.cpp's llama-server from a source tree and install it under a
# prefix as PREFIX/bin/llama-server plus PREFIX/VERSION. Used by `make
# llamacpp` for the prebuilt CPU archive and by the llamacpp role for a source
# build on the server, so both get the same options.
#
# usage: build-llama-server.sh SOURCE_DIR BACKEND PREFIX [CMAKE_ARG...]
#   BACKEND    cpu, vulkan (GGML_VULKAN) or rocm (GGML_HIP)
#   CMAKE_ARG  passed on last, so it can override the defaults below
#              (e.g. -DGGML_NATIVE=ON, -DGPU_TARGETS=gfx1100 for rocm)
# environment:
#   BUILD_DIR           cmake build tree (SOURCE_DIR/build-BACKEND); kept, so a
#                       second run only rebuilds what changed
#   JOBS                parallel compile jobs (all CPUs)
#   LLAMA_BUILD_COMMIT  version stamp when the source has no usable git
#   LLAMA_BUILD_NUMBER  history (a release tarball or a shallow clone)
set -euo pipefail

usage() {
  echo "usage: $0 SOURCE_DIR cpu|vulkan|rocm PREFIX [CMAKE_ARG...]" >&2
  exit 2
}
[ $# -ge 3 ] || usage
source_dir=$(cd "$1" && pwd -P)
backend=$2
prefix=$3
shift 3

[ -f "$source_dir/tools/server/CMakeLists.txt" ] || {
  echo "$source_dir is not a llama.cpp source tree (no tools/server)" >&2
  exit 1
}

case $backend in
  cpu) backend_args=() ;;
  vulkan) backend_args=(-DGGML_VULKAN=ON) ;;
  rocm)
    backend_args=(-DGGML_HIP=ON)
    # ROCm's clang compiles the HIP sources; hipconfig knows where it is.
    if [ -z "${HIPCXX:-}" ] && command -v hipconfig >/dev/null; then
      HIPCXX="$(hipconfig -l)/clang"
      HIP_PATH=$(hipconfig -R)
      export HIPCXX HIP_PATH
    fi
    ;;
  *) usage ;;
esac

build_dir=${BUILD_DIR:-$source_dir/build-$backend}
jobs=${JOBS:-$(nproc)}

# llama.cpp stamps its version from git: the commit count of a shallow clone
# (the sdist's vendored copy is one) would claim build 1, so say 0 (unknown).
version_args=()
commit=${LLAMA_BUILD_COMMIT:-}
build_number=${LLAMA_BUILD_NUMBER:-}
# Only the tree's own git metadata counts, not that of a checkout it sits in.
if [ -z "$commit" ] && [ "$(git -C "$source_dir" rev-parse --show-toplevel 2>/dev/null)" = "$source_dir" ]; then
  commit=$(git -C "$source_dir" rev-parse --short=7 HEAD)
  if [ -z "$build_number" ]; then
    if [ "$(git -C "$source_dir" rev-parse --is-shallow-repository)" = true ]; then
      build_number=0
    else
      build_number=$(git -C "$source_dir" rev-list --count HEAD)
    fi
  fi
fi
if [ -n "$commit" ]; then
  version_args+=("-DLLAMA_BUILD_COMMIT=$commit")
fi
if [ -n "$build_number" ]; then
  version_args+=("-DLLAMA_BUILD_NUMBER=$build_number")
fi

options=(
  -DCMAKE_BUILD_TYPE=Release
  # ggml and llama linked into the binary: one file to install, no rpath.
  -DBUILD_SHARED_LIBS=OFF
  # Portable (on x86-64: AVX2, FMA, F16C) rather than tuned to the build machine's CPU.
  -DGGML_NATIVE=OFF
  # The web UI is otherwise downloaded at build time; the API does not need it.
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  # Plain HTTP behind the host's proxy; no libssl at run time.
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  # Source paths in assertion messages relative to the tree, not this machine.
  "-DCMAKE_C_FLAGS=-ffile-prefix-map=$source_dir/=llama.cpp/"
  "-DCMAKE_CXX_FLAGS=-ffile-prefix-map=$source_dir/=llama.cpp/"
)

mkdir -p "$build_dir"
cmake -S "$source_dir" -B "$build_dir" "${options[@]}" "${backend_args[@]}" "${version_args[@]}" "$@" \
  | tee "$build_dir/configure.log"
version=$(sed -n 's/^-- llama.cpp version: //p' "$build_dir/configure.log")
cmake --build "$build_dir" --target llama-server -j "$jobs"

mkdir -p "$prefix/bin"
install -m 0755 "$build_dir/bin/llama-server" "$prefix/bin/llama-server"
# key=value lines: what this binary was built from, for the role and for people.
cat > "$prefix/VERSION" <<EOF
version=${version:-unknown}
commit=${commit:-unknown}
build_number=${build_number:-unknown}
backend=$backend
EOF
echo "installed $prefix/bin/llama-server ($backend, commit ${commit:-unknown})"
