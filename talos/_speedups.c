/* talos._speedups: the record codec's per-record loops, compiled.
 *
 * The same four functions as talos/_codec.py's pure-Python ones (_encode_records_py, _encode_values_py,
 * _walk_records_py, _decode_records_py), giving the same results and raising the same errors; _codec.py
 * binds the public names to these when this module imports (and TALOS_NO_SPEEDUPS is not 1).
 *
 * Only the common shapes are handled here: exact bytes or None for keys and values, str header names, exact
 * ints that fit 64 bits, bytes / bytearray / byte memoryviews. Anything else (another type, an out-of-range
 * number, a wrong argument count, an attribute that is missing) is handed to the pure-Python function of
 * the same name before anything is returned, so what the caller sees is exactly that function's answer or
 * error. A damaged buffer raises talos._errors.CorruptBatchError, in the same cases as the Python walk
 * (the messages may be worded differently).
 *
 * The batch format is in talos/_codec.py's docstring. Varints are up to 10 bytes (70 bits, as Python
 * reads them), so lengths and deltas are held in 128-bit integers until they are checked against the
 * buffer and the 64-bit timestamp range.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h>
#include <string.h>

#ifndef __SIZEOF_INT128__
#error "talos._speedups needs __int128 (without it the pure-Python codec is used)"
#endif

typedef __int128 i128;
typedef unsigned __int128 u128;

static PyObject *CorruptBatchError;  /* talos._errors.CorruptBatchError */
static PyObject *RecordType;         /* talos._codec.Record, looked up on first decode */
static Py_ssize_t record_slots[5];   /* where its slots (offset, timestamp, key, value, headers) are; 0: unknown */
static PyObject *str_timestamp, *str_key, *str_value, *str_headers, *str_offset, *empty_tuple;

/* ------------------------------------------------------------------ the pure-Python twin */

/* Call talos._codec.<name>(*args): the answer (or error) for whatever the fast path does not take. */
static PyObject *
python_twin(const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    PyErr_Clear();
    PyObject *codec = PyImport_ImportModule("talos._codec");
    if (codec == NULL) {
        return NULL;
    }
    PyObject *function = PyObject_GetAttrString(codec, name);
    Py_DECREF(codec);
    if (function == NULL) {
        return NULL;
    }
    PyObject *result = PyObject_Vectorcall(function, args, (size_t)nargs, NULL);
    Py_DECREF(function);
    return result;
}

/* An exact int that fits 64 bits; 0 (no error set) when it is anything else. */
static int
as_int64(PyObject *obj, int64_t *out)
{
    if (!PyLong_CheckExact(obj)) {
        return 0;
    }
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = (int64_t)value;
    return 1;
}

/* ------------------------------------------------------------------ encoding */

static inline Py_ssize_t
uvarint_size(uint64_t n)
{
    Py_ssize_t size = 1;
    while (n > 0x7F) {
        n >>= 7;
        size++;
    }
    return size;
}

static inline unsigned char *
put_uvarint(unsigned char *out, uint64_t n)
{
    while (n > 0x7F) {
        *out++ = (unsigned char)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    *out++ = (unsigned char)n;
    return out;
}

/* Python's (n << 1) ^ (n >> 63) for n in int64: always 0 .. 2**64 - 1. */
static inline uint64_t
zigzag(int64_t n)
{
    return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
}

/* The encoded size of a key or value field: its length varint and its bytes (None: one byte). */
static inline Py_ssize_t
field_size(PyObject *data)
{
    if (data == Py_None) {
        return 1;
    }
    Py_ssize_t length = PyBytes_GET_SIZE(data);
    return uvarint_size((uint64_t)length << 1) + length;
}

static inline unsigned char *
put_field(unsigned char *out, PyObject *data)
{
    if (data == Py_None) {
        *out++ = 1; /* zigzag(-1) */
        return out;
    }
    Py_ssize_t length = PyBytes_GET_SIZE(data);
    out = put_uvarint(out, (uint64_t)length << 1);
    memcpy(out, PyBytes_AS_STRING(data), (size_t)length);
    return out + length;
}

static inline int
bytes_or_none(PyObject *obj)
{
    return obj == Py_None || PyBytes_CheckExact(obj);
}

typedef struct {
    PyObject *key;     /* exact bytes or None (new references) */
    PyObject *value;
    PyObject *headers; /* an exact list or tuple of (str, bytes | None) tuples */
    uint64_t delta;    /* zigzag of the timestamp delta */
    Py_ssize_t body;   /* the record's length after its length varint */
} pending_record;

/* The encoded size of a record's headers (count varint, then name and value of each); -1 if one is not of
   the shape the fast path takes (no error set), or -2 with an error set. */
static Py_ssize_t
headers_size(PyObject *headers)
{
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    if (count == 0) {
        return 1;
    }
    Py_ssize_t size = uvarint_size((uint64_t)count);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = items[i];
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
            return -1;
        }
        PyObject *name = PyTuple_GET_ITEM(item, 0), *value = PyTuple_GET_ITEM(item, 1);
        if (!PyUnicode_CheckExact(name) || !bytes_or_none(value)) {
            return -1;
        }
        Py_ssize_t name_length;
        if (PyUnicode_AsUTF8AndSize(name, &name_length) == NULL) {
            PyErr_Clear(); /* e.g. a lone surrogate: Python's str.encode() raises it */
            return -1;
        }
        size += uvarint_size((uint64_t)name_length) + name_length + field_size(value);
    }
    return size;
}

