/* The BPE merge loop of bpe.train_fast, compiled: the same algorithm as bpe's Python loop
 * (_merge_loop_python), step for step, so both give the same merges and the same TrainStats.
 *
 *   merges, stats = run(symbols, lengths, counts, vocab_len, vocab_size, min_frequency,
 *                       add_token, progress, progress_every, rebuild_min, rebuild_factor)
 *
 * symbols: every word's token ids, words one after another (uint32, native order);
 * lengths, counts: each word's length and weight (int64). add_token(a, b) returns the id of
 * the merged token (bpe decides whether its string is new); progress(merges, top_count,
 * heap_entries) is called every progress_every merges. Returns the (pair, new_id) merges in
 * rank order and (words_visited, heap_peak_entries, peak_live_pairs, rebuilds, stopped).
 *
 * Data structures, named by role as in bpe.py:
 *   pair_counts     open-addressing map pair -> count (slots are never removed: a count of 0
 *                   is an absent pair; `live` counts the nonzero ones);
 *   where_to_update each slot's pending word list (ascending word indices) of this merge,
 *                   and `touched`, the slots that hold one;
 *   heap            binary heap of entries (count desc, pair asc, seq asc: every key is
 *                   unique, so the pop order is that of Python's heapq on the same keys);
 *                   each entry owns the word list it was pushed for.
 * SOURCE_SHA256 (defined by trainer/setup.py) is this file's digest: bpe refuses a module
 * built from other source.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef SOURCE_SHA256
#error "SOURCE_SHA256 must be defined by the build (trainer/setup.py)"
#endif

#define PAIR_BITS 21

typedef struct {
    int32_t *data;
    int64_t len, cap;
} WordList;

typedef struct {
    uint64_t key; /* pair + 1; 0 = empty slot */
    int64_t count;
    WordList *pending; /* where_to_update's list, or NULL */
} Slot;

typedef struct {
    Slot *slots;
    uint64_t mask; /* capacity - 1 */
    int64_t used;
    int64_t live;
} PairCounts;

typedef struct {
    int64_t count;
    uint64_t pair;
    uint64_t seq;
    WordList *words;
} Entry;

typedef struct {
    Entry *items;
    int64_t len, cap;
} Heap;

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int counts_init(PairCounts *pc, uint64_t capacity) {
    pc->slots = calloc(capacity, sizeof(Slot));
    pc->mask = capacity - 1;
    pc->used = pc->live = 0;
    return pc->slots ? 0 : -1;
}

static Slot *counts_find(const PairCounts *pc, uint64_t pair) {
    uint64_t key = pair + 1, i = mix(key) & pc->mask;
    while (pc->slots[i].key && pc->slots[i].key != key) i = (i + 1) & pc->mask;
    return pc->slots[i].key ? &pc->slots[i] : NULL;
}

static int counts_grow(PairCounts *pc) {
    uint64_t capacity = (pc->mask + 1) * 2;
    Slot *old = pc->slots;
    uint64_t old_capacity = pc->mask + 1;
    Slot *slots = calloc(capacity, sizeof(Slot));
    if (!slots) return -1;
    for (uint64_t j = 0; j < old_capacity; j++) {
        if (!old[j].key) continue;
        uint64_t i = mix(old[j].key) & (capacity - 1);
        while (slots[i].key) i = (i + 1) & (capacity - 1);
        slots[i] = old[j];
    }
    free(old);
    pc->slots = slots;
    pc->mask = capacity - 1;
    return 0;
}

/* The slot of ``pair``, created with count 0 if absent; NULL when out of memory. Slots
 * move when the table grows: callers hold a slot only until the next counts_slot call. */
static Slot *counts_slot(PairCounts *pc, uint64_t pair) {
    if ((uint64_t)(pc->used + 1) * 2 > pc->mask + 1 && counts_grow(pc) < 0) return NULL;
    uint64_t key = pair + 1, i = mix(key) & pc->mask;
    while (pc->slots[i].key && pc->slots[i].key != key) i = (i + 1) & pc->mask;
    if (!pc->slots[i].key) {
        pc->slots[i].key = key;
        pc->used++;
    }
    return &pc->slots[i];
}

