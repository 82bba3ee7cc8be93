/* OTLP metrics requests of gauges and sums scanned for what a request of known series
 * needs, without the interpreter lock.
 *
 * `scan_metrics(body)` reads an `ExportMetricsServiceRequest` and returns
 * `(n, key_offsets, keys, times, starts, values, ints, is_int, flags)`, one entry per data
 * point, the points of gauges first and then those of sums, each in request order (the
 * order of the rows the decoder in Python makes):
 *
 *   n            the number of points;
 *   key_offsets  n + 1 int32, the offsets of `keys` (an Arrow binary array);
 *   keys         per point, the bytes that decide every column of its row but the five
 *                below: the byte sizes of parts R, S and M as little-endian uint32, then
 *                R, the fields of its `ResourceMetrics` but its scopes; S, the fields of its
 *                `ScopeMetrics` but its metrics; M, the fields of its `Metric` but the data,
 *                the byte 'g' or 's' for a gauge or a sum, and the fields of the `Sum` but
 *                its points; and last the point's attribute fields. Every field is kept
 *                whole (tag, length, contents), as the body has it;
 *   times        int64 per point, time_unix_nano;
 *   starts       int64 per point, start_time_unix_nano (0 when absent);
 *   values       float64 per point, as_double, or as_int as a double;
 *   ints         int64 per point, as_int (0 for a double);
 *   is_int       one byte per point, 1 when the value was as_int;
 *   flags        int64 per point.
 *
 * It returns None for any request it does not cover, and the decoder in Python takes the
 * body as before: no points; a metric that is not one gauge or one sum, or has no name;
 * exemplars; a point without a value or a time, with a time beyond int64, with flags beyond
 * uint32, or with a field given twice; a field that protobuf would merge (a resource,
 * scope or name given twice); a known field with another wire type; groups; a malformed
 * varint, length or message. Equal keys mean equal bytes in everything that the columns
 * of a row are made of, so a row worked out once by the decoder in Python serves every
 * later point of the same key. The contents of R, S, M and the attributes are not checked
 * here: a key not seen before is decoded in Python, which checks them.
 *
 * The module is a pure codec: no I/O, no state. Building it is optional (setup.py);
 * without it the decoder in Python does the same work.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_wire.h"

#define MAX_PIECES 16
#define LEFT_TO_PYTHON 1

/* A part of a key: the byte ranges it is made of, in order. */
typedef struct {
    const uint8_t *at[MAX_PIECES];
    size_t len[MAX_PIECES];
    int n;
    size_t total;
} Part;

static int add_piece(Part *part, const uint8_t *at, size_t len) {
    if (part->n && part->at[part->n - 1] + part->len[part->n - 1] == at) {
        part->len[part->n - 1] += len; /* adjacent fields: one piece */
    } else {
        if (part->n == MAX_PIECES) return LEFT_TO_PYTHON;
        part->at[part->n] = at;
        part->len[part->n] = len;
        part->n++;
    }
    part->total += len;
    return 0;
}

static uint8_t *put_part(uint8_t *out, const Part *part) {
    for (int i = 0; i < part->n; i++) {
        memcpy(out, part->at[i], part->len[i]);
        out += part->len[i];
    }
    return out;
}

static uint8_t *put_u32(uint8_t *out, size_t n) {
    for (int i = 0; i < 4; i++) *out++ = (uint8_t)(n >> (8 * i));
    return out;
}

#define BIT(number) (1u << (number))

/* Add to `part` every field of the message [p, end) but those in `children` (the messages
 * read next, length-delimited), and check that the fields in `len_fields` are
 * length-delimited and those in `singular` given once. The sets are bits of field numbers,
 * all below 32. */
