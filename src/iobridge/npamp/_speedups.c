/* Compiled per-frame path of N-PAMP: header decode (wire) and AES-256-GCM seal/open (record).
 *
 * The pure-Python path in cipher.py (SendState.seal / ReceiveState.open) is the reference;
 * this module does the same octets in one call per frame: header octets 0-20, their CRC32C
 * (Castagnoli, reflected 0x82F63B78), the 11 reserved zero octets, and AES-256-GCM with
 * nonce = IV XOR (0^4 || seq BE64) and AAD = header octets 0-20 as transmitted (digest §1.6).
 * One EVP context per direction is keyed once; each frame only sets its nonce. The caller
 * checks sequence numbers, flags and limits; this module checks only field widths.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/opensslv.h>
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#include <openssl/core_names.h>
#endif
#include <stdint.h>
#include <string.h>

#define PREFIX 21
#define HEADER 36
#define TAG 16
#define IVLEN 12

static uint32_t crc_table[256];
static int crc_hw; /* the CPU has SSE4.2's CRC32 instruction */

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc32c_table(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The SSE4.2 CRC32 instruction computes this very CRC (Castagnoli, reflected), eight octets
 * at a time: a header prefix is three instructions instead of 21 dependent table look-ups.
 * Chosen at import when the CPU has it (crc_init); the table is the fallback. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(const unsigned char *p,
                                                                size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* x86 is little-endian: octets in wire order */
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
#define crc32c(p, n) (crc_hw ? crc32c_sse42((p), (n)) : crc32c_table((p), (n)))
#else
#define crc32c(p, n) crc32c_table((p), (n))
#endif

static void put_be(unsigned char *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) { p[i] = (unsigned char)(v & 0xFF); v >>= 8; }
}

static void put_prefix(unsigned char *h, unsigned verflags, unsigned ft, unsigned ch,
                       uint64_t seq, uint64_t len) {
    memcpy(h, "NPAM", 4);
    h[4] = (unsigned char)verflags;
    put_be(h + 5, ft, 2);
    put_be(h + 7, ch, 2);
    put_be(h + 9, seq, 8);
    put_be(h + 17, len, 4);
}

/* AES-256-GCM, fetched once at import where OpenSSL has fetching (3.0+): handing
 * EVP_aes_256_gcm() to every context set-up makes OpenSSL fetch it again each time. */
static EVP_CIPHER *aes_gcm_fetched;

static const EVP_CIPHER *aes_gcm(void) {
    return aes_gcm_fetched != NULL ? aes_gcm_fetched : EVP_aes_256_gcm();
}

/* One key and IV. Each direction's context is keyed on its first use: a send state only
 * seals and a receive state only opens, so each cipher keys one context, not two. */
typedef struct {
    PyObject_HEAD
    EVP_CIPHER_CTX *enc;
    EVP_CIPHER_CTX *dec;
    unsigned char key[32]; /* wiped once both contexts are keyed, and on deallocation */
    unsigned char iv[IVLEN];
} Cipher;

/* The context that seals (encrypt = 1) or opens (0), keyed on first use; NULL with an
 * exception set if OpenSSL fails. */
static EVP_CIPHER_CTX *cipher_ctx(Cipher *self, int encrypt) {
    EVP_CIPHER_CTX **slot = encrypt ? &self->enc : &self->dec;
    if (*slot != NULL) return *slot;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (ctx == NULL || EVP_CipherInit_ex(ctx, aes_gcm(), NULL, self->key, NULL, encrypt) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        PyErr_SetString(PyExc_RuntimeError, "AES-256-GCM key set-up failed");
        return NULL;
    }
    *slot = ctx;
    if (self->enc != NULL && self->dec != NULL) OPENSSL_cleanse(self->key, sizeof self->key);
    return ctx;
}

static void nonce_for(const Cipher *self, uint64_t seq, unsigned char *out) {
    memcpy(out, self->iv, IVLEN);
    for (int i = 0; i < 8; i++) out[4 + i] ^= (unsigned char)(seq >> (56 - 8 * i));
}

static int Cipher_init(Cipher *self, PyObject *args, PyObject *kwds) {
    Py_buffer key, iv;
    if (!PyArg_ParseTuple(args, "y*y*", &key, &iv)) return -1;
    int ok = key.len == 32 && iv.len == IVLEN;
    if (ok) {
        /* (Re-)initialised: contexts keyed with an earlier key go. */
        EVP_CIPHER_CTX_free(self->enc);
        EVP_CIPHER_CTX_free(self->dec);
        self->enc = self->dec = NULL;
        memcpy(self->key, key.buf, 32);
        memcpy(self->iv, iv.buf, IVLEN);
    }
    PyBuffer_Release(&key);
    PyBuffer_Release(&iv);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "need a 32-octet key and a 12-octet IV");
        return -1;
    }
    return 0;
}

