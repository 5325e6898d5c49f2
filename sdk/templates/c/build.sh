#!/bin/sh
# Builds __NAME__.wasm with clang and wasi-libc: a reactor, function names kept.
set -eu
cd "$(dirname "$0")"
clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor -mbulk-memory \
  -fuse-ld=lld -Wl,--strip-debug -Wall -Wextra -Werror -o __NAME__.wasm plugin.c
echo "built __NAME__.wasm"
