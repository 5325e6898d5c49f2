#!/usr/bin/env bash
# large-events-outage.sh ROUTER [DIR]: what large events cost the router while
# their sink is down (BENCHMARKS.md, "Issue 14, session 44"). Starts ROUTER on
# a fresh data directory with one type routed to a NATS server that is not
# there, posts 300 events of 900,000 bytes of data from 4 clients (router
# bench), then prints the router's peak RssAnon over 20 s of the outage and the
# CPU it used meanwhile (utime+stime from /proc). Linux only.
set -euo pipefail
BIN=$(realpath "$1")
D=${2:-/tmp/sy-large-events}
rm -rf "$D"; mkdir -p "$D"
cat > "$D/large.hcl" <<HCL
listen  { socket = "$D/router.sock" }
storage { path = "$D/router.db" }
nats "down" {
  url = "nats://127.0.0.1:1"
}
event "large" {
  route {
    to      = "nats.down"
    subject = "large"
  }
}
HCL
"$BIN" run -config "$D/large.hcl" -log-level error > "$D/router.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -S "$D/router.sock" ] && break; sleep 0.2; done
"$BIN" bench -socket "$D/router.sock" -n 300 -c 4 -data-bytes 900000 -type large
rss() { awk '/RssAnon/{print $2}' "/proc/$PID/status"; }
cpu() { awk '{print $14+$15}' "/proc/$PID/stat"; }
echo "RssAnon after the ingest: $(( $(rss) / 1024 )) MiB"
t0=$(cpu); peak=0
for _ in $(seq 40); do
  r=$(rss); [ "$r" -gt "$peak" ] && peak=$r
  sleep 0.5
done
t1=$(cpu)
echo "outage, 20 s: peak RssAnon $(( peak / 1024 )) MiB, router CPU $(( (t1 - t0) * 1000 / $(getconf CLK_TCK) )) ms"
