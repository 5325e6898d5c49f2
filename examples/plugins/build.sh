#!/usr/bin/env bash
# Builds the example plugins from source. The toolchains come from
# .ci/install-toolchains (Debian packages + the AssemblyScript compiler pinned
# by filter-as/package-lock.json) and the repo's Go.
#
#   examples/plugins/build.sh              rebuild the committed .wasm files in
#                                          place and record the toolchain
#                                          versions in toolchains.txt
#   examples/plugins/build.sh --out DIR    build into DIR/<name>.wasm only
#   examples/plugins/build.sh --check      build into a temp dir and check:
#       - every module validates (wasm-validate), imports only switchyard.* and
#         wasi_snapshot_preview1.*, exports memory, sy_abi_version, sy_handle;
#       - it is byte-identical to the committed one whenever the toolchain is
#         the one recorded in toolchains.txt (all seven builds are reproducible:
#         Go with -trimpath -buildvcs=false -buildid=, the others by nature);
#         with another toolchain version a difference is reported, not failed;
#       - the unit tests pass (sdk/c, sdk/go, sdk/rust, route-go, split-rust, onchange-go,
#         threshold-rust), the C SDK also builds freestanding, and
#         sdk/wat/template.wat builds.
#
# Environment: RUSTC (default /usr/bin/rustc: Debian's, which has the wasm32
# std; a rustup rustc earlier on PATH usually has not), CLANG (default clang),
# GO (default go), WAT2WASM (default wat2wasm).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
RUSTC=${RUSTC:-/usr/bin/rustc}
CLANG=${CLANG:-clang}
GO=${GO:-go}
WAT2WASM=${WAT2WASM:-wat2wasm}

mode=build
out=""
case "${1:-}" in
  "") ;;
  --out) mode=out; out=${2:?--out needs a directory} ;;
  --check) mode=check ;;
  -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--out DIR | --check]" >&2; exit 2 ;;
esac
if [ "$mode" = check ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
if [ -n "$out" ]; then
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
fi

# dest NAME DIR: where NAME.wasm goes.
dest() {
  if [ -n "$out" ]; then echo "$out/$1.wasm"; else echo "$here/$2/$1.wasm"; fi
}

asc_version() {
  node -p "require('$here/filter-as/node_modules/assemblyscript/package.json').version" 2>/dev/null || echo none
}

toolchains() {
  echo "go: $($GO env GOVERSION)"
  echo "clang: $($CLANG --version | head -1)"
  echo "rustc: $($RUSTC --version)"
  echo "wat2wasm: $($WAT2WASM --version)"
  echo "assemblyscript: $(asc_version)"
}

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "build.sh: $1 not found; run .ci/install-toolchains" >&2; exit 1; }
}
need "$GO"; need "$CLANG"; need "$RUSTC"; need "$WAT2WASM"; need node; need npm; need wasm-ld

# ---- the builds (each from its own folder, so that relative paths embedded
# in the output, such as Rust panic locations, are the same everywhere) ------

# go_plugin NAME DIR: a Go reactor, reproducibly.
go_plugin() {
  (cd "$here/$2" &&
    GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 GOFLAGS= "$GO" build -buildmode=c-shared \
      -trimpath -buildvcs=false -ldflags=-buildid= -o "$(dest "$1" "$2")" .)
}

# rust_plugin NAME DIR SOURCE: a Rust cdylib, names kept (strip=debuginfo),
# reproducible (codegen-units=1).
rust_plugin() {
  (cd "$here/$2" &&
    "$RUSTC" --edition 2021 --crate-type cdylib --target wasm32-unknown-unknown \
      -C opt-level=s -C lto -C codegen-units=1 -C strip=debuginfo -C target-feature=+bulk-memory -C linker=wasm-ld \
      -o "$(dest "$1" "$2")" "$3")
}

build_route_go() { go_plugin route route-go; }

build_enrich_c() {
  (cd "$here/enrich-c" &&
    "$CLANG" --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor -mbulk-memory \
      -fuse-ld=lld -Wl,--strip-debug -Wall -Wextra -Werror -o "$(dest enrich enrich-c)" enrich.c)
}

build_filter_as() {
  (cd "$here/filter-as" &&
    { [ -x node_modules/.bin/asc ] || npm ci --no-audit --no-fund --loglevel=error; } &&
    npx --no-install asc assembly/index.ts -o "$(dest filter filter-as)" -O3 --runtime stub --noAssert \
      --use abort=~lib/@switchyard-router/sdk-assemblyscript/assembly/index/abort)
}

build_split_rust() { rust_plugin split split-rust split.rs; }

build_onchange_go() { go_plugin onchange onchange-go; }

build_threshold_rust() { rust_plugin threshold threshold-rust threshold.rs; }

build_passthrough_wat() {
  (cd "$here/passthrough-wat" && "$WAT2WASM" passthrough.wat -o "$(dest passthrough passthrough-wat)")
}

examples=(route-go:route enrich-c:enrich filter-as:filter split-rust:split passthrough-wat:passthrough onchange-go:onchange threshold-rust:threshold)