static void Cipher_dealloc(Cipher *self) {
    EVP_CIPHER_CTX_free(self->enc);
    EVP_CIPHER_CTX_free(self->dec);
    OPENSSL_cleanse(self->key, sizeof self->key);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_fields(unsigned verflags, unsigned ft, unsigned ch) {
    if (verflags > 0xFF || ft > 0xFFFF || ch > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "header field out of range");
        return 0;
    }
    return 1;
}

/* Arguments of the METH_FASTCALL entry points (the per-frame calls: no argument tuple, no
 * format string to interpret). The same conversions as PyArg's "I" and "K" codes: integers
 * masked to the C width, no range check beyond check_fields (the Python callers bound every
 * field), TypeError for a non-integer. */
static int nargs_is(const char *name, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs == want) return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name, want,
                 nargs);
    return 0;
}

static int arg_uint(PyObject *arg, unsigned *out) {
    unsigned long v = PyLong_AsUnsignedLongMask(arg);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return 0;
    *out = (unsigned)v;
    return 1;
}

static int arg_u64(PyObject *arg, unsigned long long *out) {
    unsigned long long v = PyLong_AsUnsignedLongLongMask(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return 0;
    *out = v;
    return 1;
}

/* verflags, frame_type, channel, seq from args[0..3]. */
static int arg_fields(PyObject *const *args, unsigned *verflags, unsigned *ft, unsigned *ch,
                      unsigned long long *seq) {
    return arg_uint(args[0], verflags) && arg_uint(args[1], ft) && arg_uint(args[2], ch) &&
           arg_u64(args[3], seq);
}

/* A read-only contiguous buffer, as PyArg's "y*" (bytes-like, not str). */
static int arg_buffer(PyObject *arg, Py_buffer *view) {
    if (PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "a bytes-like object is required, not 'str'");
        return 0;
    }
    return PyObject_GetBuffer(arg, view, PyBUF_SIMPLE) == 0;
}

/* Open n ciphertext octets at ``in`` (its tag right after) into ``out``, under ``nonce`` and
 * the 21-octet ``aad``. 1 when the tag verifies. */
static int open_one(EVP_CIPHER_CTX *ctx, const unsigned char *nonce, const unsigned char *aad,
                    const unsigned char *in, Py_ssize_t n, unsigned char *out) {
    int len = 0, fin = 0;
    return EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) == 1 &&
           EVP_DecryptUpdate(ctx, NULL, &len, aad, PREFIX) == 1 &&
           EVP_DecryptUpdate(ctx, out, &len, in, (int)n) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG, (void *)(in + n)) == 1 &&
           EVP_DecryptFinal_ex(ctx, out + len, &fin) == 1;
}

/* Seal one frame into buf (HEADER + len + TAG octets). 1 on success. */
static int seal_one(Cipher *self, EVP_CIPHER_CTX *ctx, unsigned char *buf, unsigned verflags,
                    unsigned ft, unsigned ch, uint64_t seq, const unsigned char *pt, Py_ssize_t n) {
    put_prefix(buf, verflags, ft, ch, seq, (uint64_t)(n + TAG));
    put_be(buf + PREFIX, crc32c(buf, PREFIX), 4);
    memset(buf + 25, 0, HEADER - 25);
    unsigned char nonce[IVLEN];
    nonce_for(self, seq, nonce);
    int len = 0, fin = 0;
    return EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) == 1 &&
           EVP_EncryptUpdate(ctx, NULL, &len, buf, PREFIX) == 1 &&
           EVP_EncryptUpdate(ctx, buf + HEADER, &len, pt, (int)n) == 1 &&
           EVP_EncryptFinal_ex(ctx, buf + HEADER + len, &fin) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG, buf + HEADER + n) == 1;
}