static int64_t counts_get(const PairCounts *pc, uint64_t pair) {
    Slot *s = counts_find(pc, pair);
    return s ? s->count : 0;
}

static void counts_add(PairCounts *pc, Slot *s, int64_t delta) {
    int64_t before = s->count;
    s->count += delta;
    pc->live += (s->count != 0) - (before != 0);
}

static int list_append(WordList *list, int32_t word) {
    if (list->len && list->data[list->len - 1] == word) return 0; /* ascending, once */
    if (list->len == list->cap) {
        int64_t cap = list->cap ? list->cap * 2 : 4;
        int32_t *data = realloc(list->data, (size_t)cap * sizeof(int32_t));
        if (!data) return -1;
        list->data = data;
        list->cap = cap;
    }
    list->data[list->len++] = word;
    return 0;
}

static void list_free(WordList *list) {
    if (list) {
        free(list->data);
        free(list);
    }
}

static int entry_before(const Entry *x, const Entry *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->pair != y->pair) return x->pair < y->pair;
    return x->seq < y->seq;
}

static void sift_down(Heap *h, int64_t i) {
    Entry e = h->items[i];
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= h->len) break;
        if (child + 1 < h->len && entry_before(&h->items[child + 1], &h->items[child])) child++;
        if (!entry_before(&h->items[child], &e)) break;
        h->items[i] = h->items[child];
        i = child;
    }
    h->items[i] = e;
}

static int heap_push(Heap *h, Entry e) {
    if (h->len == h->cap) {
        int64_t cap = h->cap ? h->cap * 2 : 1024;
        Entry *items = realloc(h->items, (size_t)cap * sizeof(Entry));
        if (!items) return -1;
        h->items = items;
        h->cap = cap;
    }
    int64_t i = h->len++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!entry_before(&e, &h->items[parent])) break;
        h->items[i] = h->items[parent];
        i = parent;
    }
    h->items[i] = e;
    return 0;
}

static Entry heap_pop(Heap *h) {
    Entry top = h->items[0];
    h->items[0] = h->items[--h->len];
    if (h->len) sift_down(h, 0);
    return top;
}

typedef struct {
    PairCounts pc;
    Heap heap;
    uint64_t *touched; /* pairs with a pending list this merge */
    int64_t touched_len, touched_cap;
    uint64_t seq;
} State;

/* A gained occurrence of ``pair`` in word ``word`` (weight n): count it and list the word. */
static int gain(State *st, uint64_t pair, int32_t word, int64_t n) {
    Slot *s = counts_slot(&st->pc, pair);
    if (!s) return -1;
    counts_add(&st->pc, s, n);
    if (!s->pending) {
        s->pending = calloc(1, sizeof(WordList));
        if (!s->pending) return -1;
        if (st->touched_len == st->touched_cap) {
            int64_t cap = st->touched_cap ? st->touched_cap * 2 : 1024;
            uint64_t *t = realloc(st->touched, (size_t)cap * sizeof(uint64_t));
            if (!t) return -1;
            st->touched = t;
            st->touched_cap = cap;
        }
        st->touched[st->touched_len++] = pair;
    }
    return list_append(s->pending, word);
}

static int lose(State *st, uint64_t pair, int64_t n) {
    Slot *s = counts_slot(&st->pc, pair);
    if (!s) return -1;
    counts_add(&st->pc, s, -n);
    return 0;
}

/* bpe's push_updates: an entry for every pair gained since the last call whose count is
 * above 0, holding the words that gained it; the lists of the others are dropped. */
static int push_updates(State *st) {
    for (int64_t t = 0; t < st->touched_len; t++) {
        Slot *s = counts_find(&st->pc, st->touched[t]);
        WordList *words = s->pending;
        s->pending = NULL;
        if (s->count > 0) {
            Entry e = {s->count, st->touched[t], st->seq++, words};
            if (heap_push(&st->heap, e) < 0) {
                list_free(words);
                return -1;
            }
        } else {
            list_free(words);
        }
    }
    st->touched_len = 0;
    return 0;
}

