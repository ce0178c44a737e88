#include "kvq.h"

unsigned kvq_version_number(void) { return KVQ_VERSION_NUMBER; }

const char *kvq_strerror(int status) {
    switch (status) {
    case KVQ_OK: return "ok";
    case KVQ_ERR_NULL: return "required pointer is NULL";
    case KVQ_ERR_INVALID_ARG: return "invalid argument";
    case KVQ_ERR_UNSUPPORTED_DIM: return "unsupported head dimension (need 32..512, multiple of 8)";
    case KVQ_ERR_BITS_RANGE: return "bit width out of range for this method";
    case KVQ_ERR_UNKNOWN_METHOD: return "unknown or malformed method spec";
    case KVQ_ERR_NONFINITE: return "input contains NaN or Inf";
    case KVQ_ERR_RANGE: return "value out of range of the stored format";
    case KVQ_ERR_OVERFLOW: return "size computation overflows";
    case KVQ_ERR_NOMEM: return "out of memory";
    case KVQ_ERR_NO_DECODE: return "method cannot reconstruct vectors (key-only)";
    case KVQ_ERR_NEEDS_CALIBRATION: return "method needs calibration vectors";
    case KVQ_ERR_IO: return "I/O error";
    case KVQ_ERR_FORMAT: return "bad file format";
    case KVQ_ERR_TRUNCATED: return "truncated input";
    case KVQ_ERR_UNSUPPORTED: return "not supported by this build or CPU";
    case KVQ_ERR_STATE: return "invalid in the object's current state";
    case KVQ_ERR_CHECKSUM: return "checksum mismatch";
    }
    return "unknown status code";
}
