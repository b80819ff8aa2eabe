#!/usr/bin/env bash
# gpu-check: on a machine with an NVIDIA GPU, check the testbed's NVML path
# end to end. It builds testbed with cgo, samples NVML once a second while
# nothing runs, then while a GPU load runs (a PyTorch matmul loop, when
# python3 with CUDA-enabled torch is there), prints the per-second figures
# and checks that utilisation rose and memory grew under the load.
#
# Exit status: 0 passed or skipped (the reason printed), 1 failed.
#   make gpu-check            # or: scripts/gpu-check.sh [SECONDS]
set -euo pipefail

LOAD_S=${1:-10}
IDLE_S=3
GO=${GO:-go}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

skip() { echo "gpu-check: SKIP: $*"; exit 0; }
fail() { echo "gpu-check: FAIL: $*"; exit 1; }

if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1' && ! command -v nvidia-smi >/dev/null; then
	skip "no NVIDIA driver here (neither libnvidia-ml.so.1 nor nvidia-smi)"
fi
command -v "$GO" >/dev/null || skip "no Go toolchain to build testbed with cgo"

echo "gpu-check: building testbed with cgo"
CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" \
	"$GO" build -o "$OUT/testbed" ./cmd/testbed

have_torch=0
if command -v python3 >/dev/null &&
	python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	have_torch=1
fi

total=$((IDLE_S + LOAD_S + 2))
"$OUT/testbed" sample --nvml --interval 1s --duration "${total}s" -o "$OUT/gpu.jsonl" &
sampler=$!
sleep "$IDLE_S"
if [ "$have_torch" = 1 ]; then
	echo "gpu-check: ${LOAD_S}s of 8192×8192 bf16 matmuls on GPU 0 (8 GiB held)"
	python3 - "$LOAD_S" <<'PY'
import sys, time, torch
d = torch.device("cuda:0")
hold = torch.empty(8 << 30, dtype=torch.uint8, device=d)  # memory must grow
a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        a = (a @ b).clamp_(-1, 1)
    torch.cuda.synchronize()
del hold
PY
else
	echo "gpu-check: no python3 with CUDA-enabled torch: sampling idle only (the load checks are skipped)"
	sleep "$LOAD_S"
fi
wait "$sampler" || fail "testbed sample --nvml failed"

# One line per second: t, then per GPU util %, memory used GiB, power W, SM MHz.
python_summary() {
	python3 - "$OUT/gpu.jsonl" "$IDLE_S" "$have_torch" <<'PY'
import json, sys
path, idle_s, torch_ran = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
rows = [json.loads(l) for l in open(path) if l.strip()]
print(f"{'t s':>5}  GPU  util %  mem GiB  power W  SM MHz  mem MHz  reasons")
idle, load = [], []
for r in rows:
    t = r["t_ns"] / 1e9
    for d in r.get("devices", []):
        g = lambda k: d.get(k)
        mem = (g("mem_used_bytes") or 0) / 2**30
        print(f"{t:5.1f}  {d['index']:>3}  {g('util_percent')!s:>6}  {mem:7.2f}  {g('power_w')!s:>7}  "
              f"{g('sm_clock_mhz')!s:>6}  {g('mem_clock_mhz')!s:>7}  {hex(g('clock_event_reasons') or 0)}")
        if d["index"] == 0:
            (idle if t < idle_s else load).append(((g("util_percent") or 0), mem))
if not rows:
    sys.exit("no NVML readings")
if not torch_ran:
    sys.exit(0)
if not idle or not load:
    sys.exit("too few readings to compare idle and load")
u0, m0 = max(u for u, _ in idle), max(m for _, m in idle)
u1, m1 = max(u for u, _ in load), max(m for _, m in load)
print(f"GPU0: util {u0:.0f} % idle -> {u1:.0f} % under load; memory {m0:.2f} -> {m1:.2f} GiB")
if u1 < max(50, u0 + 20):
    sys.exit("utilisation did not rise under the load")
if m1 < m0 + 4:
    sys.exit("memory did not grow by the 8 GiB the load holds")
PY
}
if command -v python3 >/dev/null; then
	python_summary || fail "see above"
	[ "$have_torch" = 1 ] || skip "NVML read fine, but without torch no load ran: utilisation and memory unchecked"
else
	cat "$OUT/gpu.jsonl"
	skip "no python3 to check the figures; the raw readings are above"
fi
echo "gpu-check: PASS"