for e in "${examples[@]}"; do
  dir=${e%%:*}
  echo "== build $dir"
  "build_${dir//-/_}"
done

if [ "$mode" = build ]; then
  toolchains > "$here/toolchains.txt"
  echo "== toolchains (recorded in examples/plugins/toolchains.txt)"
  cat "$here/toolchains.txt"
fi
for e in "${examples[@]}"; do
  dir=${e%%:*}; name=${e##*:}
  printf '%-26s %8d bytes\n' "$dir/$name.wasm" "$(stat -c %s "$(dest "$name" "$dir")")"
done
[ "$mode" = check ] || exit 0

# ---- --check ------------------------------------------------------------------

fail=0
bad() { echo "FAIL: $*"; fail=1; }

# check_module FILE: validates it and checks its imports and exports.
check_module() {
  local f=$1 dump mods
  wasm-validate "$f" || { bad "$f does not validate"; return; }
  dump=$(wasm-objdump -x "$f")
  mods=$(sed -n 's/.* <- \([^.]*\)\..*/\1/p' <<<"$dump" | sort -u)
  for m in $mods; do
    case "$m" in
      switchyard|wasi_snapshot_preview1) ;;
      *) bad "$f imports from module \"$m\" (only switchyard and wasi_snapshot_preview1 are allowed)" ;;
    esac
  done
  for x in memory sy_abi_version sy_handle; do
    grep -q -- "-> \"$x\"" <<<"$dump" || bad "$f does not export $x"
  done
}

recorded() { # recorded LANG: the version line recorded for LANG
  sed -n "s/^$1: //p" "$here/toolchains.txt" 2>/dev/null
}
current=$(toolchains)
now() { sed -n "s/^$1: //p" <<<"$current"; }

echo "== check"
for e in "${examples[@]}"; do
  dir=${e%%:*}; name=${e##*:}
  case "$dir" in
    route-go|onchange-go) lang=go ;; enrich-c) lang=clang ;; filter-as) lang=assemblyscript ;;
    split-rust|threshold-rust) lang=rustc ;; passthrough-wat) lang=wat2wasm ;;
  esac
  built="$out/$name.wasm"; committed="$here/$dir/$name.wasm"
  check_module "$built"
  check_module "$committed"
  if cmp -s "$built" "$committed"; then
    echo "ok   $dir/$name.wasm: rebuilt byte-identical"
  elif [ "$(recorded "$lang")" = "$(now "$lang")" ]; then
    bad "$dir/$name.wasm differs from a rebuild with the same toolchain ($(now "$lang")): run 'task plugins' (examples/plugins/build.sh) and commit"
  else
    echo "warn $dir/$name.wasm differs from the rebuild, but the toolchain differs ($lang: committed with '$(recorded "$lang")', here '$(now "$lang")'): checked that it builds and validates only"
  fi
done

echo "== C SDK freestanding build (enrich-c)"
(cd "$here/enrich-c" &&
  "$CLANG" --target=wasm32 -nostdlib -ffreestanding -DSY_FREESTANDING -O2 -mbulk-memory \
    -fuse-ld=lld -Wl,--no-entry -Wall -Wextra -Werror -o "$out/enrich-freestanding.wasm" enrich.c)
check_module "$out/enrich-freestanding.wasm"
if wasm-objdump -x "$out/enrich-freestanding.wasm" | grep -q 'wasi_snapshot_preview1'; then
  bad "freestanding enrich imports WASI"
fi

echo "== WAT template (sdk/wat/template.wat)"
"$WAT2WASM" "$root/sdk/wat/template.wat" -o "$out/template.wasm"
check_module "$out/template.wasm"

echo "== unit tests: sdk/c, sdk/go, sdk/rust, route-go, split-rust, onchange-go, threshold-rust"
(cd "$root/sdk/c/test" && "$CLANG" -std=c99 -O1 -Wall -Wextra -Werror -Wno-unknown-attributes \
  -o "$out/c-sdk-test" sdk_test.c && "$out/c-sdk-test") || bad "sdk/c tests"
(cd "$root/sdk/go" && "$GO" vet ./... && GOOS=wasip1 GOARCH=wasm "$GO" vet ./... && "$GO" test ./...) || bad "sdk/go tests"
(cd "$root/sdk/rust" && "$RUSTC" --edition 2021 --test -o "$out/sdk-rust-test" switchyard.rs && "$out/sdk-rust-test") || bad "sdk/rust tests"
(cd "$here/route-go" && "$GO" vet ./... && "$GO" test ./...) || bad "route-go tests"
(cd "$here/split-rust" && "$RUSTC" --edition 2021 --test -o "$out/split-test" split.rs && "$out/split-test") || bad "split-rust tests"
(cd "$here/onchange-go" && "$GO" vet ./... && "$GO" test ./...) || bad "onchange-go tests"
(cd "$here/threshold-rust" && "$RUSTC" --edition 2021 --test -o "$out/threshold-test" threshold.rs && "$out/threshold-test") || bad "threshold-rust tests"

if [ "$fail" != 0 ]; then
  echo "== plugins-check: FAILED"
  exit 1
fi
echo "== plugins-check: ok"