static unsigned char *
put_headers(unsigned char *out, PyObject *headers)
{
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    out = put_uvarint(out, (uint64_t)count);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t name_length;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(items[i], 0), &name_length);
        out = put_uvarint(out, (uint64_t)name_length);
        memcpy(out, name, (size_t)name_length);
        out = put_field(out + name_length, PyTuple_GET_ITEM(items[i], 1));
    }
    return out;
}

/* Frees the array (zeroed when allocated) and the references taken so far. */
static void
release_pending(pending_record *records, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_XDECREF(records[i].key);
        Py_XDECREF(records[i].value);
        Py_XDECREF(records[i].headers);
    }
    PyMem_Free(records);
}

/* A record's body length (timestamp delta, key, value, headers) once key, value and delta are set. */
static inline Py_ssize_t
body_size(const pending_record *record, Py_ssize_t headers)
{
    return uvarint_size(record->delta) + field_size(record->key) + field_size(record->value) + headers;
}

static PyObject *
encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !(PyList_CheckExact(args[0]) || PyTuple_CheckExact(args[0]))) {
        return python_twin("_encode_records_py", args, nargs);
    }
    if (PySequence_Fast_GET_SIZE(args[0]) == 0) {
        return python_twin("_encode_records_py", args, nargs); /* its IndexError */
    }
    /* A list is copied (its item pointers): reading a record's attributes may run code that changes it. */
    PyObject *sequence = PyList_CheckExact(args[0]) ? PyList_AsTuple(args[0]) : Py_NewRef(args[0]);
    if (sequence == NULL) {
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(sequence);
    int64_t now = 0;
    int have_now = as_int64(args[1], &now);
    pending_record *records = PyMem_Calloc((size_t)count, sizeof(pending_record));
    int64_t *stamps = PyMem_Malloc((size_t)count * sizeof(int64_t));
    if (records == NULL || stamps == NULL) {
        PyMem_Free(records);
        PyMem_Free(stamps);
        Py_DECREF(sequence);
        return PyErr_NoMemory();
    }
    PyObject **items = PySequence_Fast_ITEMS(sequence);
    Py_ssize_t total = 0;
    int64_t first = 0, largest = 0;
    /* Every timestamp first, as Python does (a record without one fails there, before any key is read). */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *stamp = PyObject_GetAttr(items[i], str_timestamp);
        if (stamp == NULL) {
            goto fallback;
        }
        int fits = stamp == Py_None ? have_now : as_int64(stamp, &stamps[i]);
        if (stamp == Py_None) {
            stamps[i] = now;
        }
        Py_DECREF(stamp);
        if (!fits) {
            goto fallback;
        }
    }
    first = largest = stamps[0];
    for (Py_ssize_t i = 0; i < count; i++) {
        pending_record *record = &records[i];
        int64_t delta;
        if (__builtin_sub_overflow(stamps[i], first, &delta)) {
            goto fallback; /* a delta past 64 bits: Python's ints encode it */
        }
        if (stamps[i] > largest) {
            largest = stamps[i];
        }
        record->delta = zigzag(delta);
        record->key = PyObject_GetAttr(items[i], str_key);
        record->value = record->key ? PyObject_GetAttr(items[i], str_value) : NULL;
        record->headers = record->value ? PyObject_GetAttr(items[i], str_headers) : NULL;
        if (record->headers == NULL || !bytes_or_none(record->key) || !bytes_or_none(record->value)
            || !(PyList_CheckExact(record->headers) || PyTuple_CheckExact(record->headers))) {
            goto fallback;
        }
        if (PyList_CheckExact(record->headers)) { /* as a tuple: what is measured here is what is written */
            Py_SETREF(record->headers, PyList_AsTuple(record->headers));
            if (record->headers == NULL) {
                goto fallback;
            }
        }
        Py_ssize_t headers = headers_size(record->headers);
        if (headers < 0) {
            goto fallback;
        }
        record->body = body_size(record, headers);
        total += uvarint_size((uint64_t)record->body) + record->body;
    }
    PyMem_Free(stamps);
    stamps = NULL;
    Py_DECREF(sequence);
    PyObject *body = PyBytes_FromStringAndSize(NULL, total);
    if (body == NULL) {
        release_pending(records, count);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(body);
    for (Py_ssize_t i = 0; i < count; i++) {
        pending_record *record = &records[i];
        out = put_uvarint(out, (uint64_t)record->body);
        out = put_uvarint(out, record->delta);
        out = put_field(out, record->key);
        out = put_field(out, record->value);
        if (PySequence_Fast_GET_SIZE(record->headers) == 0) {
            *out++ = 0;
        }
        else {
            out = put_headers(out, record->headers);
        }
    }
    release_pending(records, count);
    return Py_BuildValue("(NLL)", body, (long long)first, (long long)largest);

fallback:
    release_pending(records, count);
    PyMem_Free(stamps);
    Py_DECREF(sequence);
    return python_twin("_encode_records_py", args, nargs);
}

