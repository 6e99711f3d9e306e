/* Compiled per-event path of N-PAMP: frame header decode (wire), the consumer's and the
 * producer's per-event Bridge payloads (bridge/session.py), and positional constructors of
 * the per-event objects (_makers.py). No key material: the record layer's AEAD, key schedule
 * and HMAC are Python over cryptography and hashlib (record/).
 *
 * Each function has a pure-Python twin that stays the reference (frame.py
 * pull_frame_header_reference / pull_frame_reference, BridgeSession._data_frame and
 * send_events' loop, _makers.reference_maker); the tests compare them, and `make fuzz` runs
 * both on mutated input under AddressSanitizer and UBSan (scripts/fuzz_speedups.py).
 * Figures: docs/npamp.md (Performance). Built with -Wall -Wextra -Werror (setup.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define PREFIX 21
#define HEADER 36

/* CRC-32C (Castagnoli, reflected 0x82F63B78) of the header prefix, table-driven: the header
 * decode below checks it before any other field, as the reference decoder does. */
static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static void put_be(unsigned char *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) { p[i] = (unsigned char)(v & 0xFF); v >>= 8; }
}

static int nargs_is(const char *name, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs == want) return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name, want,
                 nargs);
    return 0;
}

static int arg_u64(PyObject *arg, unsigned long long *out) {
    unsigned long long v = PyLong_AsUnsignedLongLongMask(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return 0;
    *out = v;
    return 1;
}

/* A read-only contiguous buffer, as PyArg's "y*" (bytes-like, not str). */
static int arg_buffer(PyObject *arg, Py_buffer *view) {
    if (PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "a bytes-like object is required, not 'str'");
        return 0;
    }
    return PyObject_GetBuffer(arg, view, PyBUF_SIMPLE) == 0;
}

typedef struct {
    uint64_t seq, len;
    unsigned ft, ch, flags;
} Fields;

/* Same order as wire.frame.pull_frame_header: CRC first, magic, version, reserved, frame type
 * 0, channel 0xFFFF, payload cap. 1 when every rule holds. */
static int decode_header(const unsigned char *h, unsigned long long cap, Fields *f) {
    uint32_t crc = ((uint32_t)h[21] << 24) | ((uint32_t)h[22] << 16) | ((uint32_t)h[23] << 8) | h[24];
    int ok = crc32c(h, PREFIX) == crc && memcmp(h, "NPAM", 4) == 0 && (h[4] >> 4) == 2;
    for (int i = 25; ok && i < HEADER; i++) ok = h[i] == 0;
    f->ft = ((unsigned)h[5] << 8) | h[6];
    f->ch = ((unsigned)h[7] << 8) | h[8];
    f->seq = f->len = 0;
    for (int i = 9; i < 17; i++) f->seq = (f->seq << 8) | h[i];
    for (int i = 17; i < 21; i++) f->len = (f->len << 8) | h[i];
    f->flags = h[4] & 0x0F;
    return ok && f->ft != 0 && f->ch != 0xFFFF && f->len <= cap;
}

static PyObject *make_header(PyTypeObject *cls, const Fields *f) {
    PyObject *out = cls->tp_alloc(cls, 6);
    if (out == NULL) return NULL;
    PyObject *items[6] = {
        PyLong_FromUnsignedLong(f->ft), PyLong_FromUnsignedLong(f->ch),
        PyLong_FromUnsignedLongLong(f->seq), PyLong_FromUnsignedLongLong(f->len),
        PyLong_FromUnsignedLong(f->flags), PyLong_FromLong(2),
    };
    for (int i = 0; i < 6; i++) {
        if (items[i] == NULL) {
            for (int j = 0; j < 6; j++) Py_XDECREF(items[j]);
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, items[i]);
    }
    /* Six ints can hold no reference cycle: keep it out of the cyclic collector's lists, as
     * CPython does for such tuples (one header per frame received would otherwise be
     * traversed by every young-generation collection while it lives). */
    if (PyObject_IS_GC(out)) PyObject_GC_UnTrack(out);
    return out;
}

/* pull_header(header_type, buf, offset, max_payload) -> header_type instance, or None when any
 * rule fails (the caller then runs the reference decoder, which raises the precise error). */
static PyObject *pull_header(PyObject *module, PyObject *args) {
    (void)module;
    PyTypeObject *cls;
    Py_buffer view;
    Py_ssize_t offset;
    unsigned long long cap;
    if (!PyArg_ParseTuple(args, "O!y*nK", &PyType_Type, &cls, &view, &offset, &cap)) return NULL;
    Fields f;
    int ok = offset >= 0 && view.len - offset >= HEADER &&
             decode_header((const unsigned char *)view.buf + offset, cap, &f);
    PyBuffer_Release(&view);
    if (!ok) Py_RETURN_NONE;
    return make_header(cls, &f);
}

