/* Run-time CPU feature detection (cpuid + xgetbv). */
#ifndef KVQ_CPU_H
#define KVQ_CPU_H
#include "kvq.h"

/* Best ISA the running CPU and OS support; KVQ_ISA env var can lower it
 * ("scalar", "avx2") for testing fallbacks. */
kvq_isa kvq_cpu_isa(void);
/* 1 if the CPU has AVX-512 VNNI (vpdpbusd). */
int kvq_cpu_has_avx512vnni(void);
/* 1 if the CPU has AVX-512 VNNI and VBMI (integer score kernels); the
 * KVQ_NO_VNNI environment variable turns them off (tests, ablations). */
int kvq_cpu_has_int8_dot(void);
/* 1 if the CPU has AVX512-BF16 (vdpbf16ps). */
int kvq_cpu_has_avx512bf16(void);

/* KVQ_NO_X86: build the portable (scalar) code only, as on other CPUs. */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(KVQ_NO_X86)
#define KVQ_X86 1
#define KVQ_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi2")))
#define KVQ_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")))
#define KVQ_TARGET_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")))
#else
#define KVQ_X86 0
#endif

#endif
