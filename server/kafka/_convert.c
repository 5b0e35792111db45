/* server.kafka._convert: the common case of server/kafka/records.py's record conversions, compiled.
 *
 * kafka_records_plain(buf, pos, end, count) takes the records section of an uncompressed (or decompressed)
 * Kafka record batch v2, buf[pos:end], holding `count` records, and returns (talos_records, low, high): the
 * same records in Talos's layout and the lowest and highest timestamp delta; or None when the records are
 * not the common case (a header, a varint longer than Kafka writes, an offset delta other than the record's
 * index) or are damaged in any way, for the Python conversion (_kafka_records_careful) to convert or explain.
 * It never raises for bad input: None is its only answer to it. With a fifth argument `reserve`, the records
 * come as a bytearray after that many zero bytes: the Talos batch itself, once its header is written in.
 *
 * Kafka record: varint length, int8 attributes, varlong timestamp delta, varint offset delta, varint key
 * length (-1: null) + key, varint value length (-1: null) + value, varint header count (here 0), all
 * varints zigzag. Talos record: uvarint body length, then the body: zigzag timestamp delta, zigzag key
 * length + key, zigzag value length + value, uvarint header count. So the bytes from the timestamp delta on
 * are Kafka's but for the attributes byte and the offset delta, which are dropped, and the length prefix,
 * which is rewritten. A Talos record is never longer than its Kafka form, so the output fits `end - pos`.
 *
 * talos_records_plain(buf, pos, end, count) is the way back, for a fetch: Talos records without headers in,
 * (kafka_records, low, high) out, or None for the Python conversion (_talos_records) to do or explain.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* An unsigned varint of at most `max_bytes` bytes at *p (before `end`); 0 if it runs past, is longer, or
 * is past 64 bits. */
static int
read_uvarint(const uint8_t **p, const uint8_t *end, int max_bytes, uint64_t *out)
{
    uint64_t raw = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*p >= end) {
            return 0;
        }
        uint8_t byte = *(*p)++;
        raw |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            if (i == 9 && byte > 1) {
                return 0;
            }
            *out = raw;
            return 1;
        }
    }
    return 0;
}

/* A zigzag varint of at most `max_bytes` bytes at *p (before `end`); 0 as read_uvarint. */
static int
read_zigzag(const uint8_t **p, const uint8_t *end, int max_bytes, int64_t *out)
{
    uint64_t raw;
    if (!read_uvarint(p, end, max_bytes, &raw)) {
        return 0;
    }
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 1;
}

static uint8_t *
write_uvarint(uint8_t *out, uint64_t value)
{
    while (value >= 0x80) {
        *out++ = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    *out++ = (uint8_t)value;
    return out;
}

static uint8_t *
write_zigzag(uint8_t *out, int64_t value)
{
    return write_uvarint(out, ((uint64_t)value << 1) ^ (uint64_t)(value >> 63));
}

/* Skip a zigzag length (-1: null) and the bytes it counts; 0 if it is damaged or runs past `end`. */
static int
skip_field(const uint8_t **p, const uint8_t *end)
{
    int64_t length;
    if (!read_zigzag(p, end, 5, &length) || length < -1) {
        return 0;
    }
    if (length > 0) {
        if (length > end - *p) {
            return 0;
        }
        *p += length;
    }
    return 1;
}

/* Kafka records → Talos records at `out` (room for `stop - p` bytes); the bytes written, or -1: not plain. */
static Py_ssize_t
from_kafka(const uint8_t *p, const uint8_t *stop, Py_ssize_t count, uint8_t *out, int64_t *low, int64_t *high)
{
    uint8_t *w = out;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, delta, offset_delta;
        if (!read_zigzag(&p, stop, 5, &length) || length < 3 || length > stop - p) {
            return -1;
        }
        const uint8_t *record_end = p + length;
        p++; /* the attributes byte */
        const uint8_t *stamp = p;
        if (!read_zigzag(&p, record_end, 10, &delta)) {
            return -1;
        }
        const uint8_t *stamp_end = p;
        if (!read_zigzag(&p, record_end, 5, &offset_delta) || offset_delta != index) {
            return -1;
        }
        const uint8_t *fields = p;
        if (!skip_field(&p, record_end) || !skip_field(&p, record_end)) {
            return -1;
        }
        if (p + 1 != record_end || *p != 0) { /* a header count of 0 ends the record */
            return -1;
        }
        w = write_uvarint(w, (uint64_t)((stamp_end - stamp) + (record_end - fields)));
        memcpy(w, stamp, (size_t)(stamp_end - stamp));
        w += stamp_end - stamp;
        memcpy(w, fields, (size_t)(record_end - fields));
        w += record_end - fields;
        *low = delta < *low ? delta : *low;
        *high = delta > *high ? delta : *high;
        p = record_end;
    }
    return p == stop ? w - out : -1;
}