static PyObject *
encode_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int64_t delta;
    if (nargs != 3 || !(args[0] == Py_None || PyList_CheckExact(args[0]) || PyTuple_CheckExact(args[0]))
        || !(PyList_CheckExact(args[1]) || PyTuple_CheckExact(args[1])) || !as_int64(args[2], &delta)) {
        return python_twin("_encode_values_py", args, nargs);
    }
    PyObject *keys = args[0], *values = args[1];
    Py_ssize_t count = PySequence_Fast_GET_SIZE(values);
    if (keys != Py_None && PySequence_Fast_GET_SIZE(keys) != count) {
        return python_twin("_encode_values_py", args, nargs); /* zip(strict=True)'s ValueError */
    }
    uint64_t stamp = zigzag(delta);
    Py_ssize_t stamp_size = uvarint_size(stamp), total = 0;
    PyObject **value_items = PySequence_Fast_ITEMS(values);
    PyObject **key_items = keys == Py_None ? NULL : PySequence_Fast_ITEMS(keys);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = key_items ? key_items[i] : Py_None, *value = value_items[i];
        if (!bytes_or_none(key) || !bytes_or_none(value)) {
            return python_twin("_encode_values_py", args, nargs);
        }
        Py_ssize_t body = stamp_size + field_size(key) + field_size(value) + 1;
        total += uvarint_size((uint64_t)body) + body;
    }
    PyObject *section = PyBytes_FromStringAndSize(NULL, total);
    if (section == NULL) {
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(section);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = key_items ? key_items[i] : Py_None, *value = value_items[i];
        out = put_uvarint(out, (uint64_t)(stamp_size + field_size(key) + field_size(value) + 1));
        out = put_uvarint(out, stamp);
        out = put_field(out, key);
        out = put_field(out, value);
        *out++ = 0; /* no headers */
    }
    return section;
}

/* Big-endian stores, for the batch header. */
static inline void
put_be(unsigned char *out, uint64_t n, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        out[i] = (unsigned char)(n & 0xff);
        n >>= 8;
    }
}

static PyObject *crc32c_function; /* crc32c.crc32c */

/* one_value_batch(value, now, /) -> (batch, crc): the batch of one record that is a value alone, made in one
   bytearray, header and CRC included (talos._codec._one_value_batch_py). */
