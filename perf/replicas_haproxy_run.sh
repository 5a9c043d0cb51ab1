#!/bin/bash
# Three replicas of a model behind HAProxy on this machine, and `sluice bench --server` conversations
# through it, alternating, ROUNDS times each: `session` — deploy/haproxy.cfg (ports replaced) with an
# X-Session-Id per conversation (consistent hashing keeps it on its replica); `leastconn` — the same
# file without the ids (its fallback: the least busy replica); `roundrobin` — the same replicas behind
# a copy of the file balancing every request round-robin (the baseline). Writes $OUT/MODE_N.json and
# the printed tables to $OUT/log.txt.
#   bash perf/replicas_haproxy_run.sh [MODEL] [OUT]    (default: the bundled model, /tmp/replicas)
set -u
MODEL=${1:-models/tiny-code-qwen2}
OUT=${2:-/tmp/replicas}
ROUNDS=${ROUNDS:-2}
SLUICE=${SLUICE:-build/bin/sluice}
mkdir -p "$OUT"
BASE=${BASE:-5700}
pids=()
for i in 1 2 3; do
  "$SLUICE" serve --model "$MODEL" --port $((BASE + i)) --parallel 4 --threads 1 --replica-name replica$i > "$OUT/replica$i.log" 2>&1 &
  pids+=($!)
done
sed -e "s/bind 127.0.0.1:8080/bind 127.0.0.1:$BASE/" -e "s/127.0.0.1:5413/127.0.0.1:$((BASE + 1))/" \
    -e "s/127.0.0.1:5414/127.0.0.1:$((BASE + 2))/" -e "s/127.0.0.1:5415/127.0.0.1:$((BASE + 3))/" deploy/haproxy.cfg > "$OUT/haproxy.cfg"
sed -e "s/bind 127.0.0.1:$BASE/bind 127.0.0.1:$((BASE + 10))/" -e "s/balance hdr(X-Session-Id)/balance roundrobin/" \
    -e "s/balance leastconn/balance roundrobin/" -e "/hash-type consistent/d" "$OUT/haproxy.cfg" > "$OUT/haproxy_roundrobin.cfg"
for cfg in haproxy haproxy_roundrobin; do
  haproxy -db -f "$OUT/$cfg.cfg" > "$OUT/$cfg.log" 2>&1 &
  pids+=($!)
done
for i in $(seq 1 60); do curl -sf http://127.0.0.1:$BASE/health > /dev/null && curl -sf http://127.0.0.1:$((BASE + 10))/health > /dev/null && break; sleep 1; done
sleep 3  # every replica's first health check passed
LOAD=(--api chat --turns 4 --requests 12 --clients 6 --gen 16 --prompt-lengths 256 --shared-prefix 0)
for r in $(seq 1 "$ROUNDS"); do
  for mode in session leastconn roundrobin; do
    ids=on; port=$BASE
    [ $mode = leastconn ] && ids=off
    [ $mode = roundrobin ] && port=$((BASE + 10))
    echo "== $mode round $r" >> "$OUT/log.txt"
    "$SLUICE" bench --server http://127.0.0.1:$port "${LOAD[@]}" --session-ids $ids --json-out "$OUT/${mode}_$r.json" >> "$OUT/log.txt" 2> "$OUT/${mode}_$r.err"
  done
done
kill "${pids[@]}" 2>/dev/null
wait 2>/dev/null