/* seal(verflags, frame_type, channel, seq, plaintext) -> whole frame bytes */
static PyObject *Cipher_seal(Cipher *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned verflags, ft, ch;
    unsigned long long seq;
    Py_buffer pt;
    if (!nargs_is("seal", nargs, 5) || !arg_fields(args, &verflags, &ft, &ch, &seq) ||
        !arg_buffer(args[4], &pt))
        return NULL;
    if (!check_fields(verflags, ft, ch) || pt.len > 0x7FFFFFFF - HEADER - TAG) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "payload too large");
        PyBuffer_Release(&pt);
        return NULL;
    }
    EVP_CIPHER_CTX *ctx = cipher_ctx(self, 1);
    if (ctx == NULL) { PyBuffer_Release(&pt); return NULL; }
    Py_ssize_t sealed = pt.len + TAG;
    PyObject *out = PyBytes_FromStringAndSize(NULL, HEADER + sealed);
    if (out == NULL) { PyBuffer_Release(&pt); return NULL; }
    unsigned char *buf = (unsigned char *)PyBytes_AS_STRING(out);
    int ok = seal_one(self, ctx, buf, verflags, ft, ch, seq, pt.buf, pt.len);
    PyBuffer_Release(&pt);
    if (!ok) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_RuntimeError, "AES-256-GCM encryption failed");
        return NULL;
    }
    return out;
}

/* seal_many(verflags, channel, seq, [(frame_type, plaintext), ...], limit) -> the frames back
 * to back, sequence numbers seq, seq+1, ...: one allocation for the whole batch (one write).
 * None, before sealing anything, when a plaintext is not bytes or is longer than ``limit``
 * (the caller then seals frame by frame). */
static PyObject *Cipher_seal_many(Cipher *self, PyObject *args) {
    unsigned verflags, ch;
    unsigned long long seq;
    PyObject *frames;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "IIKO!n", &verflags, &ch, &seq, &PyList_Type, &frames, &limit))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(frames), total = 0;
    if (!check_fields(verflags, 1, ch)) return NULL;
    if (limit > 0x7FFFFFFF - HEADER - TAG) limit = 0x7FFFFFFF - HEADER - TAG;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(frames, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "frames must be (frame_type, plaintext) tuples");
            return NULL;
        }
        PyObject *pt = PyTuple_GET_ITEM(item, 1);
        if (!PyBytes_CheckExact(pt) || PyBytes_GET_SIZE(pt) > limit) Py_RETURN_NONE;
        Py_ssize_t n = PyBytes_GET_SIZE(pt);
        if (total > PY_SSIZE_T_MAX - HEADER - TAG - n) {
            PyErr_SetString(PyExc_OverflowError, "payload too large");
            return NULL;
        }
        total += HEADER + n + TAG;
    }
    EVP_CIPHER_CTX *ctx = cipher_ctx(self, 1);
    if (ctx == NULL) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    unsigned char *buf = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < count; i++, seq++) {
        PyObject *item = PyList_GET_ITEM(frames, i);
        unsigned long ft = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(item, 0));
        if (ft == (unsigned long)-1 && PyErr_Occurred()) { Py_DECREF(out); return NULL; }
        if (!check_fields(verflags, ft > 0xFFFF ? 0x10000 : (unsigned)ft, ch)) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *pt = PyTuple_GET_ITEM(item, 1);
        Py_ssize_t n = PyBytes_GET_SIZE(pt);
        if (!seal_one(self, ctx, buf, verflags, (unsigned)ft, ch, seq,
                      (const unsigned char *)PyBytes_AS_STRING(pt), n)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_RuntimeError, "AES-256-GCM encryption failed");
            return NULL;
        }
        buf += HEADER + n + TAG;
    }
    return out;
}

/* open(verflags, frame_type, channel, seq, payload_length, sealed) -> plaintext, or None */
static PyObject *Cipher_open(Cipher *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned verflags, ft, ch;
    unsigned long long seq, length;
    Py_buffer ct;
    if (!nargs_is("open", nargs, 6) || !arg_fields(args, &verflags, &ft, &ch, &seq) ||
        !arg_u64(args[4], &length) || !arg_buffer(args[5], &ct))
        return NULL;
    if (!check_fields(verflags, ft, ch) || length > 0xFFFFFFFFull || ct.len < TAG ||
        ct.len > 0x7FFFFFFF) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad sealed region");
        PyBuffer_Release(&ct);
        return NULL;
    }
    EVP_CIPHER_CTX *ctx = cipher_ctx(self, 0);
    if (ctx == NULL) { PyBuffer_Release(&ct); return NULL; }
    unsigned char aad[PREFIX], nonce[IVLEN];
    put_prefix(aad, verflags, ft, ch, seq, length);
    nonce_for(self, seq, nonce);
    Py_ssize_t n = ct.len - TAG;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) { PyBuffer_Release(&ct); return NULL; }
    unsigned char *buf = (unsigned char *)PyBytes_AS_STRING(out);
    int ok = open_one(ctx, nonce, aad, (const unsigned char *)ct.buf, n, buf);
    PyBuffer_Release(&ct);
    if (!ok) {
        Py_DECREF(out);
        Py_RETURN_NONE; /* the tag did not verify */
    }
    return out;
}

