export OUT
echo "=== disk: 100 files of 9 MB, each fsync'd, 4 threads $(date +%T)"
python3 - <<'PY'
import os, tempfile, threading, time
d = tempfile.mkdtemp(); buf = os.urandom(9 << 20)
def w(k):
    for i in range(k, 100, 4):
        p = f"{d}/f{i}"
        with open(p, "wb") as f:
            f.write(buf); f.flush(); os.fsync(f.fileno())
t = time.time(); ts = [threading.Thread(target=w, args=(k,)) for k in range(4)]
[x.start() for x in ts]; [x.join() for x in ts]; dt = time.time() - t
print(f"{100 / dt:.1f} files/s, {900 / dt:.0f} MB/s (fsync per file, 4 writers); df: ", os.popen(f"df -h {d} | tail -1").read().strip())
PY
for w in 2 4; do
echo "=== multi-gpu 50/GPU, $w writers per GPU $(date +%T)"
scripts/multi-gpu-bench --jobs-per-gpu 50 --repetitions 2 --writers-per-gpu $w 2>&1 | grep -E "^\| [12] |^median" | tail -6
mv $OUT/multi-gpu.txt $OUT/multi-gpu-50-w$w.txt
done
echo "=== multi-gpu 200/GPU, 4 writers per GPU $(date +%T)"
scripts/multi-gpu-bench --jobs-per-gpu 200 --repetitions 1 --writers-per-gpu 4 2>&1 | grep -E "^\| [12] |^median" | tail -4
mv $OUT/multi-gpu.txt $OUT/multi-gpu-200-w4.txt
echo "=== end $(date +%T)"
