/* The dedup pass's hashing of a batch of texts, in C with the GIL released.
 *
 * `transforms/dedup/kernel.py` is its only caller and says when it is used; the NumPy code of
 * `transforms/dedup/words.py` and `duplicates.py` is the definition it must equal, bit for bit
 * (tests/transforms/dedup/test_kernel.py checks it on random and real text, and on every code
 * point). Python's string work and NumPy's many short calls hold the GIL, so that code runs on
 * one core whatever the threads; this one holds it only to read its arguments.
 *
 * signatures(texts, table, P, C, A, n, out, state)
 *   texts: list of str.
 *   table: uint32 per code point (0x110000): the code point a text's code point stands for in
 *          the near form (bits 0-20) and that one's word class (bits 24-25: SEP, RUN, SINGLE),
 *          or bit 31: the text's near form is not its code points one for one (kernel.py).
 *   P: the word hashes' base; C: uint64 n-gram position constants (at least n);
 *   A: uint32 MinHash multipliers (H of them); n: words per n-gram, in [1, 64].
 *   out: writable uint32, texts x H; state: writable uint8 per text:
 *          0 its row is its signature, 1 it has no word (row all ones: its one shingle is the
 *          BLAKE2b of its normalized text, which kernel.py takes), 2 a code point with bit 31
 *          (row undefined: kernel.py passes its near form again).
 *
 * exact_keys(texts, person, digest_size) -> list of bytes
 *   BLAKE2b(" ".join(text.split()) in UTF-8, surrogates as themselves, with `person`) of each
 *   (NFC) text: `duplicates.exact_key` after its NFC step.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SEP 0
#define RUN 1
#define SINGLE 2
#define UNSAFE 0x80000000u
#define CODE 0x1FFFFFu
#define EMPTY 0xFFFFFFFFu
#define MAXN 64

/* A str's code units as CPython stores them (1, 2 or 4 bytes each). */
typedef struct {
    int kind;
    const void *data;
    Py_ssize_t len;
} Text;

/* The strs of `list`, read in place. Returns a new tuple that owns them while the GIL is
 * released (the caller's list could change meanwhile), and fills `items` (one per str). */
static PyObject *gather(PyObject *list, Text **items) {
    PyObject *own = PyList_AsTuple(list);
    if (!own) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(own);
    *items = malloc((count + 1) * sizeof(Text));
    if (!*items) {
        Py_DECREF(own);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t t = 0; t < count; t++) {
        PyObject *u = PyTuple_GET_ITEM(own, t);
        if (!PyUnicode_Check(u)) {
            PyErr_SetString(PyExc_TypeError, "texts must be a list of str");
            goto fail;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(u) < 0) goto fail;
#endif
        (*items)[t].kind = PyUnicode_KIND(u);
        (*items)[t].data = PyUnicode_DATA(u);
        (*items)[t].len = PyUnicode_GET_LENGTH(u);
    }
    return own;
fail:
    free(*items);
    *items = NULL;
    Py_DECREF(own);
    return NULL;
}

static inline uint64_t mix64(uint64_t z) {  /* SplitMix64's finalizer (words.mix64) */
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return z;
}

/* On x86-64 with gcc or clang and glibc's ifunc, the MinHash loop gets an AVX2 clone picked at
 * load time (the build stays portable: SSE2 otherwise); elsewhere (arm64's NEON, musl, MSVC,
 * clang before 14) the plain loop, vectorized as the target allows. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__) && \
    (!defined(__clang__) || __clang_major__ >= 14)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif
#if defined(_MSC_VER)
#define restrict __restrict
#endif

/* m[i] = min(m[i], A[i] * t mod 2**32) over every t of tops. The inner loop runs over the H
 * values, which the compiler vectorizes. */
CLONES
static void minhash(uint32_t *restrict m, const uint32_t *restrict a, Py_ssize_t h,
                    const uint32_t *restrict tops, Py_ssize_t count) {
    for (Py_ssize_t k = 0; k < count; k++) {
        const uint32_t t = tops[k];
        for (Py_ssize_t i = 0; i < h; i++) {
            uint32_t v = a[i] * t;
            m[i] = v < m[i] ? v : m[i];
        }
    }
}