/* Talos records → Kafka records at `out` (room for `stop - p + 11 * count` bytes: a Kafka record is its Talos
 * body plus at most 5 (length) + 1 (attributes) + 5 (offset delta) bytes); the bytes written, or -1. */
static Py_ssize_t
to_kafka(const uint8_t *p, const uint8_t *stop, Py_ssize_t count, uint8_t *out, int64_t *low, int64_t *high)
{
    uint8_t *w = out;
    for (Py_ssize_t index = 0; index < count; index++) {
        uint64_t length, headers;
        int64_t delta;
        if (!read_uvarint(&p, stop, 5, &length) || length < 4 || (Py_ssize_t)length > stop - p) {
            return -1;
        }
        const uint8_t *body = p;
        const uint8_t *record_end = p + length;
        if (!read_zigzag(&p, record_end, 10, &delta)) {
            return -1;
        }
        const uint8_t *fields = p;
        if (!skip_field(&p, record_end) || !skip_field(&p, record_end)) {
            return -1;
        }
        if (!read_uvarint(&p, record_end, 1, &headers) || headers != 0 || p != record_end) {
            return -1; /* headers (their name lengths differ between the formats), or damaged */
        }
        uint8_t offset_delta[5];
        Py_ssize_t offset_size = write_zigzag(offset_delta, (int64_t)index) - offset_delta;
        w = write_zigzag(w, (int64_t)(1 + (Py_ssize_t)length + offset_size));
        *w++ = 0; /* the record's attributes, unused */
        memcpy(w, body, (size_t)(fields - body));
        w += fields - body;
        memcpy(w, offset_delta, (size_t)offset_size);
        w += offset_size;
        memcpy(w, fields, (size_t)(record_end - fields));
        w += record_end - fields;
        *low = delta < *low ? delta : *low;
        *high = delta > *high ? delta : *high;
    }
    return p == stop ? w - out : -1;
}

typedef Py_ssize_t (*converter)(const uint8_t *, const uint8_t *, Py_ssize_t, uint8_t *, int64_t *, int64_t *);

/* (buf, pos, end, count[, reserve]) → (records, low, high) through `convert`, or None; `extra`: output bytes
 * per record beyond the input's. With `reserve` > 0 the records come as a bytearray after `reserve` zero bytes
 * (room for the batch header the caller writes), so the caller need not copy them into its batch. */
static PyObject *
run(PyObject *const *args, Py_ssize_t nargs, const char *usage, converter convert, Py_ssize_t extra)
{
    if (nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    Py_ssize_t reserve = nargs == 5 ? PyLong_AsSsize_t(args[4]) : 0;
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (reserve < 0 || reserve > 4096) {
        PyErr_SetString(PyExc_ValueError, "reserve must be 0..4096");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *out = NULL;
    if (pos < 0 || end > view.len || pos > end || count <= 0 || count > end - pos ||
        count > (PY_SSIZE_T_MAX - (end - pos)) / (extra + 1)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t room = (end - pos) + count * extra;
    out = reserve ? PyByteArray_FromStringAndSize(NULL, reserve + room) : PyBytes_FromStringAndSize(NULL, room);
    if (out == NULL) {
        goto done;
    }
    uint8_t *dst = (uint8_t *)(reserve ? PyByteArray_AS_STRING(out) : PyBytes_AS_STRING(out));
    int64_t low = INT64_MAX, high = INT64_MIN;
    const uint8_t *p = (const uint8_t *)view.buf + pos;
    Py_ssize_t written = convert(p, p + (end - pos), count, dst + reserve, &low, &high);
    if (written < 0) {
        result = Py_NewRef(Py_None);
    } else if (reserve) {
        memset(dst, 0, (size_t)reserve);
        if (PyByteArray_Resize(out, reserve + written) == 0) {
            result = Py_BuildValue("(OLL)", out, (long long)low, (long long)high);
        }
    } else if (_PyBytes_Resize(&out, written) == 0) { /* (on failure it frees out and sets it NULL) */
        result = Py_BuildValue("(OLL)", out, (long long)low, (long long)high);
    }
done:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
kafka_records_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return run(args, nargs, "kafka_records_plain(buf, pos, end, count[, reserve])", from_kafka, 0);
}

static PyObject *
talos_records_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return run(args, nargs, "talos_records_plain(buf, pos, end, count[, reserve])", to_kafka, 11);
}

static PyMethodDef methods[] = {
    {"kafka_records_plain", (PyCFunction)(void (*)(void))kafka_records_plain, METH_FASTCALL,
     "(talos_records, low, high) for a Kafka records section without headers; None for anything else."},
    {"talos_records_plain", (PyCFunction)(void (*)(void))talos_records_plain, METH_FASTCALL,
     "(kafka_records, low, high) for a Talos records section without headers; None for anything else."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "server.kafka._convert",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__convert(void)
{
    return PyModule_Create(&module);
}