/* Merge (a, b) into ``new_id`` in one word, in place, tallying neighbour pairs as bpe's
 * _word_merger lists them: per site, (left, a) lost and (left, new) gained, (b, right) lost
 * and (new, right) gained. The left neighbour is the output's last symbol: the merged
 * token when the previous site ended there. */
static int merge_word(State *st, uint32_t *sym, int64_t *len, uint32_t a, uint32_t b,
                      uint32_t new_id, int32_t word, int64_t n) {
    int64_t r = 0, w = 0, end = *len;
    uint64_t nw = new_id;
    while (r < end) {
        if (r + 1 < end && sym[r] == a && sym[r + 1] == b) {
            if (w > 0) {
                uint64_t left = (uint64_t)sym[w - 1] << PAIR_BITS;
                if (lose(st, left | a, n) < 0 || gain(st, left | nw, word, n) < 0) return -1;
            }
            if (r + 2 < end) {
                uint64_t right = sym[r + 2];
                if (lose(st, ((uint64_t)b << PAIR_BITS) | right, n) < 0 ||
                    gain(st, (nw << PAIR_BITS) | right, word, n) < 0)
                    return -1;
            }
            sym[w++] = new_id;
            r += 2;
        } else {
            sym[w++] = sym[r++];
        }
    }
    *len = w;
    return 0;
}

static void state_free(State *st) {
    if (st->pc.slots) {
        for (uint64_t i = 0; i <= st->pc.mask; i++) list_free(st->pc.slots[i].pending);
        free(st->pc.slots);
    }
    for (int64_t i = 0; i < st->heap.len; i++) list_free(st->heap.items[i].words);
    free(st->heap.items);
    free(st->touched);
}

static int rebuild(State *st) {
    int64_t kept = 0;
    for (int64_t i = 0; i < st->heap.len; i++) {
        Entry e = st->heap.items[i];
        if (counts_get(&st->pc, e.pair) > 0)
            st->heap.items[kept++] = e;
        else
            list_free(e.words);
    }
    st->heap.len = kept;
    for (int64_t i = kept / 2 - 1; i >= 0; i--) sift_down(&st->heap, i);
    return 0;
}