static int context(const uint8_t *p, const uint8_t *end, uint32_t children, uint32_t singular,
                   uint32_t len_fields, Part *part) {
    uint32_t seen = 0;
    while (p < end) {
        const uint8_t *tag = p;
        Field f;
        if (next_field(&p, end, &f) < 0) return -1;
        if (f.number < 32 && (children & BIT(f.number))) {
            if (f.wire != WIRE_LEN) return -1;
            continue;
        }
        if (f.number < 32) {
            uint32_t bit = BIT(f.number);
            if ((len_fields & bit) && f.wire != WIRE_LEN) return -1;
            if (singular & bit) {
                if (seen & bit) return LEFT_TO_PYTHON; /* merged or overwritten by protobuf */
                seen |= bit;
            }
        }
        if (skip(&p, end, f.wire) < 0) return -1;
        int status = add_piece(part, tag, (size_t)(p - tag));
        if (status) return status;
    }
    return 0;
}

typedef struct {
    /* sizes, from the counting pass: per kind (0 gauges, 1 sums) */
    Py_ssize_t points[2], key_bytes[2];
    /* the fill pass: where the next point of each kind goes (NULL outputs when counting) */
    Py_ssize_t next[2], next_key[2];
    int32_t *key_offsets;
    uint8_t *keys;
    int64_t *times, *starts, *ints, *flags;
    double *values;
    uint8_t *is_int;
} Scan;

enum { POINT_START = 2, POINT_TIME = 3, POINT_DOUBLE = 4, POINT_EXEMPLARS = 5, POINT_INT = 6,
       POINT_ATTRIBUTES = 7, POINT_FLAGS = 8 };

/* One `NumberDataPoint` of kind `kind` in the context R, S, M. */
static int read_point(const uint8_t *start, const uint8_t *end, int kind, const Part *r,
                      const Part *s, const Part *m, Scan *scan) {
    const uint8_t *p = start;
    uint64_t time = 0, begin = 0, bits = 0, flags = 0;
    uint32_t seen = 0;
    size_t attribute_bytes = 0;
    while (p < end) {
        const uint8_t *tag = p;
        Field f;
        if (next_field(&p, end, &f) < 0) return -1;
        if (f.number == POINT_ATTRIBUTES) {
            if (f.wire != WIRE_LEN) return -1;
            attribute_bytes += (size_t)(p - tag);
            continue;
        }
        if (f.number == POINT_EXEMPLARS) return LEFT_TO_PYTHON;
        uint64_t *into = NULL;
        switch (f.number) {
        case POINT_START: into = &begin; break;
        case POINT_TIME: into = &time; break;
        case POINT_DOUBLE:
        case POINT_INT: into = &bits; break;
        case POINT_FLAGS:
            if (f.wire != WIRE_VARINT) return -1;
            if (seen & BIT(POINT_FLAGS)) return LEFT_TO_PYTHON;
            seen |= BIT(POINT_FLAGS);
            if (read_varint(&p, end, &flags) < 0) return -1;
            continue;
        default:
            if (skip(&p, end, f.wire) < 0) return -1;
            continue;
        }
        if (f.wire != WIRE_I64 || end - p < 8) return -1;
        if (seen & BIT(f.number)) return LEFT_TO_PYTHON;
        seen |= BIT(f.number);
        *into = load_le64(p);
        p += 8;
    }
    int as_double = (seen >> POINT_DOUBLE) & 1, as_int = (seen >> POINT_INT) & 1;
    if (as_double == as_int || time == 0 || time > INT64_MAX || begin > INT64_MAX ||
        flags > UINT32_MAX)
        return LEFT_TO_PYTHON; /* rows the decoder in Python refuses, or a oneof set twice */
    size_t key_bytes = 12 + r->total + s->total + m->total + attribute_bytes;
    if (scan->keys) {
        Py_ssize_t i = scan->next[kind]++;
        uint8_t *key = scan->keys + scan->next_key[kind];
        key = put_u32(key, r->total);
        key = put_u32(key, s->total);
        key = put_u32(key, m->total);
        key = put_part(put_part(put_part(key, r), s), m);
        for (p = start; p < end;) { /* the attribute fields again, copied this time */
            const uint8_t *tag = p;
            Field f;
            next_field(&p, end, &f);
            if (f.number == POINT_ATTRIBUTES) {
                memcpy(key, tag, (size_t)(p - tag));
                key += p - tag;
            } else {
                skip(&p, end, f.wire);
            }
        }
        scan->next_key[kind] += (Py_ssize_t)key_bytes;
        scan->key_offsets[i + 1] = (int32_t)scan->next_key[kind];
        scan->times[i] = (int64_t)time;
        scan->starts[i] = (int64_t)begin;
        scan->flags[i] = (int64_t)flags;
        scan->is_int[i] = (uint8_t)as_int;
        if (as_int) {
            scan->ints[i] = (int64_t)bits;
            scan->values[i] = (double)(int64_t)bits;
        } else {
            scan->ints[i] = 0;
            memcpy(&scan->values[i], &bits, sizeof bits);
        }
    } else {
        scan->points[kind]++;
        scan->key_bytes[kind] += (Py_ssize_t)key_bytes;
        if (scan->key_bytes[kind] > INT32_MAX) return LEFT_TO_PYTHON;
    }
    return 0;
}

