#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#if KVQ_X86
#include <cpuid.h>

static unsigned long long xgetbv0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

typedef struct { unsigned b7, c7, d7, a7_1, c1; int os_avx, os_avx512; } cpu_bits;

static cpu_bits read_cpu(void) {
    cpu_bits r;
    memset(&r, 0, sizeof r);
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return r;
    r.c1 = c;
    int osxsave = (c >> 27) & 1;
    if (osxsave) {
        unsigned long long x = xgetbv0();
        r.os_avx = (x & 0x6) == 0x6;
        r.os_avx512 = (x & 0xe6) == 0xe6;
    }
    if (__get_cpuid_max(0, 0) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        r.b7 = b; r.c7 = c; r.d7 = d;
        __cpuid_count(7, 1, a, b, c, d);
        r.a7_1 = a;
    }
    return r;
}

static kvq_isa detect(void) {
    cpu_bits r = read_cpu();
    int fma = (r.c1 >> 12) & 1, f16c = (r.c1 >> 29) & 1, avx = (r.c1 >> 28) & 1;
    int avx2 = (r.b7 >> 5) & 1, bmi2 = (r.b7 >> 8) & 1;
    int f = (r.b7 >> 16) & 1, dq = (r.b7 >> 17) & 1, bw = (r.b7 >> 30) & 1, vl = (r.b7 >> 31) & 1;
    if (!(r.os_avx && avx && avx2 && fma && f16c && bmi2)) return KVQ_ISA_SCALAR;
    if (r.os_avx512 && f && dq && bw && vl) return KVQ_ISA_AVX512;
    return KVQ_ISA_AVX2;
}

kvq_isa kvq_cpu_isa(void) {
    kvq_isa isa = detect();
    const char *env = getenv("KVQ_ISA");
    if (env) {
        if (!strcmp(env, "scalar")) isa = KVQ_ISA_SCALAR;
        else if (!strcmp(env, "avx2") && isa > KVQ_ISA_AVX2) isa = KVQ_ISA_AVX2;
    }
    return isa;
}

int kvq_cpu_has_avx512vnni(void) {
    if (kvq_cpu_isa() < KVQ_ISA_AVX512) return 0;
    cpu_bits r = read_cpu();
    return (r.c7 >> 11) & 1;
}

int kvq_cpu_has_int8_dot(void) {
    if (kvq_cpu_isa() < KVQ_ISA_AVX512 || getenv("KVQ_NO_VNNI")) return 0;
    cpu_bits r = read_cpu();
    return ((r.c7 >> 11) & 1) && ((r.c7 >> 1) & 1); /* AVX512_VNNI and AVX512_VBMI */
}

int kvq_cpu_has_avx512bf16(void) {
    if (kvq_cpu_isa() < KVQ_ISA_AVX512) return 0;
    cpu_bits r = read_cpu();
    return (r.a7_1 >> 5) & 1;
}
#else
kvq_isa kvq_cpu_isa(void) { return KVQ_ISA_SCALAR; }
int kvq_cpu_has_avx512vnni(void) { return 0; }
int kvq_cpu_has_int8_dot(void) { return 0; }

int kvq_cpu_has_avx512bf16(void) { return 0; }
#endif

const char *kvq_isa_name(kvq_isa isa) {
    switch (isa) {
    case KVQ_ISA_SCALAR: return "scalar";
    case KVQ_ISA_AVX2: return "avx2";
    case KVQ_ISA_AVX512: return "avx512";
    case KVQ_ISA_BEST: return "best";
    }
    return "unknown";
}
