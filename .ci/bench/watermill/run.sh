#!/usr/bin/env bash
# Switchyard vs the outbox a Go user would otherwise build (issue 14):
# Watermill's forwarder + watermill-sql on PostgreSQL (fresh initdb cluster,
# every setting at its default, fsync on) -> NATS JetStream, side by side
# with `router run`, both publishing to ONE standalone nats-server, both
# loaded by the router's own `router bench`, interleaved, ROUNDS rounds.
#
#   bash .ci/bench/watermill/run.sh            # as root; about 7-8 minutes
#
# Knobs (environment): ROUNDS (3), DUR (10s), SCENARIOS ("a b c d"),
# SYSTEMS ("router peer"), D_REQUESTS (600), PEER_POOL (16), PEER_POLL (10ms), KEEP=1 keeps the
# work dir, SKIP_APT=1 skips apt-get, WORK=dir (default: a new /tmp/wmbench.*).
# FORWARD=0 measures the ingest paths alone: neither system forwards (the
# router's NATS URL points at a closed port, the peer runs -no-forward), and
# SCENARIOS defaults to "a c" (end to end needs forwarding).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-10s}
FORWARD=${FORWARD:-1}
if [[ $FORWARD == 0 ]]; then
  SCENARIOS=${SCENARIOS:-"a c"}
  if [[ " $SCENARIOS " == *" b "* || " $SCENARIOS " == *" d "* ]]; then
    echo "FORWARD=0 runs the ingest scenarios only (a, c): end to end (b, d) needs forwarding" >&2
    exit 2
  fi
fi
SCENARIOS=${SCENARIOS:-"a b c d"}
SYSTEMS=${SYSTEMS:-"router peer"}
PEER_POOL=${PEER_POOL:-16}
PEER_POLL=${PEER_POLL:-10ms}
# Scenario d sends a fixed D_REQUESTS batches (not DUR): 10 s of closed-loop
# batch ingest is ~500k events, of which the Watermill forwarder had moved
# only ~200k after 9.5 minutes (README.md, "Scenario d").
D_REQUESTS=${D_REQUESTS:-600}
NATS_PORT=${NATS_PORT:-14222}
PG_PORT=${PG_PORT:-55432}
NATS_SERVER_VERSION=$(awk '$1=="github.com/nats-io/nats-server/v2"{print $2}' "$ROOT/go.mod")

W=${WORK:-$(mktemp -d /tmp/wmbench.XXXXXX)}
mkdir -p "$W"/bin "$W"/out
chmod 755 "$W"
OUT=$W/out
log() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$OUT/run.log" >&2; }

PIDS=()
cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [[ -n "${PGBIN:-}" && -f "$W/pg/data/postmaster.pid" ]]; then
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg/data" -m fast -w stop >/dev/null 2>&1
  fi
  if [[ "${KEEP:-0}" != 1 ]]; then
    # keep only the reports
    rm -rf "$W/pg" "$W/js" "$W"/router-data-* "$W/bin"
    log "reports kept in $OUT (set KEEP=1 to keep the data dirs too)"
  fi
}
trap cleanup EXIT

# --- PostgreSQL: whatever major version Debian has -------------------------
if [[ "${SKIP_APT:-0}" != 1 ]]; then
  log "apt-get update && apt-get install -y postgresql"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
log "PostgreSQL: $("$PGBIN/postgres" --version)"
id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres

mkdir -p "$W/pg"
chown postgres: "$W/pg"
log "initdb (defaults) in $W/pg/data"
runuser -u postgres -- "$PGBIN/initdb" -D "$W/pg/data" -U postgres >"$OUT/initdb.log" 2>&1
# Only where to listen is given on the command line: a unix socket in the work
# dir, no TCP. Every other setting is initdb's postgresql.conf, untouched.
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg/data" -l "$W/pg/postgres.log" -w \
  -o "-k $W/pg -p $PG_PORT -c listen_addresses=''" start >/dev/null
export PGOPTIONS="-c client_min_messages=warning"
PSQL=("$PGBIN/psql" -h "$W/pg" -p "$PG_PORT" -U postgres -d postgres -X -q -At)
PGDSN="host=$W/pg port=$PG_PORT user=postgres dbname=postgres sslmode=disable"
"${PSQL[@]}" -F ' = ' -c "SELECT name, setting FROM pg_settings WHERE name IN
  ('server_version','fsync','synchronous_commit','wal_sync_method','full_page_writes','commit_delay',
   'wal_level','shared_buffers','max_connections','max_wal_size','checkpoint_timeout') ORDER BY name" \
  | tee "$OUT/pg-settings.txt" | sed 's/^/    /' >&2

