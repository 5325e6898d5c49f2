#!/bin/sh
# Builds __NAME__.wasm with wabt's wat2wasm, function names kept.
set -eu
cd "$(dirname "$0")"
wat2wasm --debug-names plugin.wat -o __NAME__.wasm
echo "built __NAME__.wasm"
