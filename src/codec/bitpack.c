/* Bit packing: a plain LSB-first bitstream, and the strided layout of the
 * rotated methods (codec_internal.h describes it). */
#include <string.h>

#include "codec_internal.h"

size_t bits_bytes(size_t n, int b) { return (n * (size_t)b + 7) / 8; }

void bits_pack(const uint8_t *idx, size_t n, int b, uint8_t *out) {
    memset(out, 0, bits_bytes(n, b));
    size_t bit = 0;
    for (size_t i = 0; i < n; i++, bit += (size_t)b) {
        unsigned v = idx[i] & ((1u << b) - 1);
        size_t byte = bit >> 3;
        unsigned off = bit & 7;
        out[byte] |= (uint8_t)(v << off);
        if (off + (unsigned)b > 8) out[byte + 1] |= (uint8_t)(v >> (8 - off));
    }
}

void bits_unpack(const uint8_t *in, size_t n, int b, uint8_t *idx) {
    size_t bit = 0;
    unsigned mask = (1u << b) - 1;
    for (size_t i = 0; i < n; i++, bit += (size_t)b) {
        size_t byte = bit >> 3;
        unsigned off = bit & 7;
        unsigned v = in[byte] >> off;
        if (off + (unsigned)b > 8) v |= (unsigned)in[byte + 1] << (8 - off);
        idx[i] = (uint8_t)(v & mask);
    }
}

/* Sub-field widths for b bits, low bits first (kvq_strided_width, layouts.h). */
static int subfields(int b, int w[3]) {
    int n = 0;
    for (int i = 0; i < 3 && kvq_strided_width(b, i); i++) w[n++] = kvq_strided_width(b, i);
    return n;
}

void strided_pack(const uint8_t *idx, int d, int b, uint8_t *out) {
    int w[3], nf = subfields(b, w), shift = 0;
    for (int f = 0; f < nf; f++) {
        int per = 8 / w[f];                 /* fields per byte */
        int stride = d * w[f] / 8;          /* bytes of this sub-field block */
        unsigned mask = (1u << w[f]) - 1;
        for (int j = 0; j < stride; j++) {
            unsigned byte = 0;
            for (int k = 0; k < per; k++) byte |= ((idx[j + k * stride] >> shift) & mask) << (k * w[f]);
            out[j] = (uint8_t)byte;
        }
        out += stride;
        shift += w[f];
    }
}

void strided_unpack(const uint8_t *in, int d, int b, uint8_t *idx) {
    int w[3], nf = subfields(b, w), shift = 0;
    memset(idx, 0, (size_t)d);
    for (int f = 0; f < nf; f++) {
        int per = 8 / w[f], stride = d * w[f] / 8;
        unsigned mask = (1u << w[f]) - 1;
        for (int j = 0; j < stride; j++)
            for (int k = 0; k < per; k++) idx[j + k * stride] |= (uint8_t)(((in[j] >> (k * w[f])) & mask) << shift);
        in += stride;
        shift += w[f];
    }
}