# --- binaries ----------------------------------------------------------------
log "building nats-server $NATS_SERVER_VERSION, the router and the peer"
GOBIN="$W/bin" go install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
(cd "$ROOT" && go build -o /tmp/router-bench-bin ./cmd/router)
cp /tmp/router-bench-bin "$W/bin/router"
(cd "$HERE" && go build -o "$W/bin/watermill-peer" .)
ROUTER=$W/bin/router
PEER=$W/bin/watermill-peer
(cd "$ROOT" && git log -1 --format='router commit: %h %cI' && git status --porcelain --untracked-files=no | sed 's/^/  dirty: /') >"$OUT/versions.txt"
(cd "$HERE" && go list -m github.com/ThreeDotsLabs/watermill github.com/ThreeDotsLabs/watermill-sql/v4 \
  github.com/ThreeDotsLabs/watermill-nats/v2 github.com/jackc/pgx/v5 github.com/nats-io/nats.go) >>"$OUT/versions.txt"
"$W/bin/nats-server" --version >>"$OUT/versions.txt"
go version >>"$OUT/versions.txt"
sed 's/^/    /' "$OUT/versions.txt" >&2

# --- one standalone JetStream server, default settings, file store ----------
"$W/bin/nats-server" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$W/js" >"$OUT/nats-server.log" 2>&1 &
NATS_PID=$!
PIDS+=("$NATS_PID")
NURL=nats://127.0.0.1:$NATS_PORT
for _ in $(seq 100); do "$PEER" -nats "$NURL" -setup-stream 2>/dev/null && break; sleep 0.1; done

ROUTER_NURL=$NURL PEER_FORWARD=()
if [[ $FORWARD == 0 ]]; then ROUTER_NURL=nats://127.0.0.1:1 PEER_FORWARD=(-no-forward); fi
cat >"$W/router.hcl" <<EOF
listen  { socket = "$W/router.sock" }
storage { path = "$W/router-data/router.db" }
nats "js" {
  url = "$ROUTER_NURL"
  stream "events" {
    subjects   = ["demo.>"]
    storage    = "file"
    duplicates = "2m"
  }
}
event "demo.greeting" {
  route {
    to      = "nats.js"
    subject = "demo.greeting"
  }
  polling { min = "10ms" }
}
EOF

# scenario -> bench flags
declare -A FLAGS=(
  [a]="-c 64 -d $DUR"
  [b]="-c 64 -d $DUR -e2e"
  [c]="-c 16 -batch 100 -d $DUR"
  [d]="-c 16 -batch 100 -n $D_REQUESTS -e2e"
)
declare -A NAME=(
  [a]="single events, 64 clients: ingest"
  [b]="single events, 64 clients: end to end"
  [c]="batches of 100, 16 clients: ingest"
  [d]="batches of 100, 16 clients: end to end, $((D_REQUESTS * 100)) events (-n $D_REQUESTS)"
)