static PyObject *
one_value_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int64_t now;
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !as_int64(args[1], &now)) {
        return python_twin("_one_value_batch_py", args, nargs);
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    uint64_t field = (uint64_t)size << 1;
    Py_ssize_t record = uvarint_size(field) + size + 3; /* delta 0, no key, the value's length, it, no headers */
    Py_ssize_t length = 53 + uvarint_size((uint64_t)record) + record;
    if (length > INT32_MAX) {
        return python_twin("_one_value_batch_py", args, nargs); /* its ValueError */
    }
    PyObject *batch = PyByteArray_FromStringAndSize(NULL, length);
    if (batch == NULL) {
        return NULL;
    }
    unsigned char *start = (unsigned char *)PyByteArray_AS_STRING(batch);
    /* >qibIhiqqqhi: base offset 0, length, magic 1, CRC (below), flags 0, 1 record, both timestamps now, no
       producer (-1), epoch -1, sequence -1. */
    put_be(start, 0, 8);
    put_be(start + 8, (uint64_t)length, 4);
    start[12] = 1;
    put_be(start + 13, 0, 4);
    put_be(start + 17, 0, 2);
    put_be(start + 19, 1, 4);
    put_be(start + 23, (uint64_t)now, 8);
    put_be(start + 31, (uint64_t)now, 8);
    put_be(start + 39, UINT64_MAX, 8);
    put_be(start + 47, 0xffff, 2);
    put_be(start + 49, 0xffffffff, 4);
    unsigned char *out = put_uvarint(start + 53, (uint64_t)record);
    *out++ = 0; /* zigzag(0): the timestamp delta */
    *out++ = 1; /* zigzag(-1): no key */
    out = put_uvarint(out, field);
    memcpy(out, PyBytes_AS_STRING(args[0]), (size_t)size);
    out[size] = 0; /* no headers */
    PyObject *tail = PyMemoryView_FromMemory((char *)start + 17, length - 17, PyBUF_READ);
    if (tail == NULL) {
        Py_DECREF(batch);
        return NULL;
    }
    PyObject *crc = PyObject_CallOneArg(crc32c_function, tail);
    Py_DECREF(tail);
    unsigned long value = crc == NULL ? 0 : PyLong_AsUnsignedLong(crc);
    if (crc == NULL || (value == (unsigned long)-1 && PyErr_Occurred())) {
        Py_XDECREF(crc);
        Py_DECREF(batch);
        return NULL;
    }
    put_be(start + 13, value, 4);
    PyObject *pair = PyTuple_Pack(2, batch, crc);
    Py_DECREF(batch);
    Py_DECREF(crc);
    return pair;
}

/* ------------------------------------------------------------------ decoding */

/* Raises CorruptBatchError(message) with the pure-Python codec's wording. */
static void *
corrupt(const char *message)
{
    PyErr_SetString(CorruptBatchError, message);
    return NULL;
}

/* A 128-bit integer in decimal, for the messages (PyErr_Format has no 128-bit conversion). */
static const char *
decimal(i128 n, char buffer[48])
{
    char *at = buffer + 47;
    *at = '\0';
    u128 magnitude = n < 0 ? (u128)0 - (u128)n : (u128)n;
    do {
        *--at = (char)('0' + (int)(magnitude % 10));
        magnitude /= 10;
    } while (magnitude);
    if (n < 0) {
        *--at = '-';
    }
    return at;
}

/* A byte buffer the fast path reads directly: bytes, bytearray, or a contiguous one-dimensional memoryview
   of unsigned bytes. 0 (no error set) for anything else. */
