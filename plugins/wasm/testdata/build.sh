#!/bin/sh
# Compiles the test plugins: every *.wat here into the *.wasm beside it.
# The .wasm files are committed, so the tests need no wabt; run this after
# changing a .wat (Debian: apt-get install wabt).
set -eu
cd "$(dirname "$0")"
for wat in *.wat; do
	wat2wasm --debug-names "$wat" -o "${wat%.wat}.wasm"
done
