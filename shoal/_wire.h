/* Protocol Buffers wire format, read: the helpers both scanners in C share
 * (`shoal/promwrite/_scan.c` and `shoal/otlp/_scan.c`). Pure functions over a byte range;
 * every one stops at `end` and reports a malformed value with -1. */
#ifndef SHOAL_WIRE_H
#define SHOAL_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

/* A varint at *p (before end) into *out; 0, or -1 when it runs past end or past 64 bits. */
static inline int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t value = 0;
    const uint8_t *q = *p;
    for (int shift = 0; shift < 64; shift += 7) {
        if (q >= end) return -1;
        uint8_t byte = *q++;
        if (shift == 63 && byte > 1) return -1;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *p = q;
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* A field as read by next_field: its number, its wire type and, when it is
 * length-delimited, its contents [at, at + len). */
typedef struct {
    uint32_t number;
    int wire;
    const uint8_t *at;
    size_t len;
} Field;

/* The next field at *p: its tag and, for a length-delimited field, its contents, which
 * *p then has moved past; any other field's value is still at *p. -1 for field number 0
 * or a malformed varint or length. */
static inline int next_field(const uint8_t **p, const uint8_t *end, Field *f) {
    uint64_t tag, n;
    if (read_varint(p, end, &tag) < 0) return -1;
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return -1;
    f->number = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    f->at = NULL;
    f->len = 0;
    if (f->wire != WIRE_LEN) return 0;
    if (read_varint(p, end, &n) < 0 || n > (uint64_t)(end - *p)) return -1;
    f->at = *p;
    f->len = (size_t)n;
    *p += n;
    return 0;
}

/* Move past the value of a field this scanner does not read (a length-delimited one is
 * already behind *p); -1 for groups and malformed values. */
static inline int skip(const uint8_t **p, const uint8_t *end, int wire) {
    uint64_t ignored;
    switch (wire) {
    case WIRE_VARINT:
        return read_varint(p, end, &ignored);
    case WIRE_I64:
        if (end - *p < 8) return -1;
        *p += 8;
        return 0;
    case WIRE_LEN:
        return 0;
    case WIRE_I32:
        if (end - *p < 4) return -1;
        *p += 4;
        return 0;
    default:
        return -1;
    }
}

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

#endif
