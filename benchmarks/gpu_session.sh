#!/usr/bin/env bash
# One device session's checks, in order of what matters most (each piece under its own
# timeout, so one hang costs only itself). Logs and results go to $OUT (default /tmp/gpu-out).
#   bash benchmarks/gpu_session.sh            # on the GPU machine, from the repository root
#   PIECES="bench checks" bash benchmarks/gpu_session.sh   # some pieces only
# The test suite runs last, on the GPU (--inner torch:cuda), until DEADLINE seconds of the
# script (default 530) have passed; its log names each test's outcome as it finishes (-vv: the
# project's addopts say -q, which one -v only cancels). The whole suite took about 310 s there.
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 RETROGRAD_RESULTS=$OUT MPLBACKEND=Agg
PIECES=${PIECES:-"diag bench train checks conformance suite"}
want() { [[ " $PIECES " == *" $1 "* ]]; }
step() { local limit=$1 name=$2; shift 2; local t0=$SECONDS
  echo "=== $name (limit ${limit}s)"
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "=== $name: exit $rc in $((SECONDS - t0)) s"; tail -n "${TAIL:-25}" "$OUT/$name.log"; }
nvidia-smi -L; python3 -c "import sys, torch, numpy; print(sys.version.split()[0], torch.__version__, numpy.__version__, torch.cuda.get_device_name())"
# where a device-side assert comes from: kernels run one at a time, so the traceback is exact
want diag && TAIL=12 step 60 diag env CUDA_LAUNCH_BLOCKING=1 python3 benchmarks/bench_gpu.py --device cuda --only "MLP 784" --repeats 3
want bench && step 170 bench_gpu python3 benchmarks/bench_gpu.py --device cuda --repeats 20
want train && step 90 train_cnn python3 -m retrograd train --backend torch --device cuda --no-progress --out /tmp/run-cnn
want train && step 90 train_gpt python3 -m retrograd train --model gpt --backend torch --device cuda --no-progress --out /tmp/run-gpt
want checks && step 90 gpu_checks python3 benchmarks/gpu_checks.py --device cuda
# ../shared does not travel to the device machine: before the call, copy it into the ignored
# .gpu/ (echo /.gpu/ >> .git/info/exclude; cp -r ../shared/conformance .gpu/) and carry .gpu
[ -d .gpu/conformance ] || { echo "=== conformance: no .gpu/conformance (see above): skipped"; PIECES=${PIECES/conformance/}; }
want conformance && TAIL=6 step 60 conformance env RETROGRAD_INNER=torch:cuda python3 -m pytest -p no:warnings -q -n 8 -p no:cacheprovider .gpu/conformance
limit=$(( ${DEADLINE:-530} - SECONDS )); [ $limit -gt 420 ] && limit=420
want suite && TAIL=40 step "$limit" suite python3 -m pytest -p no:warnings -p no:benchmark -vv -n 16 -p no:cacheprovider --timeout 60 --inner torch:cuda -rf tests
echo "=== failures in the suite log:"; grep -E "(FAILED|ERROR) tests" "$OUT/suite.log" 2>/dev/null | sed -E 's/^\[gw[0-9]+\] \[ *[0-9]+%\] //' | sort | uniq | head -60