typedef struct {
    const uint32_t *table;
    uint64_t p;
    const uint64_t *c;
    const uint32_t *a;
    int n;
    Py_ssize_t h;
    uint32_t *tops;  /* the top 32 bits of each n-gram hash of one text */
} Hashing;

/* One text's signature into m (all ones on entry), as words.py and duplicates.py compute it:
 * a word is a run of RUN code points or one SINGLE; its hash mix64(sum cp[i] * P**i); an
 * n-gram's mix64(sum w[j] * C[j]); a text of fewer than n words has one shingle, all its
 * words, tagged with their count. Returns the text's word count, or -1 at a code point
 * marked UNSAFE. */
#define DEFINE_TEXT(NAME, TYPE)                                                            \
    static Py_ssize_t NAME(const Hashing *x, const TYPE *s, Py_ssize_t len, uint32_t *m) { \
        const uint32_t *table = x->table;                                                  \
        const int n = x->n;                                                                \
        uint64_t ring[2 * MAXN]; /* the last n word hashes, twice: a window without wrap */ \
        int at = 0;                                                                        \
        Py_ssize_t words = 0, grams = 0, i = 0;                                            \
        while (i < len) {                                                                  \
            uint32_t e = table[s[i]];                                                      \
            if (e & UNSAFE) return -1;                                                     \
            uint32_t kind = e >> 24;                                                       \
            uint64_t sum;                                                                  \
            i++;                                                                           \
            if (kind == SEP) continue;                                                     \
            sum = e & CODE;                                                                \
            if (kind == RUN) {                                                             \
                uint64_t power = x->p;                                                     \
                while (i < len) {                                                          \
                    e = table[s[i]];                                                       \
                    if ((e >> 24) != RUN) break; /* UNSAFE too: seen next round */         \
                    sum += (uint64_t)(e & CODE) * power;                                   \
                    power *= x->p;                                                         \
                    i++;                                                                   \
                }                                                                          \
            }                                                                              \
            uint64_t word = mix64(sum);                                                    \
            ring[at] = word;                                                               \
            ring[at + n] = word;                                                           \
            at = at + 1 == n ? 0 : at + 1;                                                 \
            words++;                                                                       \
            if (words >= n) {                                                              \
                const uint64_t *w = ring + at; /* oldest first */                          \
                uint64_t gram = 0;                                                         \
                for (int j = 0; j < n; j++) gram += w[j] * x->c[j];                        \
                x->tops[grams++] = (uint32_t)(mix64(gram) >> 32);                          \
            }                                                                              \
        }                                                                                  \
        if (grams) {                                                                       \
            minhash(m, x->a, x->h, x->tops, grams);                                        \
        } else if (words) {                                                                \
            uint64_t gram = 0;                                                             \
            for (Py_ssize_t j = 0; j < words; j++) gram += ring[j] * x->c[j];              \
            uint32_t top = (uint32_t)(mix64(gram ^ ((uint64_t)words << 56)) >> 32);        \
            minhash(m, x->a, x->h, &top, 1);                                               \
        }                                                                                  \
        return words;                                                                      \
    }

DEFINE_TEXT(text_1byte, uint8_t)
DEFINE_TEXT(text_2byte, uint16_t)
DEFINE_TEXT(text_4byte, uint32_t)