/* A writable window on a region of a bytes object under construction, lent to the AEAD. It
 * counts its buffer exports, so after the call we know whether any view of it (a memoryview,
 * a slice of one) is still alive. */
typedef struct {
    PyObject_HEAD
    char *buf;
    Py_ssize_t len;
    Py_ssize_t exports;
} Window;

static int Window_getbuffer(Window *self, Py_buffer *view, int flags) {
    if (self->buf == NULL) {
        PyErr_SetString(PyExc_BufferError, "the frame buffer window is closed");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->buf, self->len, 0, flags) < 0) return -1;
    self->exports++;
    return 0;
}

static void Window_releasebuffer(Window *self, Py_buffer *view) { self->exports--; }

static PyBufferProcs Window_as_buffer = {
    (getbufferproc)Window_getbuffer,
    (releasebufferproc)Window_releasebuffer,
};

static PyTypeObject WindowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "iobridge.npamp._speedups._Window",
    .tp_basicsize = sizeof(Window),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writable window on a frame under construction (internal).",
    .tp_as_buffer = &Window_as_buffer,
};

/* seal_with(encrypt_into, verflags, frame_type, channel, seq, plaintext) -> whole frame bytes.
 *
 * For large frames: the AEAD is the caller's (cryptography's AESGCM.encrypt_into, whose bundled
 * OpenSSL has the faster bulk GCM on this kind of CPU), the rest is done here. One allocation
 * for the frame: a fresh bytes object, not yet visible to anyone, whose header is written here
 * (CRC included) and whose payload region the AEAD writes through a writable memoryview that
 * is released before the object is returned. */
static PyObject *Cipher_seal_with(Cipher *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned verflags, ft, ch;
    unsigned long long seq;
    if (!nargs_is("seal_with", nargs, 6) || !arg_fields(args + 1, &verflags, &ft, &ch, &seq))
        return NULL;
    PyObject *encrypt_into = args[0], *plaintext = args[5];
    Py_ssize_t n = PyObject_Length(plaintext);
    if (n < 0) return NULL;
    if (!check_fields(verflags, ft, ch) || n > 0x7FFFFFFF - HEADER - TAG) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "payload too large");
        return NULL;
    }
    Py_ssize_t sealed = n + TAG;
    PyObject *out = PyBytes_FromStringAndSize(NULL, HEADER + sealed);
    if (out == NULL) return NULL;
    unsigned char *buf = (unsigned char *)PyBytes_AS_STRING(out);
    put_prefix(buf, verflags, ft, ch, seq, (uint64_t)sealed);
    put_be(buf + PREFIX, crc32c(buf, PREFIX), 4);
    memset(buf + 25, 0, HEADER - 25);
    unsigned char nonce_octets[IVLEN];
    nonce_for(self, seq, nonce_octets);
    PyObject *nonce = PyBytes_FromStringAndSize((const char *)nonce_octets, IVLEN);
    PyObject *aad = PyBytes_FromStringAndSize((const char *)buf, PREFIX);
    Window *region = PyObject_New(Window, &WindowType);
    PyObject *result = NULL;
    if (region != NULL) {
        region->buf = (char *)buf + HEADER;
        region->len = sealed;
        region->exports = 0;
    }
    if (nonce && aad && region) {
        PyObject *argv[4] = {nonce, plaintext, aad, (PyObject *)region};
        result = PyObject_Vectorcall(encrypt_into, argv, 4, NULL);
    }
    Py_XDECREF(nonce);
    Py_XDECREF(aad);
    if (region != NULL) {
        int kept = region->exports != 0;
        region->buf = NULL; /* no new view from here on */
        Py_DECREF(region);
        if (kept) {
            /* The callee kept a view: leak the frame rather than let the view point at freed
             * memory (or at a bytes object others take as immutable), and fail. */
            Py_XDECREF(result);
            PyErr_SetString(PyExc_RuntimeError, "encrypt_into kept a view of the frame buffer");
            return NULL;
        }
    }
    if (result == NULL) { Py_DECREF(out); return NULL; }
    Py_DECREF(result);
    return out;
}

