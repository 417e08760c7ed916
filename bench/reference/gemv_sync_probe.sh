set -u
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/device.txt
for s in 0 1 2 3; do
  (GEMV_SYNC=$s TRITON_CACHE_DIR=/tmp/tc$s python3 bench/reference/gemv_tile_check.py $OUT/tile_sync$s.json > $OUT/tile_sync$s.log 2>&1) &
done
wait
for r in 2; do for s in 1 2 3; do
  GEMV_SYNC=$s TRITON_CACHE_DIR=/tmp/tc$s python3 bench/reference/gemv_tile_check.py $OUT/tile_sync${s}_rep$r.json > $OUT/tile_sync${s}_rep$r.log 2>&1
done; done
tail -n1 $OUT/*.log