/* pull_frame(frame_type, header_type, buf, max_payload) -> frame_type((header, payload)), or
 * None when any header rule fails or Payload Length is not the octets after the header (the
 * caller then runs the reference decoder). The payload is one copy out of ``buf``. */
static PyObject *pull_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    unsigned long long cap;
    if (!nargs_is("pull_frame", nargs, 4)) return NULL;
    if (!PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "pull_frame() needs the frame and header types");
        return NULL;
    }
    PyTypeObject *frame_cls = (PyTypeObject *)args[0], *header_cls = (PyTypeObject *)args[1];
    if (!arg_u64(args[3], &cap) || !arg_buffer(args[2], &view)) return NULL;
    Fields f;
    const unsigned char *h = (const unsigned char *)view.buf;
    int ok = view.len >= HEADER && decode_header(h, cap, &f) &&
             f.len == (uint64_t)(view.len - HEADER);
    PyObject *payload = ok ? PyBytes_FromStringAndSize((const char *)h + HEADER, view.len - HEADER)
                           : NULL;
    PyBuffer_Release(&view);
    if (!ok) Py_RETURN_NONE;
    if (payload == NULL) return NULL;
    PyObject *header = make_header(header_cls, &f);
    PyObject *out = header ? frame_cls->tp_alloc(frame_cls, 2) : NULL;
    if (out == NULL) {
        Py_XDECREF(header);
        Py_DECREF(payload);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, header);
    PyTuple_SET_ITEM(out, 1, payload);
    if (PyObject_IS_GC(out)) PyObject_GC_UnTrack(out); /* an untracked header and bytes */
    return out;
}

/* Maker(cls, slots) -> a callable: maker(v0, v1, ...) builds ``cls`` without calling its
 * __init__, storing each value in the matching slot (a frozen dataclass's __setattr__ does not
 * guard slots). The compiled twin of _makers.positional_maker: the same objects, for values
 * the caller already checked. A plain writable __slots__ member (T_OBJECT_EX) is a pointer at
 * a fixed offset, so the value is stored there as the descriptor's __set__ would store it;
 * any other descriptor (or more than MAKER_DIRECT_SLOTS slots) is called instead. */
#define MAKER_DIRECT_SLOTS 8
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    PyObject *slots; /* tuple of member descriptors, in argument order */
    Py_ssize_t offsets[MAKER_DIRECT_SLOTS]; /* each slot's offset, when ``direct`` */
    int direct;
} Maker;

static PyObject *maker_build(Maker *self, PyObject *const *args, Py_ssize_t n) {
    PyObject *obj = self->cls->tp_alloc(self->cls, 0);
    if (obj == NULL) return NULL;
    int tracked = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (self->direct) {
            Py_XSETREF(*(PyObject **)((char *)obj + self->offsets[i]), Py_NewRef(args[i]));
        } else {
            PyObject *slot = PyTuple_GET_ITEM(self->slots, i);
            if (Py_TYPE(slot)->tp_descr_set(slot, obj, args[i]) < 0) {
                Py_DECREF(obj);
                return NULL;
            }
        }
        /* CPython's rule for tuples: a value may later join a cycle if it is a GC object,
         * unless it is a tuple the collector has untracked (a dict of atoms is untracked
         * today but tracked again when a container is stored in it). */
        PyObject *v = args[i];
        tracked |= PyObject_IS_GC(v) && (!PyTuple_CheckExact(v) || PyObject_GC_IsTracked(v));
    }
    /* Like a tuple of atoms (which the collector untracks): an object whose values can hold
     * no reference cycle need not be scanned by the cyclic GC. Thousands of events waiting in
     * a stream's queue otherwise make every collection walk them. */
    if (!tracked && PyObject_GC_IsTracked(obj)) PyObject_GC_UnTrack(obj);
    return obj;
}

static PyObject *Maker_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    Maker *self = (Maker *)callable;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || n != PyTuple_GET_SIZE(self->slots)) {
        PyErr_Format(PyExc_TypeError, "%s maker takes exactly %zd positional arguments",
                     self->cls->tp_name, PyTuple_GET_SIZE(self->slots));
        return NULL;
    }
    return maker_build(self, args, n);
}

