/* Remote-Write 1.0 bodies scanned for what a request of known series needs, without the
 * interpreter lock.
 *
 * `scan_v1(body)` reads a `prometheus.WriteRequest` (snappy already undone) and returns
 * `(n, key_offsets, keys, sample_offsets, values, timestamps)`:
 *
 *   n               the number of series;
 *   key_offsets     n + 1 int32, the offsets of `keys` (an Arrow binary array);
 *   keys            per series, the byte 0xfc, the encoded bytes of each label (the
 *                   contents of field 1, one after the other) and then each label's
 *                   length as a little-endian uint32: the key `decode._raw_keys` makes;
 *   sample_offsets  n + 1 int32, where each series' samples start in the next two;
 *   values          float64 per sample (field 1 of `Sample`, 0 when absent);
 *   timestamps      int64 per sample, milliseconds (field 2 of `Sample`, 0 when absent).
 *
 * It returns None for any request it does not cover, and then the decoder in Python
 * (ptars) takes the body as before: no series; metadata, exemplars or histograms; a
 * known field with another wire type; groups; a malformed varint, length or message.
 * The check of what the body says is left to that decoder, so this one never has to
 * agree with it on an error: it only has to agree on the requests it accepts.
 *
 * The module is a pure codec: no I/O, no state. Building it is optional
 * (pyproject.toml); without it the decoder in Python does the same work.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_wire.h"

#define RAW_KEY 0xfc

/* One `Sample`: value (field 1, double) and timestamp (field 2, int64); the last of a
 * repeated scalar wins, as in any protobuf decoder. */
static int read_sample(const uint8_t *p, const uint8_t *end, double *value, int64_t *time) {
    uint64_t bits = 0, t = 0;
    while (p < end) {
        Field f;
        if (next_field(&p, end, &f) < 0) return -1;
        if (f.number == 1) {
            if (f.wire != WIRE_I64 || end - p < 8) return -1;
            bits = load_le64(p);
            p += 8;
        } else if (f.number == 2) {
            if (f.wire != WIRE_VARINT || read_varint(&p, end, &t) < 0) return -1;
        } else if (skip(&p, end, f.wire) < 0) {
            return -1;
        }
    }
    memcpy(value, &bits, sizeof bits);
    *time = (int64_t)t;
    return 0;
}

typedef struct {
    /* sizes, from the counting pass */
    Py_ssize_t series, samples, key_bytes;
    /* outputs, filled by the second pass (NULL in the first) */
    int32_t *key_offsets, *sample_offsets;
    uint8_t *keys;
    double *values;
    int64_t *times;
} Scan;

/* One `TimeSeries`. Counting (no outputs): adds its samples and key bytes. Filling:
 * writes its key and samples. 1: a field this scanner leaves to the decoder in Python. */
static int read_series(const uint8_t *start, const uint8_t *end, Scan *s) {
    const uint8_t *p = start;
    Py_ssize_t labels = 0, label_bytes = 0;
    uint8_t *key = s->keys ? s->keys + s->key_offsets[s->series] : NULL;
    if (key) *key++ = RAW_KEY;
    while (p < end) {
        Field f;
        if (next_field(&p, end, &f) < 0) return -1;
        if (f.number == 1 || f.number == 2) {
            if (f.wire != WIRE_LEN) return -1;
            if (f.number == 1) {
                if (f.len > UINT32_MAX) return -1;
                if (key) {
                    memcpy(key, f.at, f.len);
                    key += f.len;
                }
                labels++;
                label_bytes += (Py_ssize_t)f.len;
            } else {
                if (s->values) {
                    double v;
                    int64_t t;
                    if (read_sample(f.at, f.at + f.len, &v, &t) < 0) return -1;
                    s->values[s->samples] = v;
                    s->times[s->samples] = t;
                }
                s->samples++;
            }
        } else if (f.number == 3 || f.number == 4) {
            return 1; /* exemplars, native histograms */
        } else if (skip(&p, end, f.wire) < 0) {
            return -1;
        }
    }
    if (key) {
        /* each label's length, in the order of the labels (the fields read well above) */
        for (p = start; p < end;) {
            Field f;
            next_field(&p, end, &f);
            if (f.number == 1) {
                uint32_t n = (uint32_t)f.len;
                for (int i = 0; i < 4; i++) *key++ = (uint8_t)(n >> (8 * i));
            } else {
                skip(&p, end, f.wire);
            }
        }
    }
    s->key_bytes += 1 + label_bytes + 4 * labels;
    return 0;
}