static PyObject *k_signatures(PyObject *self, PyObject *args) {
    PyObject *list, *own = NULL, *result = NULL;
    Py_buffer table, cbuf, abuf, out, state;
    unsigned long long p;
    int n;
    Text *items = NULL;
    uint32_t *tops = NULL;
    if (!PyArg_ParseTuple(args, "O!y*Ky*y*iw*w*", &PyList_Type, &list, &table, &p, &cbuf, &abuf,
                          &n, &out, &state))
        return NULL;
    own = gather(list, &items);
    if (!own) goto done;
    Py_ssize_t texts = PyTuple_GET_SIZE(own);  /* the texts read, whatever the list does */
    Py_ssize_t h = abuf.len / (Py_ssize_t)sizeof(uint32_t);
    if (table.len != 0x110000 * (Py_ssize_t)sizeof(uint32_t) || n < 1 || n > MAXN ||
        cbuf.len < n * (Py_ssize_t)sizeof(uint64_t) || h < 1 ||
        out.len != texts * h * (Py_ssize_t)sizeof(uint32_t) || state.len != texts) {
        PyErr_SetString(PyExc_ValueError, "signatures: arguments of the wrong size");
        goto done;
    }
    Py_ssize_t longest = 0;
    for (Py_ssize_t t = 0; t < texts; t++)
        if (items[t].len > longest) longest = items[t].len;
    tops = malloc((longest + 1) * sizeof(uint32_t));
    if (!tops) {
        PyErr_NoMemory();
        goto done;
    }
    Hashing x = {table.buf, (uint64_t)p, cbuf.buf, abuf.buf, n, h, tops};
    uint32_t *rows = out.buf;
    uint8_t *st = state.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < texts; t++) {
        uint32_t *m = rows + t * h;
        for (Py_ssize_t i = 0; i < h; i++) m[i] = EMPTY;
        Py_ssize_t words;
        switch (items[t].kind) {
        case PyUnicode_1BYTE_KIND: words = text_1byte(&x, items[t].data, items[t].len, m); break;
        case PyUnicode_2BYTE_KIND: words = text_2byte(&x, items[t].data, items[t].len, m); break;
        default: words = text_4byte(&x, items[t].data, items[t].len, m); break;
        }
        st[t] = words < 0 ? 2 : words == 0;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(own);
    free(items);
    free(tops);
    PyBuffer_Release(&table);
    PyBuffer_Release(&cbuf);
    PyBuffer_Release(&abuf);
    PyBuffer_Release(&out);
    PyBuffer_Release(&state);
    return result;
}

/* ---- BLAKE2b (RFC 7693): unkeyed, with a personalization, as hashlib.blake2b computes it ---- */

static const uint64_t B2_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static inline uint64_t load64(const unsigned char *b) {  /* little-endian, on any host */
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--) w = (w << 8) | b[i];
    return w;
}

static inline uint64_t rotr64(uint64_t x, int r) { return (x >> r) | (x << (64 - r)); }

#define B2G(a, b, c, d, x, y)           \
    do {                                \
        v[a] = v[a] + v[b] + (x);       \
        v[d] = rotr64(v[d] ^ v[a], 32); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 24); \
        v[a] = v[a] + v[b] + (y);       \
        v[d] = rotr64(v[d] ^ v[a], 16); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 63); \
    } while (0)