static PyObject *run(PyObject *self, PyObject *args) {
    Py_buffer symbols_buf, lengths_buf, counts_buf;
    long long vocab_len, vocab_size, min_frequency, progress_every, rebuild_min, rebuild_factor;
    PyObject *add_token, *progress;
    if (!PyArg_ParseTuple(args, "w*y*y*LLLOOLLL", &symbols_buf, &lengths_buf, &counts_buf,
                          &vocab_len, &vocab_size, &min_frequency, &add_token, &progress,
                          &progress_every, &rebuild_min, &rebuild_factor))
        return NULL;
    PyObject *merges = NULL, *result = NULL;
    State st;
    memset(&st, 0, sizeof st);
    uint32_t *sym = symbols_buf.buf;
    const int64_t *counts = counts_buf.buf;
    int64_t n_words = counts_buf.len / (Py_ssize_t)sizeof(int64_t);
    int64_t *lengths = NULL, *starts = NULL;
    const char *stopped = "";
    long long words_visited = 0, heap_peak = 0, live_peak = 0, rebuilds = 0;

    if (lengths_buf.len != counts_buf.len || n_words >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "lengths and counts differ, or too many words");
        goto done;
    }
    lengths = malloc((size_t)(n_words + 1) * sizeof(int64_t));
    starts = malloc((size_t)(n_words + 1) * sizeof(int64_t));
    merges = PyList_New(0);
    if (!lengths || !starts || !merges || counts_init(&st.pc, 1 << 16) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(lengths, lengths_buf.buf, (size_t)n_words * sizeof(int64_t));
    int64_t total = 0;
    for (int64_t i = 0; i < n_words; i++) {
        starts[i] = total;
        total += lengths[i];
    }
    if (total * (Py_ssize_t)sizeof(uint32_t) != symbols_buf.len) {
        PyErr_SetString(PyExc_ValueError, "symbols do not match the words' lengths");
        goto done;
    }
    for (int64_t i = 0; i < n_words; i++) { /* every pair of every word, with its words */
        const uint32_t *word = sym + starts[i];
        for (int64_t k = 0; k + 1 < lengths[i]; k++) {
            if (gain(&st, ((uint64_t)word[k] << PAIR_BITS) | word[k + 1], (int32_t)i,
                     counts[i]) < 0) {
                PyErr_NoMemory();
                goto done;
            }
        }
    }
    if (push_updates(&st) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    heap_peak = st.heap.len;
    live_peak = st.pc.live;

    while (vocab_len < vocab_size && st.heap.len) {
        Entry e = heap_pop(&st.heap);
        int64_t current = counts_get(&st.pc, e.pair);
        if (e.count != current) { /* stale: refresh, and compare only once it is current */
            e.count = current;
            e.seq = st.seq++;
            if (heap_push(&st.heap, e) < 0) {
                list_free(e.words);
                PyErr_NoMemory();
                goto done;
            }
            continue;
        }
        if (current < 1 || current < min_frequency) {
            stopped = current >= 1 ? "min_frequency" : "no_pairs";
            list_free(e.words);
            break;
        }
        uint32_t a = (uint32_t)(e.pair >> PAIR_BITS), b = (uint32_t)(e.pair & ((1u << PAIR_BITS) - 1));
        PyObject *id_obj = PyObject_CallFunction(add_token, "kk", (unsigned long)a, (unsigned long)b);
        long long new_id = id_obj ? PyLong_AsLongLong(id_obj) : -1;
        Py_XDECREF(id_obj);
        if (new_id < 0 || new_id >= (1LL << PAIR_BITS)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "add_token: bad id");
            list_free(e.words);
            goto done;
        }
        if (new_id == vocab_len) vocab_len++;
        PyObject *merge = Py_BuildValue("(KL)", (unsigned long long)e.pair, new_id);
        if (!merge || PyList_Append(merges, merge) < 0) {
            Py_XDECREF(merge);
            list_free(e.words);
            goto done;
        }
        Py_DECREF(merge);
        for (int64_t k = 0; k < e.words->len; k++) {
            int32_t i = e.words->data[k];
            words_visited++;
            if (merge_word(&st, sym + starts[i], &lengths[i], a, b, (uint32_t)new_id, i,
                           counts[i]) < 0) {
                list_free(e.words);
                PyErr_NoMemory();
                goto done;
            }
        }
        list_free(e.words);
        if (push_updates(&st) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        if (st.pc.live > live_peak) live_peak = st.pc.live;
        if (st.heap.len > heap_peak) heap_peak = st.heap.len;
        if (st.heap.len > rebuild_min && st.heap.len > rebuild_factor * st.pc.live) {
            rebuild(&st);
            rebuilds++;
        }
        Py_ssize_t done_merges = PyList_GET_SIZE(merges);
        if (progress != Py_None && progress_every > 0 && done_merges % progress_every == 0) {
            PyObject *r = PyObject_CallFunction(progress, "nLL", done_merges, (long long)current,
                                                (long long)st.heap.len);
            if (!r) goto done;
            Py_DECREF(r);
        }
    }
    if (!*stopped) stopped = vocab_len >= vocab_size ? "vocab_size" : "no_pairs";
    result = Py_BuildValue("(O(LLLLs))", merges, words_visited, heap_peak, live_peak, rebuilds,
                           stopped);
done:
    Py_XDECREF(merges);
    state_free(&st);
    free(lengths);
    free(starts);
    PyBuffer_Release(&symbols_buf);
    PyBuffer_Release(&lengths_buf);
    PyBuffer_Release(&counts_buf);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, "The BPE merge loop (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_merge_loop", NULL, -1, methods};

PyMODINIT_FUNC PyInit__merge_loop(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