static int Maker_init(Maker *self, PyObject *args, PyObject *kwds) {
    (void)kwds;
    PyTypeObject *cls;
    PyObject *slots;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &cls, &PyTuple_Type, &slots)) return -1;
    if (cls->tp_new != PyBaseObject_Type.tp_new) {
        PyErr_SetString(PyExc_TypeError, "the class must not define __new__");
        return -1;
    }
    /* Checked in full before anything changes: a failed re-init leaves a working maker. */
    Py_ssize_t offsets[MAKER_DIRECT_SLOTS];
    int direct = PyTuple_GET_SIZE(slots) <= MAKER_DIRECT_SLOTS;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(slots); i++) {
        PyObject *slot = PyTuple_GET_ITEM(slots, i);
        if (!PyObject_TypeCheck(slot, &PyMemberDescr_Type) ||
            !PyType_IsSubtype(cls, PyDescr_TYPE(slot))) {
            PyErr_SetString(PyExc_TypeError, "slots must be the class's slot descriptors");
            return -1;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)slot)->d_member;
        if (member->type != T_OBJECT_EX || (member->flags & READONLY)) direct = 0;
        else if (i < MAKER_DIRECT_SLOTS) offsets[i] = member->offset;
    }
    self->direct = direct;
    if (direct) memcpy(self->offsets, offsets, sizeof offsets);
    Py_INCREF(cls);
    Py_INCREF(slots);
    Py_XSETREF(self->cls, cls);
    Py_XSETREF(self->slots, slots);
    self->vectorcall = Maker_vectorcall;
    return 0;
}

static int Maker_traverse(Maker *self, visitproc visit, void *arg) {
    Py_VISIT(self->cls);
    Py_VISIT(self->slots);
    return 0;
}

static int Maker_clear(Maker *self) {
    Py_CLEAR(self->cls);
    Py_CLEAR(self->slots);
    return 0;
}

static void Maker_dealloc(Maker *self) {
    PyObject_GC_UnTrack(self);
    Maker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Maker_call(PyObject *self, PyObject *args, PyObject *kwds) {
    if (((Maker *)self)->cls == NULL) {
        PyErr_SetString(PyExc_TypeError, "uninitialised maker");
        return NULL;
    }
    return PyVectorcall_Call(self, args, kwds);
}

static PyMemberDef Maker_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Maker, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "iobridge.npamp._speedups.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Positional constructor of a slotted class (internal).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Maker_init,
    .tp_dealloc = (destructor)Maker_dealloc,
    .tp_traverse = (traverseproc)Maker_traverse,
    .tp_clear = (inquiry)Maker_clear,
    .tp_call = Maker_call,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_members = Maker_members,
};



#define TLV_HEADER 4
#define SC_TLV 15 /* StreamControl TLV: type(2) length(2) version(1) control(1) flags(1) id(8) */
#define BRIDGE_STREAM_DATA 0x0104
/* stream_data(frames, start, envelope, last_event_id, correlation_id, make, events)
 *   -> (index, last_event_id, resumable)
 *
 * The consumer's per-event path of one CC-STREAM stream (bridge/session.py has the Python
 * twin). From frames[start], for each (BRIDGE_STREAM_DATA, payload) whose payload is exactly:
 * the stream's learned envelope TLV octets, then a StreamControl TLV of Length 11, version 1,
 * control DATA, cancel_ack clear, an event_id above the last one, then anything but another
 * StreamControl (0x0011) or SafetyLabel (0x0013) TLV: append make(correlation_id, event_id,
 * body, resumable) to ``events``. It stops at the first item that is anything else, which the
 * caller's full decoder then takes (and rejects with the precise error, or accepts). Returns
 * the index it stopped at, the last event_id taken and that frame's resumable flag. */