static void b2_compress(uint64_t h[8], const unsigned char *block, uint64_t bytes, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= bytes;  /* the byte counter's high word stays 0: texts are far below 2**64 */
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = B2_SIGMA[r];
        B2G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        B2G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        B2G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        B2G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        B2G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        B2G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        B2G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        B2G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* The state after the parameter block: digest size, fanout 1, depth 1, personalization. */
static void b2_init(uint64_t h[8], int digest_size, const unsigned char person[16]) {
    unsigned char params[64] = {0};
    params[0] = (unsigned char)digest_size;
    params[2] = 1;
    params[3] = 1;
    memcpy(params + 48, person, 16);
    for (int i = 0; i < 8; i++) h[i] = B2_IV[i] ^ load64(params + 8 * i);
}

static void b2_hash(const uint64_t start[8], const unsigned char *data, size_t len,
                    unsigned char *digest, int digest_size) {
    uint64_t h[8];
    unsigned char block[128] = {0};
    size_t done = 0;
    memcpy(h, start, sizeof h);
    while (len - done > 128) {
        b2_compress(h, data + done, done + 128, 0);
        done += 128;
    }
    memcpy(block, data + done, len - done);
    b2_compress(h, block, len, 1);
    for (int i = 0; i < digest_size; i++) digest[i] = (unsigned char)(h[i / 8] >> (8 * (i % 8)));
}

/* ---- the exact key's text: " ".join(text.split()) in UTF-8 ---- */

static inline int is_space(uint32_t c) {  /* str.isspace */
    if (c <= 0x20) return (c >= 0x9 && c <= 0xd) || c >= 0x1c;
    if (c < 0x85) return 0;
    return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

#define DEFINE_COLLAPSE(NAME, TYPE)                                                       \
    static Py_ssize_t NAME(const TYPE *s, Py_ssize_t len, unsigned char *o) {             \
        unsigned char *start = o;                                                         \
        int owed = 0; /* a space before the next non-space */                             \
        int any = 0;  /* a non-space written */                                           \
        for (Py_ssize_t i = 0; i < len; i++) {                                            \
            uint32_t c = s[i];                                                            \
            if (is_space(c)) {                                                            \
                owed = any;                                                               \
                continue;                                                                 \
            }                                                                             \
            if (owed) *o++ = ' ';                                                         \
            owed = 0;                                                                     \
            any = 1;                                                                      \
            if (c < 0x80) {                                                               \
                *o++ = (unsigned char)c;                                                  \
            } else if (c < 0x800) {                                                       \
                *o++ = 0xC0 | (c >> 6);                                                   \
                *o++ = 0x80 | (c & 0x3F);                                                 \
            } else if (c < 0x10000) { /* surrogates too, as "surrogatepass" writes them */ \
                *o++ = 0xE0 | (c >> 12);                                                  \
                *o++ = 0x80 | ((c >> 6) & 0x3F);                                          \
                *o++ = 0x80 | (c & 0x3F);                                                 \
            } else {                                                                      \
                *o++ = 0xF0 | (c >> 18);                                                  \
                *o++ = 0x80 | ((c >> 12) & 0x3F);                                         \
                *o++ = 0x80 | ((c >> 6) & 0x3F);                                          \
                *o++ = 0x80 | (c & 0x3F);                                                 \
            }                                                                             \
        }                                                                                 \
        return o - start;                                                                 \
    }

DEFINE_COLLAPSE(collapse_1byte, uint8_t)
DEFINE_COLLAPSE(collapse_2byte, uint16_t)
DEFINE_COLLAPSE(collapse_4byte, uint32_t)

static PyObject *k_exact_keys(PyObject *self, PyObject *args) {
    PyObject *list, *own = NULL, *result = NULL;
    const char *person;
    Py_ssize_t person_len;
    int digest_size;
    Text *items = NULL;
    unsigned char *digests = NULL, *buf = NULL;
    if (!PyArg_ParseTuple(args, "O!y#i", &PyList_Type, &list, &person, &person_len,
                          &digest_size))
        return NULL;
    if (person_len > 16 || digest_size < 1 || digest_size > 64) {
        PyErr_SetString(PyExc_ValueError, "exact_keys: person of at most 16 bytes, digest_size "
                                          "in [1, 64]");
        return NULL;
    }
    unsigned char padded[16] = {0};
    memcpy(padded, person, person_len);
    uint64_t start[8];
    b2_init(start, digest_size, padded);
    own = gather(list, &items);
    if (!own) goto done;
    Py_ssize_t texts = PyTuple_GET_SIZE(own), longest = 0;
    for (Py_ssize_t t = 0; t < texts; t++) {
        Py_ssize_t most = items[t].len * (items[t].kind == PyUnicode_1BYTE_KIND ? 2 : 4);
        if (most > longest) longest = most;
    }
    digests = malloc((texts + 1) * 64);
    buf = malloc(longest + 1);
    if (!digests || !buf) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < texts; t++) {
        Py_ssize_t size;
        switch (items[t].kind) {
        case PyUnicode_1BYTE_KIND: size = collapse_1byte(items[t].data, items[t].len, buf); break;
        case PyUnicode_2BYTE_KIND: size = collapse_2byte(items[t].data, items[t].len, buf); break;
        default: size = collapse_4byte(items[t].data, items[t].len, buf); break;
        }
        b2_hash(start, buf, (size_t)size, digests + 64 * t, digest_size);
    }
    Py_END_ALLOW_THREADS
    result = PyList_New(texts);
    if (!result) goto done;
    for (Py_ssize_t t = 0; t < texts; t++) {
        PyObject *key = PyBytes_FromStringAndSize((const char *)digests + 64 * t, digest_size);
        if (!key) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, t, key);
    }
done:
    Py_XDECREF(own);
    free(items);
    free(digests);
    free(buf);
    return result;
}

static PyMethodDef methods[] = {
    {"signatures", k_signatures, METH_VARARGS, "MinHash signatures of a batch of texts."},
    {"exact_keys", k_exact_keys, METH_VARARGS,
     "BLAKE2b of each text's whitespace-collapsed UTF-8."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernel", "The dedup pass's hashing (transforms/dedup/kernel.py).",
    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