/* open_with(decrypt, verflags, frame_type, channel, seq, payload_length, sealed) -> plaintext.
 *
 * The large-frame counterpart of open: AAD and nonce built here, the AEAD is the caller's
 * (cryptography's AESGCM.decrypt, which raises InvalidTag on a forged frame). */
static PyObject *Cipher_open_with(Cipher *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned verflags, ft, ch;
    unsigned long long seq, length;
    if (!nargs_is("open_with", nargs, 7) || !arg_fields(args + 1, &verflags, &ft, &ch, &seq) ||
        !arg_u64(args[5], &length))
        return NULL;
    PyObject *decrypt = args[0], *sealed = args[6];
    if (!check_fields(verflags, ft, ch) || length > 0xFFFFFFFFull) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad payload length");
        return NULL;
    }
    unsigned char aad_octets[PREFIX], nonce_octets[IVLEN];
    put_prefix(aad_octets, verflags, ft, ch, seq, length);
    nonce_for(self, seq, nonce_octets);
    PyObject *nonce = PyBytes_FromStringAndSize((const char *)nonce_octets, IVLEN);
    PyObject *aad = PyBytes_FromStringAndSize((const char *)aad_octets, PREFIX);
    PyObject *result = NULL;
    if (nonce && aad) {
        PyObject *argv[3] = {nonce, sealed, aad};
        result = PyObject_Vectorcall(decrypt, argv, 3, NULL);
    }
    Py_XDECREF(nonce);
    Py_XDECREF(aad);
    return result;
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

/* open_frames(buf, pos, channel, seq, cap, max_sealed, stop, make) -> (pos, seq,
 * [make(channel, type, plaintext, seq, urgent), ...]).
 *
 * The receive loop of an open association for a run of ordinary frames on one channel: decode
 * each whole frame at buf[pos:], check it (header rules, this channel, ENC, exactly the expected
 * sequence number, a sealed region of TAG..max_sealed octets, no COMP/FRAG, a type not in
 * ``stop``), AEAD-open it in place (no copy of the sealed region; AAD = header octets 0-20 as
 * transmitted) and move on. It stops before the first frame that is incomplete or fails any of
 * these, without consuming it: the caller's reference path then takes that frame and raises
 * the precise error, or handles it (another channel, a PING, a large frame...). */