/* The whole `WriteRequest`: 0, 1 (left to the decoder in Python) or -1 (malformed). */
static int read_request(const uint8_t *p, const uint8_t *end, Scan *s) {
    s->series = s->samples = s->key_bytes = 0;
    if (s->sample_offsets) s->sample_offsets[0] = 0;
    while (p < end) {
        Field f;
        if (next_field(&p, end, &f) < 0) return -1;
        if (f.number == 1) {
            if (f.wire != WIRE_LEN) return -1;
            int status = read_series(f.at, f.at + f.len, s);
            if (status != 0) return status;
            s->series++;
            if (s->key_bytes > INT32_MAX || s->samples > INT32_MAX) return 1;
            if (s->sample_offsets) {
                s->sample_offsets[s->series] = (int32_t)s->samples;
                s->key_offsets[s->series] = (int32_t)s->key_bytes;
            }
        } else if (f.number == 3) {
            return 1; /* metadata */
        } else if (skip(&p, end, f.wire) < 0) {
            return -1;
        }
    }
    return s->series ? 0 : 1;
}

static PyObject *scan_v1(PyObject *module, PyObject *body) {
    (void)module;
    if (!PyBytes_Check(body)) { /* immutable: both passes read the same bytes */
        PyErr_SetString(PyExc_TypeError, "scan_v1 takes bytes");
        return NULL;
    }
    const uint8_t *start = (const uint8_t *)PyBytes_AS_STRING(body);
    const uint8_t *end = start + PyBytes_GET_SIZE(body);
    Scan s = {0};
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = read_request(start, end, &s);
    Py_END_ALLOW_THREADS
    if (status != 0) Py_RETURN_NONE;

    Py_ssize_t n = s.series, m = s.samples;
    PyObject *key_offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *keys = PyBytes_FromStringAndSize(NULL, s.key_bytes);
    PyObject *sample_offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *values = PyBytes_FromStringAndSize(NULL, m * 8);
    PyObject *times = PyBytes_FromStringAndSize(NULL, m * 8);
    PyObject *out = NULL;
    if (key_offsets && keys && sample_offsets && values && times) {
        s.key_offsets = (int32_t *)PyBytes_AS_STRING(key_offsets);
        s.keys = (uint8_t *)PyBytes_AS_STRING(keys);
        s.sample_offsets = (int32_t *)PyBytes_AS_STRING(sample_offsets);
        s.values = (double *)PyBytes_AS_STRING(values);
        s.times = (int64_t *)PyBytes_AS_STRING(times);
        s.key_offsets[0] = 0;
        Py_BEGIN_ALLOW_THREADS
        status = read_request(start, end, &s); /* this pass also reads the samples */
        Py_END_ALLOW_THREADS
        if (status != 0) {
            out = Py_None; /* a malformed sample: left to the decoder in Python */
            Py_INCREF(out);
        } else if (s.series == n && s.samples == m) {
            out = Py_BuildValue("(nOOOOO)", n, key_offsets, keys, sample_offsets, values, times);
        } else { /* not reached: both passes read the same immutable bytes */
            PyErr_SetString(PyExc_RuntimeError, "scan_v1: the passes disagreed");
        }
    }
    Py_XDECREF(key_offsets);
    Py_XDECREF(keys);
    Py_XDECREF(sample_offsets);
    Py_XDECREF(values);
    Py_XDECREF(times);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_v1", scan_v1, METH_O,
     "scan_v1(body) -> (n, key_offsets, keys, sample_offsets, values, timestamps) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "Remote-Write 1.0 bodies scanned without the interpreter lock.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
