tar -xJf .devcarry/bundle.tar.xz && source perf/device_run.sh && device_run_env >/dev/null && device_llama3_model
for p in 0 1 3 4 5 7 15 0 skip; do
  log "probe $p"
  if [ $p = skip ]; then env="SLUICE_OPENCL_SKIP=attention_short_join"; else env="SLUICE_OPENCL_ATT_PROBE=$p"; fi
  echo "probe $p" >> $OUT/probe.txt
  env $env timeout 100 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 --depths 0 --pp 512 --tg 64 --reps 5 --json 2>&1 | grep '^{' >> $OUT/probe.txt
done
env SLUICE_OPENCL_PROFILE=1 SLUICE_OPENCL_ATT_PROBE=7 timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 --depths 0 --pp 16 --tg 16 > $OUT/profile_probe7.txt 2>&1
python3 - <<'PY' 2>/dev/null || cat $OUT/probe.txt
import json,os
p=None
for l in open(os.environ['OUT']+'/probe.txt'):
    if l.startswith('probe'): p=l.split()[1]; continue
    j=json.loads(l); print(p, j['decode_tps'], j['decode_tps_each'])
PY
grep attention $OUT/profile_probe7.txt
