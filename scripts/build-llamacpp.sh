#!/usr/bin/env bash
# Build the prebuilt CPU llama-server archive that the llamacpp role installs
# and the unit tests serve the tiny model with. The source is llama.cpp as
# vendored in the llama-cpp-python sdist on PyPI (tools/server included), so
# nothing comes from anywhere but PyPI. The CMake options are the role's own
# (roles/llamacpp/files/build-llama-server.sh does the build) but for the
# optimisation level.
#
# usage: build-llamacpp.sh SDIST_VERSION SDIST_SHA256 LLAMACPP_COMMIT OUTPUT.tar.gz
# The archive holds bin/llama-server, VERSION and the licenses. A failed run
# keeps its work directory next to the output, so the next run resumes.
set -euo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 SDIST_VERSION SDIST_SHA256 LLAMACPP_COMMIT OUTPUT.tar.gz" >&2
  exit 2
fi
sdist_version=$1
sdist_sha256=$2
commit=$3
output=$4
repo_root=$(cd "$(dirname "$0")/.." && pwd -P)
pip=${PIP:-$repo_root/.venv/bin/pip}
work=$(dirname "$output")/work-$sdist_version
sdist=$work/llama_cpp_python-$sdist_version.tar.gz

mkdir -p "$work"
if [ ! -f "$work/.unpacked" ]; then
  "$pip" download --quiet --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$sdist_version"
  if ! echo "$sdist_sha256  $sdist" | sha256sum --check --quiet; then
    echo "$sdist does not have the pinned sha256 $sdist_sha256" >&2
    rm -f "$sdist"
    exit 1
  fi
  rm -rf "$work/src"
  mkdir -p "$work/src"
  tar -xzf "$sdist" -C "$work/src"
  touch "$work/.unpacked"
fi
source_dir=$(cd "$work/src/llama_cpp_python-$sdist_version/vendor/llama.cpp" && pwd -P)

# The sdist carries the vendored tree's git metadata (a shallow clone).
vendored=$(git -C "$source_dir" rev-parse --short=7 HEAD)
if [ "$vendored" != "$commit" ]; then
  echo "llama-cpp-python $sdist_version vendors llama.cpp $vendored, not $commit:" \
       "set LLAMACPP_COMMIT in the Makefile to match its pin" >&2
  exit 1
fi

stage=$work/stage
rm -rf "$stage"
start=$SECONDS
# Optimised at -O1, not CMake's Release -O3: the tests serve a tiny model, so
# the build is most of what this binary costs them. Measured on 2 CPUs
# (docs/benchmarks.md): 304 CPU-s to build instead of 435, and about a
# quarter more CPU per request served (measured without -DNDEBUG).
LLAMA_BUILD_COMMIT=$commit LLAMA_BUILD_NUMBER=0 BUILD_DIR=$work/build \
  bash "$repo_root/roles/llamacpp/files/build-llama-server.sh" "$source_dir" cpu "$stage" \
  "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"
echo "llama-server built in $((SECONDS - start)) s" >&2
echo "source=llama-cpp-python==$sdist_version (PyPI sdist)" >> "$stage/VERSION"

# MIT licenses of llama.cpp and of what it vendors into the binary.
cp "$source_dir/LICENSE" "$stage/LICENSE"
mkdir -p "$stage/licenses"
cp "$source_dir"/licenses/* "$stage/licenses/"
while IFS= read -r file; do
  name=$(dirname "${file#"$source_dir"/vendor/}" | tr / -)
  cp "$file" "$stage/licenses/LICENSE-$name"
done < <(find "$source_dir/vendor" -type f -name 'LICENSE*')

echo "dynamic libraries of llama-server:" >&2
ldd "$stage/bin/llama-server" >&2

# Fixed owner, order and times: the archive depends only on its contents.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -C "$stage" -cf - bin VERSION LICENSE licenses | gzip -n -9 > "$output.partial"
mv "$output.partial" "$output"
rm -rf "$work"
echo "wrote $output ($(du -h "$output" | cut -f1))" >&2
