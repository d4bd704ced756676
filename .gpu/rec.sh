# Session 6 recording: each chapter in priority order, results to $OUT as soon as each is done.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 || exit 1
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p $OUT/results
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
rec() { ch=$1; lim=$2; shift 2
  t "record $ch"; timeout $lim python3 -m lib.record $ch "$@" > $OUT/record.$ch.txt 2>&1; echo "rc=$?" >> $OUT/record.$ch.txt
  grep -vE "^\s*$" $OUT/record.$ch.txt | tail -4; cp data/results/$ch.* $OUT/results/ 2>/dev/null; cp data/results/device.json $OUT/results/; }
rec attention 150
rec matmul 170 --without kernels.matmul_profile
rec memory 100
rec reduction 70
t done