static PyObject *stream_data(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *frames, *envelope, *corr, *make, *events;
    Py_ssize_t i;
    unsigned long long last;
    if (!PyArg_ParseTuple(args, "O!nO!KOOO!", &PyList_Type, &frames, &i, &PyBytes_Type,
                          &envelope, &last, &corr, &make, &PyList_Type, &events))
        return NULL;
    const char *env = PyBytes_AS_STRING(envelope);
    Py_ssize_t env_len = PyBytes_GET_SIZE(envelope);
    int resumable = 0;
    for (; i >= 0 && i < PyList_GET_SIZE(frames); i++) {
        PyObject *item = PyList_GET_ITEM(frames, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) break;
        PyObject *type = PyTuple_GET_ITEM(item, 0), *payload = PyTuple_GET_ITEM(item, 1);
        if (!PyLong_Check(type) || !PyBytes_CheckExact(payload)) break;
        int overflow = 0;
        if (PyLong_AsLongAndOverflow(type, &overflow) != BRIDGE_STREAM_DATA) break;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(payload);
        Py_ssize_t n = PyBytes_GET_SIZE(payload), end = env_len + SC_TLV;
        if (n < end || memcmp(p, env, (size_t)env_len) != 0) break;
        const unsigned char *sc = p + env_len;
        if (sc[0] != 0x00 || sc[1] != 0x11 || sc[2] != 0x00 || sc[3] != 11 || sc[4] != 0x01 ||
            sc[5] != 0x00 || (sc[6] & 0x02))
            break;
        uint64_t event_id = 0;
        for (int k = 7; k < SC_TLV; k++) event_id = (event_id << 8) | sc[k];
        if (event_id <= last) break;
        if (n - end >= TLV_HEADER && p[end] == 0x00 && (p[end + 1] == 0x11 || p[end + 1] == 0x13))
            break;
        PyObject *argv[4] = {corr, NULL, NULL, (sc[6] & 0x01) ? Py_True : Py_False};
        argv[1] = PyLong_FromUnsignedLongLong(event_id);
        argv[2] = argv[1] ? PyBytes_FromStringAndSize((const char *)p + end, n - end) : NULL;
        PyObject *event = argv[2] ? PyObject_Vectorcall(make, argv, 4, NULL) : NULL;
        Py_XDECREF(argv[1]);
        Py_XDECREF(argv[2]);
        if (event == NULL) return NULL;
        int failed = PyList_Append(events, event);
        Py_DECREF(event);
        if (failed) return NULL;
        last = event_id;
        resumable = sc[6] & 0x01;
    }
    return Py_BuildValue("(nKO)", i, last, resumable ? Py_True : Py_False);
}


/* stream_frames(envelope, last_event_id, resumable, frame_type, datas, start) -> [(frame_type,
 * payload), ...]
 *
 * The producer's per-event path (BridgeSession.send_events has the Python twin): for each
 * data of datas[start:], the BRIDGE_STREAM_DATA payload envelope || StreamControl TLV (DATA,
 * the next event_id, the resumable flag) || data, built in one allocation. It stops before a
 * data that is not bytes or when the u64 event_id space is used up: the caller's reference
 * loop takes over there (and raises). */
static PyObject *stream_frames(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *envelope, *type, *datas;
    unsigned long long last;
    int resumable;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!KpOO!n", &PyBytes_Type, &envelope, &last, &resumable, &type,
                          &PyList_Type, &datas, &i))
        return NULL;
    const char *env = PyBytes_AS_STRING(envelope);
    Py_ssize_t env_len = PyBytes_GET_SIZE(envelope);
    PyObject *out = PyList_New(0);
    for (; out != NULL && i >= 0 && i < PyList_GET_SIZE(datas) && last < UINT64_MAX; i++) {
        PyObject *data = PyList_GET_ITEM(datas, i);
        if (!PyBytes_CheckExact(data) ||
            PyBytes_GET_SIZE(data) > PY_SSIZE_T_MAX - env_len - SC_TLV)
            break;
        Py_ssize_t n = PyBytes_GET_SIZE(data);
        PyObject *payload = PyBytes_FromStringAndSize(NULL, env_len + SC_TLV + n);
        if (payload == NULL) { Py_CLEAR(out); break; }
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(payload);
        memcpy(p, env, (size_t)env_len);
        p += env_len;
        last++;
        p[0] = 0x00; p[1] = 0x11; p[2] = 0x00; p[3] = 11; /* StreamControl TLV, Length 11 */
        p[4] = 0x01; p[5] = 0x00; p[6] = resumable ? 0x01 : 0x00; /* version 1, DATA, flags */
        put_be(p + 7, last, 8);
        memcpy(p + SC_TLV, PyBytes_AS_STRING(data), (size_t)n);
        PyObject *item = PyTuple_Pack(2, type, payload);
        Py_DECREF(payload);
        if (item == NULL || PyList_Append(out, item) < 0) { Py_XDECREF(item); Py_CLEAR(out); break; }
        Py_DECREF(item);
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"pull_header", pull_header, METH_VARARGS, "Decode a valid header, or None."},
    {"pull_frame", (PyCFunction)(void (*)(void))pull_frame, METH_FASTCALL,
     "Decode a valid whole frame, or None."},
    {"stream_data", stream_data, METH_VARARGS, "Take a run of one stream's data frames."},
    {"stream_frames", stream_frames, METH_VARARGS, "Build a run of data frame payloads."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_speedups",
    .m_doc = "Compiled N-PAMP per-event path (no key material).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
    if (PyType_Ready(&MakerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&MakerType);
    if (PyModule_AddObject(m, "Maker", (PyObject *)&MakerType) < 0) {
        Py_DECREF(&MakerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