static int
byte_buffer(PyObject *obj, Py_buffer *view)
{
    if (!(PyBytes_CheckExact(obj) || PyByteArray_CheckExact(obj) || PyMemoryView_Check(obj))) {
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (view->ndim > 1 || view->itemsize != 1 || (view->format != NULL && strcmp(view->format, "B") != 0)) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* _get_uvarint: the value (up to 70 bits) at pos, and the position after it; -1 with CorruptBatchError set. */
static inline Py_ssize_t
get_uvarint(const unsigned char *data, Py_ssize_t pos, Py_ssize_t end, u128 *value)
{
    u128 result = 0;
    int shift = 0;
    for (;;) {
        if (pos >= end) {
            corrupt("record runs past the end of the batch");
            return -1;
        }
        unsigned char byte = data[pos++];
        result |= (u128)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *value = result;
            return pos;
        }
        shift += 7;
        if (shift > 63) {
            corrupt("varint longer than 64 bits");
            return -1;
        }
    }
}

static inline Py_ssize_t
get_varint(const unsigned char *data, Py_ssize_t pos, Py_ssize_t end, i128 *value)
{
    u128 raw;
    pos = get_uvarint(data, pos, end, &raw);
    if (pos >= 0) {
        i128 half = (i128)(raw >> 1);
        *value = (raw & 1) ? -half - 1 : half;
    }
    return pos;
}

/* _get_bytes: a key, value or header value (None for length -1); NULL with an error set. */
static PyObject *
get_bytes(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t end)
{
    i128 length;
    Py_ssize_t at = get_varint(data, *pos, end, &length);
    if (at < 0) {
        return NULL;
    }
    if (length == -1) {
        *pos = at;
        Py_RETURN_NONE;
    }
    if (length < -1 || (i128)at + length > (i128)end) {
        return corrupt("field length out of bounds");
    }
    *pos = at + (Py_ssize_t)length;
    return PyBytes_FromStringAndSize((const char *)data + at, (Py_ssize_t)length);
}

/* _walk_headers: the tuple of (name, value) pairs; NULL with an error set. */
static PyObject *
get_headers(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t record_end, u128 count)
{
    Py_ssize_t cursor = *pos;
    if (count > (u128)(record_end - cursor)) {
        char digits[48];
        PyErr_Format(CorruptBatchError, "%s headers cannot fit in the record", decimal((i128)count, digits));
        return NULL;
    }
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        u128 name_length;
        cursor = get_uvarint(data, cursor, record_end, &name_length);
        if (cursor < 0) {
            goto failed;
        }
        if ((u128)cursor + name_length > (u128)record_end) {
            corrupt("header name runs past the record");
            goto failed;
        }
        PyObject *name = PyUnicode_DecodeUTF8((const char *)data + cursor, (Py_ssize_t)name_length, "strict");
        if (name == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                corrupt("header name is not UTF-8");
            }
            goto failed;
        }
        cursor += (Py_ssize_t)name_length;
        PyObject *value = get_bytes(data, &cursor, record_end);
        if (value == NULL) {
            Py_DECREF(name);
            goto failed;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(name);
            Py_DECREF(value);
            goto failed;
        }
        PyTuple_SET_ITEM(pair, 0, name);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(headers, i, pair);
    }
    *pos = cursor;
    return headers;

failed:
    Py_DECREF(headers);
    return NULL;
}

