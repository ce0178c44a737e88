#!/bin/sh
# Profiling helper for the CUDA attention kernel on the GPU machine: Nsight
# Compute sections (speed of light, occupancy, warp stalls, memory) of one
# main-pass launch and an instruction histogram of its SASS.
# Usage: bench/profile_cuda.sh BUILD_DIR OUT_DIR [POLICY [B CTX]]
# BUILD_DIR absolute or relative to the current directory (it was prefixed with ./, so an absolute
# /tmp/b named .//tmp/b: ncu found no program and the profile of session 9 wrote nothing).
# Besides the sections: executed warp instructions (smsp__inst_executed.sum) and cycles, for
# instructions per 16-token tile (docs/CUDA.md, "Instruction budget"), and the shared-memory wavefronts
# (loads; all, cp.async included), load bank conflicts and shared-load instructions, for wavefronts per tile.
B=$1
O=$2
POL=${3:-tq-mse:4/4}
SB=${4:-16}
SC=${5:-32768}
ncu --clock-control none -k regex:attn_kernel -s 5 -c 1 --section SpeedOfLight --section Occupancy \
  --section WarpStateStats --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --metrics smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__inst_issued.sum,dram__bytes_read.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum \
  "$B/cuda_attn" --no-encode --policy "$POL" --shape $SB $SC --runs 8 >"$O/ncu.txt" 2>&1
# no result (an unknown metric, the counters refused): once more with the sections alone, all processes
grep -q "Duration" "$O/ncu.txt" || ncu --clock-control none --target-processes all -k regex:attn_kernel -s 5 -c 1 \
  --section SpeedOfLight --section SchedulerStats --section ComputeWorkloadAnalysis --section Occupancy \
  "$B/cuda_attn" --no-encode --policy "$POL" --shape $SB $SC --runs 8 >>"$O/ncu.txt" 2>&1
grep -E "attn_kernel|Duration|Throughput|Warp Cycles|Stall|Achieved|Registers|Block Limit|Issued|Eligible|Active Warps|Theoretical|Shared Memory Configuration|Executed Ipc|Issue Slots|Pipe|inst_|cycles_elapsed|bytes_read|==PROF==|==ERROR==|==WARNING==" "$O/ncu.txt" | head -80
OBJ=$(ls $B/CMakeFiles/kvq_cuda.dir/src/cuda/attn_k_tq4.cu.o 2>/dev/null)
# the wide-table kernel (one 4-bit table for K and V; attn_kernel_wide.cuh, W = 4)
FN=_ZN4kvqa16attn_kernel_wideILi4EEEvNS_10AttnParamsE
cuobjdump -sass -fun $FN $OBJ >"$O/sass_tq4.txt" 2>&1
echo "SASS instructions of the tq-mse:4/4 kernel: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$O/sass_tq4.txt")"
grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P[0-9T] )?[A-Z0-9]+' "$O/sass_tq4.txt" | awk '{print $NF}' | sort | uniq -c | sort -rn | head -25