static PyObject *Cipher_open_frames(Cipher *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, max_sealed;
    unsigned ch;
    unsigned long long seq, cap;
    PyObject *stop, *make;
    if (!PyArg_ParseTuple(args, "y*nIKKnO!O", &view, &pos, &ch, &seq, &cap, &max_sealed,
                          &PyFrozenSet_Type, &stop, &make))
        return NULL;
    EVP_CIPHER_CTX *ctx = cipher_ctx(self, 0);
    if (ctx == NULL) { PyBuffer_Release(&view); return NULL; }
    PyObject *channel = PyLong_FromUnsignedLong(ch);
    PyObject *frames = channel == NULL ? NULL : PyList_New(0);
    PyObject *type = NULL; /* the frame type of the last frame taken: a run of one type (the
                            * common case) is converted and checked against ``stop`` once */
    unsigned last_ft = 0x10000;
    const unsigned char *base = (const unsigned char *)view.buf;
    while (frames != NULL && pos >= 0 && view.len - pos >= HEADER) {
        const unsigned char *h = base + pos;
        Fields f;
        if (!decode_header(h, cap, &f) || f.ch != ch || !(f.flags & 0x02) || (f.flags & 0x0C) ||
            f.seq != seq || f.len < TAG || f.len > (uint64_t)max_sealed ||
            (uint64_t)(view.len - pos - HEADER) < f.len)
            break;
        if (f.ft != last_ft) {
            Py_XSETREF(type, PyLong_FromUnsignedLong(f.ft));
            last_ft = f.ft;
            int stopped = type == NULL ? -1 : PySet_Contains(stop, type);
            if (stopped != 0) {
                if (stopped < 0) Py_CLEAR(frames);
                break;
            }
        }
        Py_ssize_t n = (Py_ssize_t)f.len - TAG;
        PyObject *plaintext = PyBytes_FromStringAndSize(NULL, n);
        if (plaintext == NULL) { Py_CLEAR(frames); break; }
        unsigned char nonce[IVLEN];
        nonce_for(self, seq, nonce);
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(plaintext);
        int ok = open_one(ctx, nonce, h, h + HEADER, n, out);
        if (!ok) { Py_DECREF(plaintext); break; } /* forged: the caller raises */
        PyObject *seq_obj = PyLong_FromUnsignedLongLong(seq);
        PyObject *argv[5] = {channel, type, plaintext, seq_obj, (f.flags & 0x01) ? Py_True : Py_False};
        PyObject *item = seq_obj == NULL ? NULL : PyObject_Vectorcall(make, argv, 5, NULL);
        Py_DECREF(plaintext);
        Py_XDECREF(seq_obj);
        if (item == NULL || PyList_Append(frames, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(frames);
            break;
        }
        Py_DECREF(item);
        pos += HEADER + (Py_ssize_t)f.len;
        seq++;
    }
    PyBuffer_Release(&view);
    Py_XDECREF(channel);
    Py_XDECREF(type);
    if (frames == NULL) return NULL;
    return Py_BuildValue("(nKN)", pos, seq, frames);
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
        tracked |= PyObject_GC_IsTracked(args[i]);
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
    {NULL},
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


/* sendable(frames, refused, max_plaintext) -> how many leading (frame_type, payload) items
 * an application frame may be (NpampConnection._check_frame is the reference): a frame type in
 * 1..0xFFFF not in ``refused``, a bytes payload of at most ``max_plaintext`` octets. The caller
 * checks the items from there on with the reference, which raises the precise error. */
static PyObject *sendable(PyObject *module, PyObject *args) {
    PyObject *frames, *refused;
    Py_ssize_t limit, i = 0;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyList_Type, &frames, &PyFrozenSet_Type, &refused,
                          &limit))
        return NULL;
    PyObject *last_type = NULL; /* a run of one frame type is checked once */
    for (; i < PyList_GET_SIZE(frames); i++) {
        PyObject *item = PyList_GET_ITEM(frames, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) break;
        PyObject *type = PyTuple_GET_ITEM(item, 0), *payload = PyTuple_GET_ITEM(item, 1);
        if (!PyBytes_CheckExact(payload) || PyBytes_GET_SIZE(payload) > limit) break;
        if (type == last_type) continue;
        if (!PyLong_Check(type)) break;
        int overflow = 0;
        long value = PyLong_AsLongAndOverflow(type, &overflow);
        if (overflow || value < 1 || value > 0xFFFF) break;
        int stopped = PySet_Contains(refused, type);
        if (stopped < 0) return NULL;
        if (stopped) break;
        last_type = type;
    }
    return PyLong_FromSsize_t(i);
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

/* decode_run(events, start, event_type, correlation_id, make, loads, refused)
 *   -> (index, [made, ...], resumable)
 *
 * The AG-UI client's per-event path (npamp_server/client.py RunStream._deliver is the Python
 * twin): from events[start], for each event exactly of ``event_type`` (StreamDataReceived)
 * whose correlation_id equals ``correlation_id``, make(event_id, data, loads(data)). It stops
 * at the first other event, or at the first ``data`` that ``loads`` refuses with ``refused``
 * (cleared: the caller's reference path decodes that one again, with its fallback); any other
 * error propagates. ``resumable`` is the last event's flag (False when none was taken). */
static PyObject *str_correlation_id, *str_event_id, *str_data, *str_resumable;

/* The slot ``name`` of the slotted class ``type`` as its member definition (what the
 * attribute read goes through for an instance of exactly this type: a slot is a data
 * descriptor and such a class has no instance dict), or NULL when it is not a plain object
 * slot; the caller then reads with PyObject_GetAttr. Looked up once per call, not per event. */
static PyMemberDef *object_slot(PyTypeObject *type, PyObject *name) {
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    PyMemberDef *member = NULL;
    if (descr == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX) member = NULL;
    }
    Py_DECREF(descr); /* the type keeps the descriptor, and so the member, alive */
    return member;
}

