#!/bin/sh
# Builds __NAME__.wasm with the AssemblyScript compiler (npm installs it and
# the SDK, from ./switchyard-sdk-assemblyscript, the first time).
set -eu
cd "$(dirname "$0")"
[ -x node_modules/.bin/asc ] || npm install --no-audit --no-fund --loglevel=error
npm run --silent build
echo "built __NAME__.wasm"
