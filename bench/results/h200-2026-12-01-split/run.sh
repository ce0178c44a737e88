#!/bin/sh
# issue 14 item 7b: base (18e54d6) vs new (branch cuda) on one H200, interleaved
set -u
O=${OUT:?}
cd .cudawt/new || exit 1
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv; nvcc --version | tail -2; echo "cores $(nproc)"; echo "new = $(cat ../new.rev), base = $(cat ../base.rev)"; } > $O/env.log 2>&1
cat $O/env.log
t0=$(date +%s)
AB_ARGS=--quick timeout 520 sh bench/ab_cuda.sh $O "tq-mse:4/4,tq-mse:2/2,q8,f16" 3 base=@../base new=- > /dev/null 2>&1
echo "ab_cuda.sh: $(( $(date +%s) - t0 )) s" | tee -a $O/env.log
grep -E "BUILD FAILED|error" $O/build.log $O/build-base.log | head -5
grep -E "checks|FAIL" $O/test.log | tail -5
python3 bench/sass_diff.py build-ab-base/libkvq_cuda.a build-gpu/libkvq_cuda.a KTQILi4EEENS_3VTQILi4EEELi8 KTQILi2EEENS_3VTQILi2EEELi8 KQ8ENS_3VQ8 KF16ENS_4VF16ELi4ELi3ELb0 attn_kernel_w4 merge_q prep_kernel > $O/sass.txt 2>&1
cat $O/sass.txt
python3 bench/ab_table.py $O/ab.log base new | tee $O/table.md