static PyObject *read_slot(PyObject *obj, PyMemberDef *member, PyObject *name) {
    return member != NULL ? PyMember_GetOne((const char *)obj, member)
                          : PyObject_GetAttr(obj, name);
}

static PyObject *decode_run(PyObject *module, PyObject *args) {
    PyObject *events, *type, *corr, *make, *loads, *refused;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!nO!OOOO", &PyList_Type, &events, &i, &PyType_Type, &type,
                          &corr, &make, &loads, &refused))
        return NULL;
    PyTypeObject *cls = (PyTypeObject *)type;
    PyMemberDef *m_corr = object_slot(cls, str_correlation_id), *m_data = object_slot(cls, str_data);
    PyMemberDef *m_id = object_slot(cls, str_event_id), *m_flag = object_slot(cls, str_resumable);
    PyObject *made = PyList_New(0);
    if (made == NULL) return NULL;
    PyObject *resumable = Py_NewRef(Py_False);
    for (; i >= 0 && i < PyList_GET_SIZE(events); i++) {
        PyObject *event = PyList_GET_ITEM(events, i);
        if (Py_TYPE(event) != (PyTypeObject *)type) break;
        PyObject *owner = read_slot(event, m_corr, str_correlation_id);
        int same = owner == NULL ? -1 : PyObject_RichCompareBool(owner, corr, Py_EQ);
        Py_XDECREF(owner);
        if (same < 0) goto error;
        if (!same) break;
        PyObject *data = read_slot(event, m_data, str_data);
        if (data == NULL) goto error;
        PyObject *decoded = PyObject_CallOneArg(loads, data);
        if (decoded == NULL) {
            Py_DECREF(data);
            if (!PyErr_ExceptionMatches(refused)) goto error;
            PyErr_Clear();
            break;
        }
        PyObject *event_id = read_slot(event, m_id, str_event_id);
        PyObject *flag = event_id == NULL ? NULL : read_slot(event, m_flag, str_resumable);
        PyObject *item = NULL;
        if (flag != NULL) {
            PyObject *argv[3] = {event_id, data, decoded};
            item = PyObject_Vectorcall(make, argv, 3, NULL);
        }
        Py_DECREF(data);
        Py_DECREF(decoded);
        Py_XDECREF(event_id);
        if (item == NULL || PyList_Append(made, item) < 0) {
            Py_XDECREF(item);
            Py_XDECREF(flag);
            goto error;
        }
        Py_DECREF(item);
        Py_SETREF(resumable, flag);
    }
    return Py_BuildValue("(nNN)", i, made, resumable);
error:
    Py_DECREF(made);
    Py_DECREF(resumable);
    return NULL;
}

#if OPENSSL_VERSION_NUMBER >= 0x30000000L
/* HMAC-SHA-256 and HMAC-SHA-384, the key schedule's one primitive (about two dozen calls per
 * handshake and side). OpenSSL's one-shot HMAC(), under hashlib's hmac.digest, looks the MAC
 * and the digest up by name on every call; here an unkeyed context per hash is set up once
 * and each call keys a copy of it, which is freed (and cleansed by OpenSSL) before returning,
 * so no key-derived state outlives the call. */
static EVP_MAC_CTX *hmac_templates[2];

static EVP_MAC_CTX *hmac_template(int sha384) {
    if (hmac_templates[sha384] != NULL) return hmac_templates[sha384];
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac); /* the context holds its own reference */
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, sha384 ? "SHA384" : "SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (ctx == NULL || EVP_MAC_CTX_set_params(ctx, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL could not set up HMAC");
        return NULL;
    }
    return hmac_templates[sha384] = ctx;
}

/* hmac_digest(key, msg, digest): hmac.digest for digest "sha256" or "sha384" (else
 * ValueError). */