enum { METRIC_NAME = 1, METRIC_DESCRIPTION = 2, METRIC_UNIT = 3, METRIC_GAUGE = 5,
       METRIC_SUM = 7, METRIC_HISTOGRAM = 9, METRIC_EXPONENTIAL = 10, METRIC_SUMMARY = 11,
       METRIC_METADATA = 12 };
static const uint8_t KIND_BYTE[2] = {'g', 's'};

/* One `Metric` in the context R, S. */
static int read_metric(const uint8_t *p, const uint8_t *end, const Part *r, const Part *s,
                       Scan *scan) {
    const uint8_t *data = NULL, *data_end = NULL, *q;
    int kind = -1, named = 0, status;
    uint32_t texts = BIT(METRIC_NAME) | BIT(METRIC_DESCRIPTION) | BIT(METRIC_UNIT);
    for (q = p; q < end;) {
        Field f;
        if (next_field(&q, end, &f) < 0) return -1;
        if (f.number == METRIC_GAUGE || f.number == METRIC_SUM) {
            if (f.wire != WIRE_LEN) return -1;
            if (kind >= 0) return LEFT_TO_PYTHON; /* a oneof set twice */
            kind = f.number == METRIC_SUM;
            data = f.at;
            data_end = f.at + f.len;
        } else if (f.number == METRIC_HISTOGRAM || f.number == METRIC_EXPONENTIAL ||
                   f.number == METRIC_SUMMARY) {
            return LEFT_TO_PYTHON;
        } else if (f.number == METRIC_NAME) {
            if (f.wire != WIRE_LEN) return -1;
            named = f.len > 0;
        } else if (skip(&q, end, f.wire) < 0) {
            return -1;
        }
    }
    if (kind < 0 || !named) return LEFT_TO_PYTHON; /* refused by the decoder in Python */
    Part m = {0};
    status = context(p, end, BIT(METRIC_GAUGE) | BIT(METRIC_SUM), texts,
                     texts | BIT(METRIC_METADATA), &m);
    if (status) return status;
    if ((status = add_piece(&m, &KIND_BYTE[kind], 1)) != 0) return status;
    /* the Sum's aggregation_temporality (2) and is_monotonic (3), given once */
    if ((status = context(data, data_end, BIT(1), BIT(2) | BIT(3), 0, &m)) != 0) return status;
    for (q = data; q < data_end;) {
        Field f;
        if (next_field(&q, data_end, &f) < 0) return -1;
        if (f.number == 1) {
            if ((status = read_point(f.at, f.at + f.len, kind, r, s, &m, scan)) != 0)
                return status;
        } else if (kind == 1 && (f.number == 2 || f.number == 3) && f.wire != WIRE_VARINT) {
            return -1;
        } else if (skip(&q, data_end, f.wire) < 0) {
            return -1;
        }
    }
    return 0;
}

/* A `ResourceMetrics` (`resource` NULL) or a `ScopeMetrics` of the resource part
 * `resource`: both hold their resource or scope in field 1, their list (of scopes, of
 * metrics) in field 2 and a schema URL in field 3. */
