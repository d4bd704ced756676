cd .tools/wt-fa3 && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
T0=$(date +%s)
timeout ${LIM:-540} python3 -m tools.record flash3 > $OUT/record.txt 2>&1; echo "rc=$? after $(( $(date +%s) - T0 )) s" >> $OUT/record.txt
grep -v "^\s*$" $OUT/record.txt | grep -v "Warning\|warn(" | tail -25
mkdir -p $OUT/results; cp data/results/flash3.* $OUT/results/ 2>/dev/null; ls $OUT/results
