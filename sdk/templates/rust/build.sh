#!/bin/sh
# Builds __NAME__.wasm with Debian's rustc (it has the wasm32 std): function
# names kept (strip=debuginfo), so a trap says where.
set -eu
cd "$(dirname "$0")"
${RUSTC:-/usr/bin/rustc} --edition 2021 --crate-type cdylib --crate-name plugin --target wasm32-unknown-unknown \
  -C opt-level=s -C lto -C codegen-units=1 -C strip=debuginfo -C target-feature=+bulk-memory -C linker=wasm-ld \
  -o __NAME__.wasm plugin.rs
echo "built __NAME__.wasm"
