#!/bin/sh
# Builds __NAME__.wasm: a reactor (-buildmode=c-shared), reproducibly.
set -eu
cd "$(dirname "$0")"
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false \
  -ldflags=-buildid= -o __NAME__.wasm .
echo "built __NAME__.wasm"