static PyObject *
walk_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_buffer view;
    int64_t start, end, count;
    if (nargs != 4 || !as_int64(args[1], &start) || !as_int64(args[2], &end) || !as_int64(args[3], &count)
        || start < 0) {
        return python_twin("_walk_records_py", args, nargs);
    }
    if (!byte_buffer(args[0], &view)) {
        return python_twin("_walk_records_py", args, nargs);
    }
    if (end > (int64_t)view.len) { /* Python would index past the buffer */
        PyBuffer_Release(&view);
        return python_twin("_walk_records_py", args, nargs);
    }
    const unsigned char *data = view.buf;
    int64_t cursor = start, found = 0;
    while (cursor < end && found <= count) {
        unsigned char size = data[cursor];
        if (size < 0x80) { /* a one-byte length: the common case */
            cursor += 1 + size;
        }
        else {
            u128 length;
            Py_ssize_t after = get_uvarint(data, (Py_ssize_t)cursor, (Py_ssize_t)end, &length);
            if (after < 0) {
                PyBuffer_Release(&view);
                return NULL;
            }
            /* past the end either way: only that it is not equal to end matters */
            cursor = length > (u128)(INT64_MAX - after) ? INT64_MAX : after + (int64_t)length;
        }
        found++;
    }
    PyBuffer_Release(&view);
    if (cursor != end) {
        PyErr_Format(CorruptBatchError, "record %lld runs past the end of the batch", (long long)(found - 1));
        return NULL;
    }
    if (found != count) {
        if (found <= count) {
            PyErr_Format(CorruptBatchError, "the header counts %lld records, the batch holds %lld", (long long)count,
                         (long long)found);
        }
        else {
            PyErr_Format(CorruptBatchError, "the header counts %lld records, the batch holds more", (long long)count);
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

static int
load_record_type(void)
{
    PyObject *codec = PyImport_ImportModule("talos._codec");
    if (codec == NULL) {
        return -1;
    }
    PyObject *type = PyObject_GetAttrString(codec, "Record");
    Py_DECREF(codec);
    if (type == NULL) {
        return -1;
    }
    if (!PyType_Check(type)) {
        Py_DECREF(type);
        PyErr_SetString(PyExc_TypeError, "talos._codec.Record is not a class");
        return -1;
    }
    /* Its fields are __slots__: member descriptors of object pointers, each at an offset in the instance. */
    PyObject *names[5] = {str_offset, str_timestamp, str_key, str_value, str_headers};
    for (int i = 0; i < 5; i++) {
        PyObject *member = PyObject_GetAttr(type, names[i]);
        if (member == NULL) {
            Py_DECREF(type);
            return -1;
        }
        if (Py_IS_TYPE(member, &PyMemberDescr_Type)
            && ((PyMemberDescrObject *)member)->d_member->type == T_OBJECT_EX) {
            record_slots[i] = ((PyMemberDescrObject *)member)->d_member->offset;
        }
        Py_DECREF(member);
    }
    for (int i = 0; i < 5; i++) {
        if (record_slots[i] <= 0) { /* not slots as expected: new_record sets them by name */
            memset(record_slots, 0, sizeof(record_slots));
            break;
        }
    }
    RecordType = type;
    return 0;
}

/* Record(offset, timestamp, key, value, headers) without its __init__ (a frozen dataclass's sets each field
   through object.__setattr__, ~1 us a record): the new instance's slots are filled in directly (or set as
   object.__setattr__ would, if they were not found). Steals the references it is given. */
static PyObject *
new_record(PyObject *offset, PyObject *timestamp, PyObject *key, PyObject *value, PyObject *headers)
{
    PyTypeObject *type = (PyTypeObject *)RecordType;
    PyObject *fields[5] = {offset, timestamp, key, value, headers};
    PyObject *names[5] = {str_offset, str_timestamp, str_key, str_value, str_headers};
    PyObject *record = NULL;
    for (int i = 0; i < 5; i++) {
        if (fields[i] == NULL) {
            goto done;
        }
    }
    record = type->tp_new(type, empty_tuple, NULL);
    if (record != NULL && record_slots[0] > 0) {
        for (int i = 0; i < 5; i++) {
            *(PyObject **)((char *)record + record_slots[i]) = fields[i]; /* empty until now: nothing to release */
        }
        return record;
    }
    for (int i = 0; record != NULL && i < 5; i++) {
        if (PyObject_GenericSetAttr(record, names[i], fields[i]) < 0) {
            Py_CLEAR(record);
        }
    }
done:
    for (int i = 0; i < 5; i++) {
        Py_XDECREF(fields[i]);
    }
    return record;
}

static PyObject *
decode_records_section(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_buffer view;
    int64_t start, end, count, base_offset, first_timestamp;
    if (nargs != 6 || !as_int64(args[1], &start) || !as_int64(args[2], &end) || !as_int64(args[3], &count)
        || !as_int64(args[4], &base_offset) || !as_int64(args[5], &first_timestamp) || start < 0
        || (count > 0 && base_offset > INT64_MAX - count)) {
        return python_twin("_decode_records_py", args, nargs);
    }
    if (RecordType == NULL && load_record_type() < 0) {
        return NULL;
    }
    if (!byte_buffer(args[0], &view)) {
        return python_twin("_decode_records_py", args, nargs);
    }
    if (end > (int64_t)view.len) {
        PyBuffer_Release(&view);
        return python_twin("_decode_records_py", args, nargs);
    }
    const unsigned char *data = view.buf;
    Py_ssize_t cursor = (Py_ssize_t)start, stop = (Py_ssize_t)end;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        goto failed;
    }
    for (int64_t index = 0; index < count; index++) {
        u128 size, header_count;
        i128 delta;
        cursor = get_uvarint(data, cursor, stop, &size);
        if (cursor < 0) {
            goto failed;
        }
        if ((u128)cursor + size > (u128)stop) {
            PyErr_Format(CorruptBatchError, "record %lld runs past the end of the batch", (long long)index);
            goto failed;
        }
        Py_ssize_t record_end = cursor + (Py_ssize_t)size;
        cursor = get_varint(data, cursor, record_end, &delta);
        if (cursor < 0) {
            goto failed;
        }
        PyObject *key = get_bytes(data, &cursor, record_end);
        if (key == NULL) {
            goto failed;
        }
        PyObject *value = get_bytes(data, &cursor, record_end);
        if (value == NULL) {
            Py_DECREF(key);
            goto failed;
        }
        PyObject *headers;
        cursor = get_uvarint(data, cursor, record_end, &header_count);
        if (cursor < 0) {
            headers = NULL;
        }
        else if (header_count == 0) {
            headers = Py_NewRef(empty_tuple);
        }
        else {
            headers = get_headers(data, &cursor, record_end, header_count);
        }
        if (headers == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto failed;
        }
        i128 stamp = (i128)first_timestamp + delta;
        if (cursor != record_end || stamp < (i128)INT64_MIN || stamp > (i128)INT64_MAX) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            char digits[48];
            if (cursor != record_end) {
                PyErr_Format(CorruptBatchError, "record %lld: its fields do not fill its declared length",
                             (long long)index);
            }
            else {
                PyErr_Format(CorruptBatchError, "record %lld: timestamp %s is outside 64 bits", (long long)index,
                             decimal(stamp, digits));
            }
            goto failed;
        }
        PyObject *record = new_record(PyLong_FromLongLong(base_offset + index), PyLong_FromLongLong((long long)stamp),
                                      key, value, headers);
        if (record == NULL) {
            goto failed;
        }
        int appended = PyList_Append(out, record);
        Py_DECREF(record);
        if (appended < 0) {
            goto failed;
        }
    }
    if (cursor != stop) {
        PyErr_Format(CorruptBatchError, "the header counts %lld records, the batch holds more", (long long)count);
        goto failed;
    }
    PyBuffer_Release(&view);
    return out;

failed:
    PyBuffer_Release(&view);
    Py_XDECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ the module */

static PyMethodDef methods[] = {
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     "encode_records(records, now, /) -> (body, first_timestamp, max_timestamp)"},
    {"encode_values", (PyCFunction)(void (*)(void))encode_values, METH_FASTCALL,
     "encode_values(keys, values, delta, /) -> body"},
    {"one_value_batch", (PyCFunction)(void (*)(void))one_value_batch, METH_FASTCALL,
     "one_value_batch(value, now, /) -> (batch, crc)"},
    {"walk_records", (PyCFunction)(void (*)(void))walk_records, METH_FASTCALL,
     "walk_records(buf, start, end, count, /) -> None"},
    {"decode_records_section", (PyCFunction)(void (*)(void))decode_records_section, METH_FASTCALL,
     "decode_records_section(buf, start, end, count, base_offset, first_timestamp, /) -> list[Record]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "talos._speedups",
    .m_doc = "The record codec's per-record loops, compiled (see talos._codec).",
    .m_size = -1,
    .m_methods = methods,
};

/* module.name, imported (a new reference), or NULL with the error set. */
static PyObject *
imported(const char *module, const char *name)
{
    PyObject *found = PyImport_ImportModule(module);
    if (found == NULL) {
        return NULL;
    }
    PyObject *attribute = PyObject_GetAttrString(found, name);
    Py_DECREF(found);
    return attribute;
}

PyMODINIT_FUNC
PyInit__speedups(void)
{
    CorruptBatchError = imported("talos._errors", "CorruptBatchError");
    crc32c_function = imported("crc32c", "crc32c");
    if (CorruptBatchError == NULL || crc32c_function == NULL) {
        return NULL;
    }
    str_timestamp = PyUnicode_InternFromString("timestamp");
    str_key = PyUnicode_InternFromString("key");
    str_value = PyUnicode_InternFromString("value");
    str_headers = PyUnicode_InternFromString("headers");
    str_offset = PyUnicode_InternFromString("offset");
    empty_tuple = PyTuple_New(0);
    if (!str_timestamp || !str_key || !str_value || !str_headers || !str_offset || !empty_tuple) {
        return NULL;
    }
    return PyModule_Create(&speedups_module);
}