cpu_of() { # utime+stime in clock ticks of a pid
  awk '{sub(/.*\) /,""); print $12+$13}' "/proc/$1/stat"
}
wait_socket() { # socket pid
  for _ in $(seq 300); do
    curl -sf --unix-socket "$1" http://x/healthz >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

start_router() {
  rm -rf "$W/router-data"
  mkdir -p "$W/router-data"
  "$ROUTER" run -config "$W/router.hcl" -log-level warn >>"$OUT/router.log" 2>&1 &
  SUT_PID=$!
  SOCK=$W/router.sock
}
start_peer() {
  "${PSQL[@]}" -c 'DROP TABLE IF EXISTS watermill_forwarder, watermill_offsets_forwarder'
  "$PEER" -socket "$W/peer.sock" -pg "$PGDSN" -pg-data "$W/pg/data" -nats "$NURL" \
    -pool "$PEER_POOL" -poll "$PEER_POLL" "${PEER_FORWARD[@]}" >>"$OUT/peer.log" 2>&1 &
  SUT_PID=$!
  SOCK=$W/peer.sock
}

one_run() { # system scenario round
  local sys=$1 sc=$2 r=$3 f="$OUT/$1-$2-$3.txt" probe=()
  "$PEER" -nats "$NURL" -setup-stream -purge
  "start_$sys"
  PIDS+=("$SUT_PID")
  if ! wait_socket "$SOCK" "$SUT_PID"; then
    log "$sys did not come up; see $OUT/$sys.log"
    exit 1
  fi
  [[ $sc == a ]] && probe=(-fsync-probe "$W")
  local load n0 n1 rc=0
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  n0=$(cpu_of "$NATS_PID")
  # shellcheck disable=SC2086
  "$ROUTER" bench -socket "$SOCK" -config "$W/router.hcl" -nats-url "$NURL" ${FLAGS[$sc]} "${probe[@]}" >"$f" 2>&1 || rc=$?
  n1=$(cpu_of "$NATS_PID")
  echo "loadavg before $load" >>"$f"
  echo "nats-server cpu_ticks $((n1 - n0))" >>"$f"
  kill "$SUT_PID"
  wait "$SUT_PID" 2>/dev/null || true
  unset 'PIDS[-1]'
  log "$sys ($sc, round $r): $(grep -E '^throughput' "$f" | sed 's/throughput *//') $(grep -E '^end to end +[0-9]' "$f" | sed 's/ (.*//;s/end to end */| e2e /') [load $load]"
  ((rc == 0)) || log "  bench exited $rc: $(tail -1 "$f")"
}

log "work dir $W; $ROUNDS rounds of scenarios [$SCENARIOS] x [$SYSTEMS], $DUR each"
T0=$SECONDS
for r in $(seq "$ROUNDS"); do
  for sc in $SCENARIOS; do
    # interleaved; who goes first alternates by round
    if ((r % 2)); then order=$SYSTEMS; else order=$(echo "$SYSTEMS" | awk '{for(i=NF;i>0;i--) printf "%s ", $i}'); fi
    for sys in $order; do one_run "$sys" "$sc" "$r"; done
  done
done
log "runs done in $((SECONDS - T0)) s"

# --- table ---------------------------------------------------------------------
# fields of one report: ingest ev/s, req p50, req p99, e2e ev/s, e2e p50, e2e p99, missing, cpu us/ev, nats cpu us/ev, errors
extract() {
  awk '
    function ms(v) { sub(/ms$/, "", v); return v }
    /^throughput/   { ev=$4; events=$8; sub(/^\(/, "", events) }
    /^latency/      { p50=ms($3); p99=ms($7) }
    /^errors/       { err=$0; sub(/^errors +/, "", err); gsub(/ /, "", err) }
    /^end to end +[0-9]/ { e2e=$4; for(i=1;i<NF;i++) if($i=="missing") { miss=$(i+1); sub(/,$/, "", miss) } }
    /^e2e latency/  { ep50=ms($4); ep99=ms($8) }
    /^router /      { cpu=$2 }
    /^nats-server cpu_ticks/ { nt=$3 }
    END {
      ncpu = (events > 0) ? sprintf("%.1f", nt*10000/events) : "-"
      printf "%s %s %s %s %s %s %s %s %s %s\n", ev+0, p50, p99, (e2e==""?"-":e2e), (ep50==""?"-":ep50), (ep99==""?"-":ep99), (miss==""?"-":miss), (cpu==""?"-":cpu), ncpu, (err==""?"?":err)
    }' "$1"
}
median() { printf '%s\n' "$@" | grep -v '^-$' | sort -g | awk '{a[NR]=$1} END{ if(NR==0) print "-"; else if(NR%2) print a[(NR+1)/2]; else printf "%g\n", (a[NR/2]+a[NR/2+1])/2 }'; }

{
  echo "| scenario | system | ingest events/s | request p50 / p99 ms | e2e events/s | e2e p50 / p99 ms | missing | CPU µs/event (router; peer + PostgreSQL) | nats-server CPU µs/event | errors |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for sc in $SCENARIOS; do
    for sys in $SYSTEMS; do
      cols=()
      for r in $(seq "$ROUNDS"); do cols+=("$(extract "$OUT/$sys-$sc-$r.txt")"); done
      col() { for c in "${cols[@]}"; do echo "$c" | cut -d' ' -f"$1"; done; }
      runs() { col "$1" | paste -sd/ | sed 's#/# / #g'; }
      label=$sys; [[ $sys == peer ]] && label="Watermill+PG"
      printf '| %s | %s | **%s** (%s) | %s / %s | %s (%s) | %s / %s | %s | %s (%s) | %s | %s |\n' \
        "${NAME[$sc]}" "$label" \
        "$(median $(col 1))" "$(runs 1)" "$(median $(col 2))" "$(median $(col 3))" \
        "$(median $(col 4))" "$(runs 4)" "$(median $(col 5))" "$(median $(col 6))" \
        "$(runs 7)" "$(median $(col 8))" "$(runs 8)" "$(median $(col 9))" "$(runs 10)"
    done
  done
} | tee "$OUT/table.md"
echo
echo "fsync probe (4 KiB write + fdatasync, $W): $(grep -h '^fsync probe' "$OUT"/*-a-*.txt | awk '{print $3}' | paste -sd' ') fsyncs/s"  | tee -a "$OUT/table.md"
echo "load average before each run: $(grep -h '^loadavg' "$OUT"/*.txt | awk '{print $3}' | sort -g | paste -sd' ')" | tee -a "$OUT/table.md"
echo "medians of $ROUNDS runs; raw runs in brackets in round order; reports in $OUT" | tee -a "$OUT/table.md"