static PyObject *hmac_digest(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer key, msg;
    const char *name;
    if (nargs != 3 || !PyUnicode_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "hmac_digest(key, msg, digest: str)");
        return NULL;
    }
    if ((name = PyUnicode_AsUTF8(args[2])) == NULL) return NULL;
    int sha384 = strcmp(name, "sha384") == 0;
    if (!sha384 && strcmp(name, "sha256") != 0) {
        PyErr_Format(PyExc_ValueError, "unsupported HMAC digest %R", args[2]);
        return NULL;
    }
    EVP_MAC_CTX *template = hmac_template(sha384);
    if (template == NULL) return NULL;
    if (PyObject_GetBuffer(args[0], &key, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &msg, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&key);
        return NULL;
    }
    unsigned char out[EVP_MAX_MD_SIZE];
    size_t len = 0;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_dup(template);
    int ok = ctx != NULL && EVP_MAC_init(ctx, key.buf, (size_t)key.len, NULL) == 1 &&
             EVP_MAC_update(ctx, msg.buf, (size_t)msg.len) == 1 &&
             EVP_MAC_final(ctx, out, &len, sizeof out) == 1;
    EVP_MAC_CTX_free(ctx);
    PyBuffer_Release(&key);
    PyBuffer_Release(&msg);
    if (!ok) {
        OPENSSL_cleanse(out, sizeof out);
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL HMAC failed");
        return NULL;
    }
    PyObject *digest = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)len);
    OPENSSL_cleanse(out, sizeof out);
    return digest;
}
#endif

/* crc32c(data, portable=False): with ``portable`` the table-driven code even where the CPU
 * instruction is used (tests check both against google-crc32c). */
static PyObject *crc32c_py(PyObject *module, PyObject *args) {
    Py_buffer data;
    int portable = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &data, &portable)) return NULL;
    uint32_t c = portable ? crc32c_table(data.buf, (size_t)data.len)
                          : crc32c((const unsigned char *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef Cipher_methods[] = {
    {"seal", (PyCFunction)(void (*)(void))Cipher_seal, METH_FASTCALL, "Seal one whole frame."},
    {"open", (PyCFunction)(void (*)(void))Cipher_open, METH_FASTCALL,
     "Open a sealed region; None if forged."},
    {"seal_many", (PyCFunction)Cipher_seal_many, METH_VARARGS, "Seal frames back to back."},
    {"open_frames", (PyCFunction)Cipher_open_frames, METH_VARARGS, "Open a run of frames of one channel."},
    {"seal_with", (PyCFunction)(void (*)(void))Cipher_seal_with, METH_FASTCALL,
     "Seal a frame with the given encrypt_into."},
    {"open_with", (PyCFunction)(void (*)(void))Cipher_open_with, METH_FASTCALL,
     "Open a sealed region with the given decrypt."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CipherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "iobridge.npamp._speedups.Cipher",
    .tp_basicsize = sizeof(Cipher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "AES-256-GCM key and IV of one (channel, direction, epoch).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Cipher_init,
    .tp_dealloc = (destructor)Cipher_dealloc,
    .tp_methods = Cipher_methods,
};

static PyMethodDef module_methods[] = {
    {"crc32c", crc32c_py, METH_VARARGS, "CRC-32C (Castagnoli) of a buffer."},
    {"pull_header", pull_header, METH_VARARGS, "Decode a valid header, or None."},
    {"pull_frame", (PyCFunction)(void (*)(void))pull_frame, METH_FASTCALL,
     "Decode a valid whole frame, or None."},
    {"stream_data", stream_data, METH_VARARGS, "Take a run of one stream's data frames."},
    {"decode_run", decode_run, METH_VARARGS, "Make a run of one stream's decoded events."},
    {"stream_frames", stream_frames, METH_VARARGS, "Build a run of data frame payloads."},
    {"sendable", sendable, METH_VARARGS, "How many leading frames may be sent."},
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    {"hmac_digest", (PyCFunction)(void (*)(void))hmac_digest, METH_FASTCALL,
     "HMAC-SHA-256/384 of msg under key (hmac.digest's result)."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Compiled N-PAMP per-frame path.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    if (aes_gcm_fetched == NULL) aes_gcm_fetched = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
#endif
    str_correlation_id = PyUnicode_InternFromString("correlation_id");
    str_event_id = PyUnicode_InternFromString("event_id");
    str_data = PyUnicode_InternFromString("data");
    str_resumable = PyUnicode_InternFromString("resumable");
    if (!str_correlation_id || !str_event_id || !str_data || !str_resumable) return NULL;
    if (PyType_Ready(&WindowType) < 0) return NULL;
    if (PyType_Ready(&CipherType) < 0) return NULL;
    if (PyType_Ready(&MakerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&CipherType);
    if (PyModule_AddObject(m, "Cipher", (PyObject *)&CipherType) < 0) {
        Py_DECREF(&CipherType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&MakerType);
    if (PyModule_AddObject(m, "Maker", (PyObject *)&MakerType) < 0) {
        Py_DECREF(&MakerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