static int read_level(const uint8_t *p, const uint8_t *end, const Part *resource,
                      Scan *scan) {
    Part own = {0};
    int status = context(p, end, BIT(2), BIT(1) | BIT(3), BIT(1) | BIT(3), &own);
    if (status) return status;
    while (p < end) {
        Field f;
        if (next_field(&p, end, &f) < 0) return -1;
        if (f.number == 2) {
            status = resource ? read_metric(f.at, f.at + f.len, resource, &own, scan)
                              : read_level(f.at, f.at + f.len, &own, scan);
            if (status) return status;
        } else if (skip(&p, end, f.wire) < 0) {
            return -1;
        }
    }
    return 0;
}

/* The whole request: 0, LEFT_TO_PYTHON or -1 (malformed). */
static int read_request(const uint8_t *p, const uint8_t *end, Scan *scan) {
    while (p < end) {
        Field f;
        if (next_field(&p, end, &f) < 0) return -1;
        if (f.number == 1) {
            if (f.wire != WIRE_LEN) return -1;
            int status = read_level(f.at, f.at + f.len, NULL, scan);
            if (status) return status;
        } else if (skip(&p, end, f.wire) < 0) {
            return -1;
        }
    }
    return 0;
}

static PyObject *scan_metrics(PyObject *module, PyObject *body) {
    (void)module;
    if (!PyBytes_Check(body)) { /* immutable: both passes read the same bytes */
        PyErr_SetString(PyExc_TypeError, "scan_metrics takes bytes");
        return NULL;
    }
    const uint8_t *start = (const uint8_t *)PyBytes_AS_STRING(body);
    const uint8_t *end = start + PyBytes_GET_SIZE(body);
    Scan scan = {0};
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = read_request(start, end, &scan);
    Py_END_ALLOW_THREADS
    Py_ssize_t n = scan.points[0] + scan.points[1];
    Py_ssize_t key_bytes = scan.key_bytes[0] + scan.key_bytes[1];
    if (status != 0 || n == 0 || key_bytes > INT32_MAX) Py_RETURN_NONE;

    PyObject *key_offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *keys = PyBytes_FromStringAndSize(NULL, key_bytes);
    PyObject *times = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *starts = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *values = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *ints = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *is_int = PyBytes_FromStringAndSize(NULL, n);
    PyObject *flags = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *out = NULL;
    if (key_offsets && keys && times && starts && values && ints && is_int && flags) {
        Scan fill = {0};
        fill.key_offsets = (int32_t *)PyBytes_AS_STRING(key_offsets);
        fill.keys = (uint8_t *)PyBytes_AS_STRING(keys);
        fill.times = (int64_t *)PyBytes_AS_STRING(times);
        fill.starts = (int64_t *)PyBytes_AS_STRING(starts);
        fill.values = (double *)PyBytes_AS_STRING(values);
        fill.ints = (int64_t *)PyBytes_AS_STRING(ints);
        fill.is_int = (uint8_t *)PyBytes_AS_STRING(is_int);
        fill.flags = (int64_t *)PyBytes_AS_STRING(flags);
        /* the gauges' points first, then the sums' */
        fill.next[1] = scan.points[0];
        fill.next_key[1] = scan.key_bytes[0];
        fill.key_offsets[0] = 0;
        fill.key_offsets[scan.points[0]] = (int32_t)scan.key_bytes[0];
        Py_BEGIN_ALLOW_THREADS
        status = read_request(start, end, &fill);
        Py_END_ALLOW_THREADS
        if (status == 0 && fill.next[0] == scan.points[0] && fill.next[1] == n) {
            out = Py_BuildValue("(nOOOOOOOO)", n, key_offsets, keys, times, starts, values,
                                ints, is_int, flags);
        } else { /* not reached: both passes read the same immutable bytes */
            PyErr_SetString(PyExc_RuntimeError, "scan_metrics: the passes disagreed");
        }
    }
    Py_XDECREF(key_offsets);
    Py_XDECREF(keys);
    Py_XDECREF(times);
    Py_XDECREF(starts);
    Py_XDECREF(values);
    Py_XDECREF(ints);
    Py_XDECREF(is_int);
    Py_XDECREF(flags);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_metrics", scan_metrics, METH_O,
     "scan_metrics(body) -> (n, key_offsets, keys, times, starts, values, ints, is_int, "
     "flags) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "OTLP metrics requests scanned without the interpreter lock.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
