/*
 * The CUDA driver model: a shared library named like the driver (libcuda.so.1) that
 * stands in for it where no GPU is, so capture-cuda runs unchanged in every test run.
 *
 * Written against NVIDIA's own cuda.h (from the pinned nvidia-cuda-runtime-cu12 wheel):
 * every entry point below is defined under the name cuda.h declares (its macros map
 * cuMemAlloc to cuMemAlloc_v2 and so on), so the compiler checks each exported
 * signature against NVIDIA's declaration.
 *
 * What it models, from the driver documentation:
 * - one device, named "capture CUDA driver model (not a GPU)", compute capability 9.0
 *   (so the shipped sm_90 cubins load), claiming CUDA 12.9 (CAPTURE_CUDA_MODEL_VERSION
 *   claims another, which changes the PTX ISA it accepts);
 * - primary contexts (retained and released) and created contexts, the current context
 *   per thread; a context's first asynchronous error is sticky, as on a GPU;
 * - streams whose work runs deferred, each stream on its own and in its own order: work
 *   runs only when the host waits for it (a stream or event synchronisation, a
 *   synchronous copy, a context synchronisation, a free), so a missing
 *   cuStreamWaitEvent shows as wrong bytes; events, and waits on them (a wait makes the
 *   waiting stream run the other stream up to the event first);
 * - device memory and pinned host memory, every kernel's ranges checked against the
 *   live allocations; copies from and to pinned memory read and write it when they run,
 *   copies from and to pageable memory when they are called;
 * - modules from PTX (entry points and their parameters read from the .entry lists; the
 *   .version checked against the ISA the claimed driver accepts) and from cubins (the
 *   ELF's .text.<name> sections and the KPARAM_INFO records of .nv.info.<name>; the
 *   SASS architecture checked against the device), cuFuncGetParamInfo answered from them;
 * - stream capture in relaxed mode, with the errors the driver documents for what a
 *   capture cannot contain: a synchronisation or query of a capturing stream, an event
 *   recorded in a capture synchronised outside it or waited on after it ended, a wait in
 *   a capture on an event recorded outside it, a copy from or to pageable memory, and,
 *   on any thread, a memory free, a module load or unload, or a context synchronisation
 *   while the context captures (each invalidates the captures it touches); streams
 *   joining a capture by waiting on an event recorded in it (a fork), the capture ended
 *   on its origin alone (CUDA_ERROR_STREAM_CAPTURE_UNMATCHED on a joined stream) and
 *   refused with CUDA_ERROR_STREAM_CAPTURE_UNJOINED where a joined stream's last node is
 *   not ordered before the origin's end by events (the unjoined stream then stays in a
 *   capture of its own, invalidated, until its own cuStreamEndCapture: cuda.h documents
 *   no release of it by the origin's end); graphs of kernel and copy nodes with their
 *   dependencies as stream capture makes them (a node depends on its stream's frontier,
 *   a wait on an event recorded in the capture adds the recorder's frontier, a fork
 *   starts from it; cuStreamGetCaptureInfo answers with the stream's own frontier), their
 *   node and edge queries (cuGraphGetEdges_v2, a programmatic launch's edge from a kernel
 *   node typed CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC), instantiation, upload, launch and
 *   destruction (an executable destroyed with launches queued is freed after them); a
 *   graph launch runs its nodes in an order its edges allow and the recording's does not
 *   suggest (always the ready node recorded last), so an edge left out shows as wrong
 *   bytes;
 * - cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
 *   (programmatic dependent launch: the kernel may start while the kernel before it in
 *   the stream finishes, and waits for it itself). The model runs every stream in order,
 *   which is one schedule the driver allows, so the attribute changes no result, except
 *   for a kernel whose PTX never waits (no griddepcontrol.wait in its body: it would read
 *   its predecessor's outputs before they are written), whose run faults naming it
 *   (CUDA_ERROR_ILLEGAL_INSTRUCTION; a cubin's SASS is not read); it is
 *   validated (an attribute id outside cuda.h's enum is CUDA_ERROR_INVALID_VALUE, as is a
 *   config or attribute list that is NULL where it is needed) and kept with the launch:
 *   on a queued kernel, and, captured, on its graph node (the programmatic edge from the
 *   node before it), copied into every executable, and counted each time such a kernel
 *   runs (`programmatic_kernels_run`), so a test sees that it reached the driver, the
 *   graph and each replay. Launch attributes the model does not model (cooperative,
 *   clusters, priorities and the rest) are refused with CUDA_ERROR_NOT_SUPPORTED and a
 *   line on stderr saying so: the model claims nothing about them.
 *
 * - graphs built by node calls (cuGraphCreate, cuGraphAddNode) of kernel, memset
 *   (1-dimensional), child graph (cloned, its nodes in the same order; read back with
 *   cuGraphGetNodes on the clone) and conditional nodes, as cuda.h documents them:
 *   WHILE conditional nodes (CUDA 12.3: cuGraphConditionalHandleCreate and the node type
 *   refused with CUDA_ERROR_NOT_SUPPORTED under a claimed older driver), whose body runs
 *   as long as the handle's value is non-zero, checked before each iteration, the value
 *   set to the handle's default at each launch with CU_GRAPH_COND_ASSIGN_DEFAULT (at
 *   instantiation alone without it) and by cudaGraphSetConditional from device code: the
 *   loop setter capture-cuda ships (kernels/loop_setter.cu, which calls the device
 *   runtime) is run by the model itself, by entry name; a body or child graph runs its
 *   nodes in the order an executable's do. What cuda.h restricts is refused: a node type
 *   a body does not allow (host, event, semaphore, memory and batch nodes) with
 *   CUDA_ERROR_NOT_SUPPORTED, and with CUDA_ERROR_INVALID_VALUE a child graph holding a
 *   conditional node, a handle used by a second node or by a node outside the graph it
 *   was made on (or nested in it), a WHILE node of more than one body, a handle no node
 *   uses at instantiation, a second executable of a graph holding conditional nodes
 *   while the first lives, an owned graph (a body, a child node's clone) destroyed or
 *   instantiated on its own; IF and SWITCH nodes, moved child graphs and 2-dimensional
 *   memsets are refused with CUDA_ERROR_NOT_SUPPORTED and a line saying the model does not
 *   model them. An executable's nodes are set after instantiation as cuda.h documents:
 *   a kernel node of the graph it came from (cuGraphExecKernelNodeSetParams: the top
 *   level only), a memset node's value (cuGraphExecMemsetNodeSetParams) and a child graph
 *   node's clone from a graph of the same topology (cuGraphExecChildGraphNodeSetParams,
 *   recursively, also for a child node in a conditional body); a graph's kernel node set
 *   in the graph (cuGraphKernelNodeSetParams); each reaches only launches enqueued after
 *   it. A WHILE node that runs 10^8 iterations faults as hung (CUDA_ERROR_LAUNCH_TIMEOUT).
 *
 * Kernels run on the host, by entry name, through the kernel libraries named by
 * CAPTURE_CUDA_MODEL_KERNELS (a colon-separated list, each exporting model.h's
 * `capture_model_run`, asked in order until one knows the entry): the whole grid at once.
 * `capture_model_counts` says what lives, for the tests' leak checks.
 *
 * What it cannot show: timing, what a real driver actually invalidates beyond its
 * documentation, JIT compilation, lazy loading, concurrency inside the GPU.
 */

#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define MODEL_NAME "capture CUDA driver model (not a GPU)"
#define MODEL_PREFIX "capture CUDA driver model: "

/* ---------------------------------------------------------------------------------- */
/* State                                                                                */

static pthread_mutex_t model_lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int driver_version = 12090;
static unsigned long long memory_limit = 4ull << 30;
static struct capture_model_counts totals;

static void lock(void) { pthread_mutex_lock(&model_lock); }
static void unlock(void) { pthread_mutex_unlock(&model_lock); }

/* Says why something went wrong on stderr, for whoever reads the test's output. */
static void say(const char *format, ...) {
    va_list args;
    va_start(args, format);
    fputs(MODEL_PREFIX, stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        say("out of host memory");
        abort();
    }
    return p;
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        say("out of host memory");
        abort();
    }
    return q;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

/* Kinds of handle the model hands out; every handle starts with one. */
enum kind { K_CTX = 1, K_STREAM, K_EVENT, K_MODULE, K_FUNCTION, K_GRAPH, K_NODE, K_EXEC, K_COND };

struct header {
    enum kind kind;
};

/* The live handles, an open-addressing set of pointers: a handle is valid while it is in
   the set and of the kind asked for, so a destroyed handle is refused, never read. */
static void **live;
static size_t live_cap, live_len;
static char tombstone_mark;
#define TOMBSTONE ((void *)&tombstone_mark)

static size_t slot_of(const void *p, size_t cap) {
    uintptr_t h = (uintptr_t)p;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static void live_put(void *p);

static void live_grow(void) {
    size_t old_cap = live_cap;
    void **old = live;
    live_cap = old_cap ? old_cap * 2 : 1024;
    live = calloc(live_cap, sizeof *live);
    if (!live) {
        say("out of host memory");
        abort();
    }
    live_len = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i] && old[i] != TOMBSTONE) live_put(old[i]);
    free(old);
}

static void live_put(void *p) {
    if ((live_len + 1) * 2 > live_cap) live_grow();
    size_t i = slot_of(p, live_cap);
    while (live[i] && live[i] != TOMBSTONE) i = (i + 1) & (live_cap - 1);
    live[i] = p;
    live_len++;
}

static int live_has(const void *p) {
    /* Small values (the default streams' handles) are never live objects. */
    if ((uintptr_t)p < 4096 || p == TOMBSTONE || !live_cap) return 0;
    size_t i = slot_of(p, live_cap);
    while (live[i]) {
        if (live[i] == p) return 1;
        i = (i + 1) & (live_cap - 1);
    }
    return 0;
}

static void live_remove(const void *p) {
    if (!p || !live_cap) return;
    size_t i = slot_of(p, live_cap);
    while (live[i]) {
        if (live[i] == p) {
            live[i] = TOMBSTONE;
            live_len--;
            return;
        }
        i = (i + 1) & (live_cap - 1);
    }
}

static void *handle(const void *p, enum kind kind) {
    if (!live_has(p)) return NULL;
    struct header *h = (struct header *)p;
    return h->kind == kind ? (void *)p : NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Contexts                                                                             */

struct stream;
struct capture;

struct ctx {
    struct header h;
    int primary;
    int retains;       /* a primary context's retain count */
    int active;        /* retained (primary) or not destroyed (created) */
    CUresult sticky;   /* the first asynchronous error, returned by every later call */
    struct stream *legacy; /* the context's default stream, made on first use */
};

static struct ctx primary_ctx = {{K_CTX}, 1, 0, 0, CUDA_SUCCESS, NULL};
static __thread struct ctx *current;

/* The current context, if it is active. */
static struct ctx *current_ctx(CUresult *error) {
    if (!initialized) {
        *error = CUDA_ERROR_NOT_INITIALIZED;
        return NULL;
    }
    if (!current || !current->active) {
        *error = CUDA_ERROR_INVALID_CONTEXT;
        return NULL;
    }
    if (current->sticky) {
        *error = current->sticky;
        return NULL;
    }
    return current;
}

/* ---------------------------------------------------------------------------------- */
/* Memory                                                                               */

struct allocation {
    uintptr_t base;
    size_t size;
    int host; /* pinned host memory rather than device memory */
    struct ctx *ctx;
};

/* Live allocations, sorted by base. */
static struct allocation *allocs;
static size_t alloc_len, alloc_cap;
static unsigned long long device_bytes, host_bytes;

static size_t alloc_search(uintptr_t address) {
    size_t lo = 0, hi = alloc_len;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (allocs[mid].base <= address)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo; /* the first allocation above address */
}

/* The allocation holding [address, address + bytes), if one does. */
static struct allocation *alloc_holding(uintptr_t address, size_t bytes) {
    size_t i = alloc_search(address);
    if (i == 0) return NULL;
    struct allocation *a = &allocs[i - 1];
    if (address < a->base || address - a->base >= a->size) return NULL;
    if (bytes > a->size - (address - a->base)) return NULL;
    return a;
}

static void alloc_insert(struct allocation a) {
    if (alloc_len == alloc_cap) {
        alloc_cap = alloc_cap ? alloc_cap * 2 : 64;
        allocs = xrealloc(allocs, alloc_cap * sizeof *allocs);
    }
    size_t i = alloc_search(a.base);
    memmove(&allocs[i + 1], &allocs[i], (alloc_len - i) * sizeof *allocs);
    allocs[i] = a;
    alloc_len++;
}

static int alloc_remove(uintptr_t base, int host, struct allocation *out) {
    size_t i = alloc_search(base);
    if (i == 0 || allocs[i - 1].base != base || allocs[i - 1].host != host) return 0;
    *out = allocs[i - 1];
    memmove(&allocs[i - 1], &allocs[i], (alloc_len - i) * sizeof *allocs);
    alloc_len--;
    return 1;
}

/* The `inside` a host kernel gets: called while the model's lock is held. */
static int inside(unsigned long long address, size_t bytes) {
    return alloc_holding((uintptr_t)address, bytes) != NULL;
}

/* Bytes never written read as this pattern (floats near -6.6e6). */
#define FRESH 0xCA

/* ---------------------------------------------------------------------------------- */
/* Modules and functions                                                                */

struct function {
    struct header h;
    struct module *module;
    char *name;
    unsigned count;
    size_t *offsets;
    size_t *sizes;
    size_t param_bytes;
    int max_dynamic_shared;
    /* Whether its code waits for its grid dependency (PTX `griddepcontrol.wait` in its
       body); a cubin's SASS is not read, and its functions count as waiting. */
    int waits_for_grid;
};

struct module {
    struct header h;
    struct ctx *ctx;
    int loaded;
    size_t count;
    struct function **functions;
};

/* The most dynamic shared memory a launch may use without opting in, and with. */
#define SHARED_DEFAULT 49152
#define SHARED_OPTIN 232448

static struct function *new_function(struct module *m, const char *name, size_t len) {
    struct function *f = xmalloc(sizeof *f);
    memset(f, 0, sizeof *f);
    f->h.kind = K_FUNCTION;
    f->module = m;
    f->name = xmalloc(len + 1);
    memcpy(f->name, name, len);
    f->name[len] = 0;
    f->max_dynamic_shared = SHARED_DEFAULT;
    m->functions = xrealloc(m->functions, (m->count + 1) * sizeof *m->functions);
    m->functions[m->count++] = f;
    return f;
}

static void add_param(struct function *f, size_t offset, size_t size) {
    f->offsets = xrealloc(f->offsets, (f->count + 1) * sizeof *f->offsets);
    f->sizes = xrealloc(f->sizes, (f->count + 1) * sizeof *f->sizes);
    f->offsets[f->count] = offset;
    f->sizes[f->count] = size;
    f->count++;
    if (offset + size > f->param_bytes) f->param_bytes = offset + size;
}

/* The newest PTX ISA (major * 10 + minor) a driver of `version` accepts. */
static int ptx_isa_of(int version) {
    static const int table[][2] = {
        {12000, 80}, {12010, 81}, {12020, 82}, {12030, 83}, {12040, 84}, {12050, 85},
        {12060, 85}, {12080, 87}, {12090, 88}, {13000, 90}, {13010, 90},
    };
    int isa = 78;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (version >= table[i][0]) isa = table[i][1];
    return isa;
}

static const char *skip_space(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static size_t type_size(const char *t, size_t len) {
    if (len < 3) return 0;
    const char *digits = t + 2; /* ".u64", ".f32", ".b8" */
    int bits = atoi(digits);
    return bits > 0 ? (size_t)bits / 8 : 0;
}

/* Reads one parameter declaration "[.param] .type [.ptr ...] [.align A] name[N]" ending
   at `end`, appends it to `f`, and returns 0, or -1 when it cannot be read. */
static int ptx_param(struct function *f, const char *p, const char *end, size_t *cursor) {
    size_t size = 0, align = 0, count = 1;
    while (p < end) {
        p = skip_space(p);
        if (p >= end) break;
        const char *word = p;
        while (p < end && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;
        size_t len = (size_t)(p - word);
        if (len == 6 && !memcmp(word, ".param", 6)) continue;
        if (len == 6 && !memcmp(word, ".align", 6)) {
            p = skip_space(p);
            align = (size_t)strtoul(p, (char **)&p, 10);
            continue;
        }
        if (word[0] == '.') {
            if (len >= 3 && strchr("usbf", word[1]) && word[2] >= '0' && word[2] <= '9')
                size = type_size(word, len);
            continue; /* .ptr, .global, .shared, ... */
        }
        /* The name, maybe with [N]. */
        const char *bracket = memchr(word, '[', len);
        if (bracket) count = (size_t)strtoul(bracket + 1, NULL, 10);
    }
    if (!size || !count) return -1;
    if (!align) align = size;
    *cursor = (*cursor + align - 1) / align * align;
    add_param(f, *cursor, size * count);
    *cursor += size * count;
    return 0;
}

/* Parses PTX text: its version against the claimed driver's ISA, its target against the
   device, and every .entry with its parameters. */
static CUresult load_ptx(struct module *m, const char *text) {
    const char *v = strstr(text, ".version");
    if (!v) return CUDA_ERROR_INVALID_PTX;
    int major = 0, minor = 0;
    if (sscanf(v, ".version %d.%d", &major, &minor) != 2) return CUDA_ERROR_INVALID_PTX;
    if (major * 10 + minor > ptx_isa_of(driver_version)) {
        say("PTX ISA %d.%d is newer than this driver's (%d.%d, CUDA %d.%d)", major, minor,
            ptx_isa_of(driver_version) / 10, ptx_isa_of(driver_version) % 10,
            driver_version / 1000, driver_version % 1000 / 10);
        return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    }
    const char *t = strstr(text, ".target");
    if (t) {
        int arch = 0;
        if (sscanf(t, ".target sm_%d", &arch) == 1 && arch > 90) return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    for (const char *e = strstr(text, ".entry"); e; e = strstr(e + 6, ".entry")) {
        const char *name = skip_space(e + 6);
        const char *name_end = name;
        while (*name_end && *name_end != '(' && *name_end != ' ' && *name_end != '\n' &&
               *name_end != '\t' && *name_end != '\r')
            name_end++;
        struct function *f = new_function(m, name, (size_t)(name_end - name));
        /* Its body runs to the next entry: does it wait for its grid dependency? */
        const char *next = strstr(name_end, ".entry");
        const char *wait = strstr(name_end, "griddepcontrol.wait");
        f->waits_for_grid = wait && (!next || wait < next);
        const char *open = skip_space(name_end);
        if (*open != '(') continue; /* no parameters */
        const char *close = strchr(open, ')');
        if (!close) return CUDA_ERROR_INVALID_PTX;
        size_t cursor = 0;
        const char *p = open + 1;
        while (p < close) {
            const char *comma = memchr(p, ',', (size_t)(close - p));
            const char *end = comma ? comma : close;
            if (skip_space(p) < end && ptx_param(f, p, end, &cursor) != 0)
                return CUDA_ERROR_INVALID_PTX;
            p = end + 1;
        }
    }
    return CUDA_SUCCESS;
}

/* ELF64 little-endian reads, bounds checked by the caller. */
static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* The size of an ELF image from its section header table's end (cuModuleLoadData gets
   no length: the image says where it ends). */
static CUresult load_cubin(struct module *m, const unsigned char *d) {
    if (d[4] != 2 || d[5] != 1) return CUDA_ERROR_INVALID_IMAGE; /* ELF64, little-endian */
    uint32_t flags = rd32(d + 0x30);
    unsigned arch = flags & 0xff;
    if (arch / 10 != 9 || arch % 10 > 0) {
        say("a cubin for sm_%u cannot run on this device (sm_90)", arch);
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    uint64_t shoff = rd64(d + 0x28);
    uint16_t shentsize = rd16(d + 0x3a), shnum = rd16(d + 0x3c), shstrndx = rd16(d + 0x3e);
    if (shentsize < 64 || shstrndx >= shnum) return CUDA_ERROR_INVALID_IMAGE;
    const unsigned char *strsec = d + shoff + (uint64_t)shstrndx * shentsize;
    const char *strtab = (const char *)d + rd64(strsec + 0x18);
    /* Every kernel has a .text.<name> section. */
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *s = d + shoff + (uint64_t)i * shentsize;
        const char *name = strtab + rd32(s);
        /* A cubin's SASS is not read: its functions count as waiting for their grid
           dependency (the backend refuses a user cubin that says it does). */
        if (!strncmp(name, ".text.", 6)) new_function(m, name + 6, strlen(name + 6))->waits_for_grid = 1;
    }
    /* Their parameters are the KPARAM_INFO records (format 4, attribute 0x17) of
       .nv.info.<name>: an index, an ordinal, an offset, and the size in bits 18..31. */
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *s = d + shoff + (uint64_t)i * shentsize;
        const char *name = strtab + rd32(s);
        if (strncmp(name, ".nv.info.", 9)) continue;
        struct function *f = NULL;
        for (size_t k = 0; k < m->count; k++)
            if (!strcmp(m->functions[k]->name, name + 9)) f = m->functions[k];
        if (!f) continue;
        const unsigned char *p = d + rd64(s + 0x18), *end = p + rd64(s + 0x20);
        size_t params = 0, offsets[256], sizes[256];
        while (p + 2 <= end) {
            unsigned format = p[0], attribute = p[1];
            if (format == 4) {
                unsigned size = rd16(p + 2);
                if (attribute == 0x17 && size >= 12 && params < 256) {
                    unsigned ordinal = rd16(p + 8);
                    if (ordinal < 256) {
                        offsets[ordinal] = rd16(p + 10);
                        sizes[ordinal] = (rd32(p + 12) >> 18) & 0x3fff;
                        if (ordinal + 1 > params) params = ordinal + 1;
                    }
                }
                p += 4 + size;
            } else if (format == 3) {
                p += 4;
            } else if (format == 2) {
                p += 3;
            } else {
                p += 2;
            }
        }
        for (size_t k = 0; k < params; k++) add_param(f, offsets[k], sizes[k]);
    }
    return CUDA_SUCCESS;
}

static void free_module(struct module *m) {
    for (size_t i = 0; i < m->count; i++) {
        struct function *f = m->functions[i];
        live_remove(f);
        free(f->name);
        free(f->offsets);
        free(f->sizes);
        free(f);
    }
    free(m->functions);
    m->functions = NULL;
    m->count = 0;
}

/* ---------------------------------------------------------------------------------- */
/* Work: what a stream queue and a graph hold                                           */

enum work_kind { W_KERNEL, W_HTOD, W_DTOH, W_WAIT, W_RECORD, W_GRAPH, W_MEMSET, W_CHILD, W_COND };

struct exec;
struct graph;
struct plan;

struct work {
    enum work_kind kind;
    struct work *next;
    unsigned long long ticket; /* its place in its stream */
    union {
        struct {
            struct function *f;
            char *entry; /* kept: the module may be unloaded before it runs */
            size_t param_bytes;
            unsigned grid[3], block[3], shared;
            unsigned char *params;
            /* Launched with programmatic stream serialization: may overlap the kernel
               before it (in a graph, the programmatic edge from the node before it). */
            int programmatic;
        } kernel;
        struct {
            uintptr_t device;
            void *host;   /* pinned memory, read or written when the copy runs */
            void *owned;  /* pageable bytes copied at the call (host to device) */
            int pinned;   /* the host side lies in pinned memory */
            size_t bytes;
        } copy;
        struct {
            struct stream *stream;
            unsigned long long ticket;
        } wait;
        struct {
            uintptr_t device;
            unsigned value;       /* the element's value, its low elem_size bytes */
            unsigned elem_size;   /* 1, 2 or 4 */
            size_t width;         /* elements */
        } memset;
        struct {
            /* In a graph: the graph the node owns (a clone of the one it was made from,
               or a conditional node's body). In an executable: its instantiation. */
            struct graph *graph;
            struct plan *plan;
            /* A conditional node's handle (W_COND; the WHILE type alone is modelled). */
            unsigned long long handle;
        } child;
        struct {
            struct exec *exec;
            /* The executable's nodes as they were when the launch was enqueued: an update
               of the executable (cuGraphExecKernelNodeSetParams) reaches only launches
               enqueued after it, as the driver documents. */
            size_t count;
            struct work **works;
        } graph;
    } u;
};

static void free_graph(struct graph *g);
static void free_plan(struct plan *p);
static struct plan *copy_plan(const struct plan *p);

static void free_work(struct work *w) {
    if (w->kind == W_CHILD || w->kind == W_COND) {
        if (w->u.child.graph) free_graph(w->u.child.graph);
        if (w->u.child.plan) free_plan(w->u.child.plan);
    }
    if (w->kind == W_KERNEL) {
        free(w->u.kernel.params);
        free(w->u.kernel.entry);
    }
    if (w->kind == W_HTOD) free(w->u.copy.owned);
    if (w->kind == W_GRAPH) {
        for (size_t i = 0; i < w->u.graph.count; i++) free_work(w->u.graph.works[i]);
        free(w->u.graph.works);
    }
    free(w);
}

static struct work *copy_work(const struct work *w) {
    struct work *c = xmalloc(sizeof *c);
    *c = *w;
    c->next = NULL;
    if (w->kind == W_KERNEL) {
        size_t bytes = w->u.kernel.param_bytes;
        c->u.kernel.params = xmalloc(bytes);
        memcpy(c->u.kernel.params, w->u.kernel.params, bytes);
        c->u.kernel.entry = xstrdup(w->u.kernel.entry);
    }
    if (w->kind == W_HTOD && w->u.copy.owned) {
        c->u.copy.owned = xmalloc(w->u.copy.bytes);
        memcpy(c->u.copy.owned, w->u.copy.owned, w->u.copy.bytes);
        c->u.copy.host = c->u.copy.owned;
    }
    /* Only an executable's works are copied (a launch's snapshot): their plans. */
    if ((w->kind == W_CHILD || w->kind == W_COND) && w->u.child.plan) {
        c->u.child.graph = NULL;
        c->u.child.plan = copy_plan(w->u.child.plan);
    }
    return c;
}

/* A graph node: its work and the nodes it depends on, each edge of the default type or
   programmatic (CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC: a programmatic launch after a
   kernel node). */
struct node {
    struct header h;
    struct graph *graph;
    struct work *work;
    size_t ndeps;
    struct node **deps;
    unsigned char *dep_type;
};

struct graph {
    struct header h;
    struct ctx *ctx;
    size_t count;
    struct node **nodes;
    /* The child graph or conditional node that owns it (NULL for a graph of its own):
       cuGraphDestroy refuses an owned one. */
    struct node *owner;
    /* A conditional node's body, or a graph nested in one: only the node types cuda.h
       allows in a body may be added. */
    int body;
    /* The conditional handles created on it (cuGraphConditionalHandleCreate), each to
       be used by one conditional node in it or a graph nested in it. */
    size_t nconds;
    struct cond **conds;
    /* Live executables instantiated from it: a graph holding conditional nodes has at
       most one (cuda.h). */
    size_t execs;
};

/* A conditional handle: created on a graph, with a default value applied at each launch
   when CU_GRAPH_COND_ASSIGN_DEFAULT is set; used by at most one conditional node. */
struct cond {
    struct header h;
    struct ctx *ctx;
    struct graph *graph;
    unsigned default_value;
    unsigned flags;
    struct node *node; /* the conditional node using it */
};

/* A conditional handle's value in an executable, set at each launch's start (with
   CU_GRAPH_COND_ASSIGN_DEFAULT) and by cudaGraphSetConditional from device code. */
struct cond_state {
    unsigned long long handle;
    unsigned default_value;
    unsigned flags;
    unsigned value;
};

/* A graph instantiated: its nodes' works, in the graph's order, and their edges. The
   executable's top level and each child graph's or conditional body's instantiation. */
struct plan {
    size_t count;
    struct work **works;
    struct node **nodes; /* the graph node each work was instantiated from */
    size_t *indegree;
    size_t *nsucc;
    size_t **succ;
};

struct exec {
    struct header h;
    struct ctx *ctx;
    size_t count;
    struct work **works;
    /* The node of the graph each work was instantiated from (what an update names). */
    struct node **nodes;
    /* Per work, how many works it depends on, and the works that depend on it (indices):
       a launch runs them in an order the edges allow, never the recording's alone. */
    size_t *indegree;
    size_t *nsucc;
    size_t **succ;
    unsigned long long pending; /* launches queued and not yet run */
    int destroyed;
    /* Its conditional handles' values, and the graph it came from (for the one
       instantiation a graph with conditional nodes may have). */
    size_t nconds;
    struct cond_state *conds;
    struct graph *source;
};

/* Adds a node of `w` to `g` after the `ndeps` nodes `deps`; with `programmatic` (a
   programmatic launch), each edge from a kernel node is a programmatic one. */
static struct node *graph_add(struct graph *g, struct work *w, struct node **deps, size_t ndeps,
                              int programmatic) {
    struct node *n = xmalloc(sizeof *n);
    memset(n, 0, sizeof *n);
    n->h.kind = K_NODE;
    n->graph = g;
    n->work = w;
    if (ndeps) {
        n->deps = xmalloc(ndeps * sizeof *n->deps);
        n->dep_type = xmalloc(ndeps);
        for (size_t i = 0; i < ndeps; i++) {
            n->deps[i] = deps[i];
            n->dep_type[i] = programmatic && deps[i]->work->kind == W_KERNEL
                                 ? CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
                                 : CU_GRAPH_DEPENDENCY_TYPE_DEFAULT;
        }
        n->ndeps = ndeps;
    }
    g->nodes = xrealloc(g->nodes, (g->count + 1) * sizeof *g->nodes);
    g->nodes[g->count++] = n;
    live_put(n);
    return n;
}

static void free_graph(struct graph *g) {
    live_remove(g);
    for (size_t i = 0; i < g->nconds; i++) {
        live_remove(g->conds[i]);
        free(g->conds[i]);
    }
    free(g->conds);
    for (size_t i = 0; i < g->count; i++) {
        live_remove(g->nodes[i]);
        free_work(g->nodes[i]->work);
        free(g->nodes[i]->deps);
        free(g->nodes[i]->dep_type);
        free(g->nodes[i]);
    }
    free(g->nodes);
    free(g);
}

static void free_exec(struct exec *x) {
    for (size_t i = 0; i < x->count; i++) {
        free_work(x->works[i]);
        free(x->succ[i]);
    }
    free(x->works);
    free(x->nodes);
    free(x->indegree);
    free(x->nsucc);
    free(x->succ);
    free(x->conds);
    free(x);
}

static void free_plan(struct plan *p) {
    for (size_t i = 0; i < p->count; i++) {
        free_work(p->works[i]);
        free(p->succ[i]);
    }
    free(p->works);
    free(p->nodes);
    free(p->indegree);
    free(p->nsucc);
    free(p->succ);
    free(p);
}

static struct plan *copy_plan(const struct plan *p) {
    struct plan *c = xmalloc(sizeof *c);
    size_t n = p->count ? p->count : 1;
    c->count = p->count;
    c->works = xmalloc(n * sizeof *c->works);
    c->nodes = xmalloc(n * sizeof *c->nodes);
    c->indegree = xmalloc(n * sizeof *c->indegree);
    c->nsucc = xmalloc(n * sizeof *c->nsucc);
    c->succ = xmalloc(n * sizeof *c->succ);
    for (size_t i = 0; i < p->count; i++) {
        c->works[i] = copy_work(p->works[i]);
        c->nodes[i] = p->nodes[i];
        c->indegree[i] = p->indegree[i];
        c->nsucc[i] = p->nsucc[i];
        c->succ[i] = xmalloc((p->nsucc[i] ? p->nsucc[i] : 1) * sizeof *c->succ[i]);
        if (p->nsucc[i]) memcpy(c->succ[i], p->succ[i], p->nsucc[i] * sizeof *c->succ[i]);
    }
    return c;
}

/* Whether `g` or a graph nested in it holds a conditional node. */
static int holds_conditional(const struct graph *g) {
    for (size_t i = 0; i < g->count; i++) {
        const struct work *w = g->nodes[i]->work;
        if (w->kind == W_COND) return 1;
        if (w->kind == W_CHILD && w->u.child.graph && holds_conditional(w->u.child.graph))
            return 1;
    }
    return 0;
}

/* A conditional handle of `g` or of a graph nested in it that no node uses, if any. */
static struct cond *unused_handle(const struct graph *g) {
    for (size_t i = 0; i < g->nconds; i++)
        if (!g->conds[i]->node) return g->conds[i];
    for (size_t i = 0; i < g->count; i++) {
        const struct work *w = g->nodes[i]->work;
        if ((w->kind == W_CHILD || w->kind == W_COND) && w->u.child.graph) {
            struct cond *c = unused_handle(w->u.child.graph);
            if (c) return c;
        }
    }
    return NULL;
}

/* `g` instantiated into `p`: each node's work copied (a child graph's and a conditional
   body's instantiated in turn), its edges as successor lists; each conditional node's
   handle added to `x`'s values. */
static void plan_build(const struct graph *g, struct plan *p, struct exec *x) {
    size_t n = g->count ? g->count : 1;
    p->count = g->count;
    p->works = xmalloc(n * sizeof *p->works);
    p->nodes = xmalloc(n * sizeof *p->nodes);
    p->indegree = xmalloc(n * sizeof *p->indegree);
    p->nsucc = xmalloc(n * sizeof *p->nsucc);
    p->succ = xmalloc(n * sizeof *p->succ);
    for (size_t i = 0; i < g->count; i++) {
        struct work *w = g->nodes[i]->work;
        struct work *c;
        if ((w->kind == W_CHILD || w->kind == W_COND) && w->u.child.graph) {
            c = xmalloc(sizeof *c);
            *c = *w;
            c->next = NULL;
            c->u.child.graph = NULL;
            c->u.child.plan = xmalloc(sizeof *c->u.child.plan);
            plan_build(w->u.child.graph, c->u.child.plan, x);
            if (w->kind == W_COND) {
                struct cond *h = (struct cond *)(uintptr_t)w->u.child.handle;
                x->conds = xrealloc(x->conds, (x->nconds + 1) * sizeof *x->conds);
                x->conds[x->nconds].handle = w->u.child.handle;
                x->conds[x->nconds].default_value = h->default_value;
                x->conds[x->nconds].flags = h->flags;
                x->conds[x->nconds].value = h->default_value;
                x->nconds++;
            }
        } else {
            c = copy_work(w);
        }
        p->works[i] = c;
        p->nodes[i] = g->nodes[i];
        p->indegree[i] = g->nodes[i]->ndeps;
        p->nsucc[i] = 0;
        p->succ[i] = NULL;
    }
    /* A node depends only on nodes added before it: its index is larger. */
    for (size_t i = 0; i < g->count; i++)
        for (size_t d = 0; d < g->nodes[i]->ndeps; d++)
            for (size_t j = 0; j < i; j++)
                if (g->nodes[j] == g->nodes[i]->deps[d]) {
                    p->succ[j] = xrealloc(p->succ[j], (p->nsucc[j] + 1) * sizeof *p->succ[j]);
                    p->succ[j][p->nsucc[j]++] = i;
                    break;
                }
}

/* The work instantiated from graph node `n` in the `count` works `works` made from the
   nodes `nodes`, or in a child graph's or conditional body's among them. */
static struct work *plan_find(size_t count, struct work **works, struct node **nodes,
                              const struct node *n) {
    for (size_t i = 0; i < count; i++) {
        if (nodes[i] == n) return works[i];
        struct plan *p = (works[i]->kind == W_CHILD || works[i]->kind == W_COND)
                             ? works[i]->u.child.plan
                             : NULL;
        struct work *w = p ? plan_find(p->count, p->works, p->nodes, n) : NULL;
        if (w) return w;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Streams, events and capture                                                          */

/* The most streams one capture holds: its origin and every stream joined to it. */
#define MAX_CAPTURE_STREAMS 64

/* A capture: begun on its origin stream, joined by every stream that waits on an event
   recorded in it (a fork), ended on the origin alone. The graph is a sequence (the
   order the calls came in, which respects every event), and a vector clock per member
   says which members' nodes its next node follows: a member whose last node the
   origin's clock does not cover at the end is unjoined. */
struct capture {
    struct stream *stream;
    struct graph *graph;
    int invalidated;
    size_t members;
    struct stream *member[MAX_CAPTURE_STREAMS];
    unsigned long long clock[MAX_CAPTURE_STREAMS][MAX_CAPTURE_STREAMS];
    /* Each member's frontier: the nodes its next node depends on (what
       cuStreamGetCaptureInfo reports for that stream). */
    size_t fcount[MAX_CAPTURE_STREAMS];
    struct node **front[MAX_CAPTURE_STREAMS];
};

struct stream {
    struct header h;
    struct ctx *ctx;
    unsigned flags;
    int is_default;
    int destroyed; /* kept after destruction: events recorded on it still name it */
    struct work *head, *tail;
    unsigned long long enqueued, done;
    int running;
    struct capture *capture;
    size_t member; /* its index among the capture's members, while it captures */
};

/* Every stream ever made (a destroyed one stays, marked). */
static struct stream **streams;
static size_t stream_len;

struct event {
    struct header h;
    struct ctx *ctx;
    unsigned flags;
    struct stream *stream; /* where it was last recorded outside a capture */
    unsigned long long ticket;
    struct capture *captured; /* the capture it was last recorded in, while it lasts */
    int captured_ever;        /* last recorded in a capture (which may have ended) */
    /* The recording member's clock when it was recorded in a capture. */
    unsigned long long clock[MAX_CAPTURE_STREAMS];
    /* And its frontier then: what a stream waiting on it in the capture follows. */
    size_t fcount;
    struct node **front;
};

static struct event **events; /* live events, to forget a capture that ends */
static size_t event_len;

static struct stream *new_stream(struct ctx *ctx, unsigned flags, int is_default) {
    struct stream *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->h.kind = K_STREAM;
    s->ctx = ctx;
    s->flags = flags;
    s->is_default = is_default;
    streams = xrealloc(streams, (stream_len + 1) * sizeof *streams);
    streams[stream_len++] = s;
    live_put(s);
    return s;
}

/* The stream a handle names: a live stream of `ctx`, or its default stream for the
   legacy and per-thread handles (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD). */
static struct stream *stream_of(CUstream h, struct ctx *ctx, CUresult *error) {
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        if (!ctx->legacy) ctx->legacy = new_stream(ctx, 0, 1);
        return ctx->legacy;
    }
    struct stream *s = handle(h, K_STREAM);
    if (!s || s->destroyed) {
        *error = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    if (s->ctx != ctx) {
        *error = CUDA_ERROR_INVALID_CONTEXT;
        return NULL;
    }
    return s;
}

static void invalidate(struct capture *c, const char *why) {
    if (!c->invalidated)
        say("the capture on stream %p is invalidated: %s", (void *)c->stream, why);
    c->invalidated = 1;
}

/* Whether any stream of `ctx` captures (its capture active or invalidated). */
static int ctx_captures(struct ctx *ctx) {
    for (size_t i = 0; i < stream_len; i++)
        if (streams[i]->ctx == ctx && !streams[i]->destroyed && streams[i]->capture) return 1;
    return 0;
}

/* A call no capture of the context may overlap happened: every capture of the context
   is invalidated. */
static void invalidate_all(struct ctx *ctx, const char *why) {
    for (size_t i = 0; i < stream_len; i++)
        if (streams[i]->ctx == ctx && streams[i]->capture) invalidate(streams[i]->capture, why);
}

static unsigned long long enqueue(struct stream *s, struct work *w) {
    w->next = NULL;
    w->ticket = ++s->enqueued;
    if (s->tail)
        s->tail->next = w;
    else
        s->head = w;
    s->tail = w;
    return w->ticket;
}

/* The kernel libraries, loaded on the first kernel run: CAPTURE_CUDA_MODEL_KERNELS is a
   colon-separated list, asked in order until one knows the entry point. */
#define MAX_KERNEL_LIBS 8
static capture_model_run_fn run_kernel_fns[MAX_KERNEL_LIBS];
static size_t run_kernel_count;
static int kernels_tried;
static char kernels_error[512];

/* The libraries' run functions (their count in *count), or NULL when one does not load. */
static capture_model_run_fn *kernels(size_t *count) {
    *count = run_kernel_count;
    if (kernels_tried) return run_kernel_count ? run_kernel_fns : NULL;
    kernels_tried = 1;
    const char *list = getenv("CAPTURE_CUDA_MODEL_KERNELS");
    if (!list || !*list) {
        snprintf(kernels_error, sizeof kernels_error,
                 "no kernel library: CAPTURE_CUDA_MODEL_KERNELS is not set");
        return NULL;
    }
    char paths[4096];
    snprintf(paths, sizeof paths, "%s", list);
    size_t n = 0;
    for (char *save = NULL, *path = strtok_r(paths, ":", &save); path;
         path = strtok_r(NULL, ":", &save)) {
        if (n == MAX_KERNEL_LIBS) {
            snprintf(kernels_error, sizeof kernels_error,
                     "CAPTURE_CUDA_MODEL_KERNELS names more than %d kernel libraries",
                     MAX_KERNEL_LIBS);
            return NULL;
        }
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            snprintf(kernels_error, sizeof kernels_error,
                     "the kernel library does not load: %s", dlerror());
            return NULL;
        }
        run_kernel_fns[n] = (capture_model_run_fn)dlsym(lib, "capture_model_run");
        if (!run_kernel_fns[n]) {
            snprintf(kernels_error, sizeof kernels_error, "%s has no capture_model_run", path);
            return NULL;
        }
        n++;
    }
    run_kernel_count = n;
    *count = n;
    return n ? run_kernel_fns : NULL;
}

static void fault(struct ctx *ctx, CUresult code, const char *format, ...) {
    char line[768];
    va_list args;
    va_start(args, format);
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    say("%s", line);
    if (!ctx->sticky) ctx->sticky = code;
}

static void run_stream(struct stream *s, unsigned long long upto);

/* A max-heap of node indices: the ready node recorded last comes out first. */
static void heap_push(size_t *heap, size_t *n, size_t v) {
    size_t i = (*n)++;
    heap[i] = v;
    while (i && heap[(i - 1) / 2] < heap[i]) {
        size_t p = (i - 1) / 2, t = heap[p];
        heap[p] = heap[i];
        heap[i] = t;
        i = p;
    }
}

static size_t heap_pop(size_t *heap, size_t *n) {
    size_t top = heap[0];
    heap[0] = heap[--*n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && heap[l] > heap[m]) m = l;
        if (r < *n && heap[r] > heap[m]) m = r;
        if (m == i) break;
        size_t t = heap[m];
        heap[m] = heap[i];
        heap[i] = t;
        i = m;
    }
    return top;
}

static void run_work(struct stream *s, struct work *w);

/* The executable whose launch runs now, for cudaGraphSetConditional from device code. */
static struct exec *running_exec;

/* The most iterations a WHILE node runs in one launch before the model calls it hung. */
#define MAX_WHILE_ITERATIONS 100000000ull

/* The `n` works `works` in an order their edges (`indegree`, `nsucc`, `succ`) allow and
   the recording's does not suggest: always the ready work recorded last. Works no edge
   orders may run in any order on a GPU; a wrong edge shows here as wrong bytes. */
static void run_nodes(struct stream *s, size_t n, struct work **works, const size_t *indegree,
                      const size_t *nsucc, size_t *const *succ) {
    size_t *waiting = xmalloc((n ? n : 1) * sizeof *waiting);
    size_t *ready = xmalloc((n ? n : 1) * sizeof *ready);
    size_t nready = 0;
    for (size_t i = 0; i < n; i++) {
        waiting[i] = indegree[i];
        if (!waiting[i]) heap_push(ready, &nready, i);
    }
    while (nready && !s->ctx->sticky) {
        size_t i = heap_pop(ready, &nready);
        run_work(s, works[i]);
        for (size_t k = 0; k < nsucc[i]; k++)
            if (--waiting[succ[i][k]] == 0) heap_push(ready, &nready, succ[i][k]);
    }
    free(waiting);
    free(ready);
}

/* The running executable's value of conditional handle `handle`, if it has one. */
static struct cond_state *cond_value(unsigned long long handle) {
    for (size_t i = 0; running_exec && i < running_exec->nconds; i++)
        if (running_exec->conds[i].handle == handle) return &running_exec->conds[i];
    return NULL;
}

/* The loop setter capture-cuda ships (kernels/loop_setter.cu), run by the model itself
   since it calls the device runtime: `*counter += 1`, then
   cudaGraphSetConditional(handle, *flag == 0 && *counter < *max). */
#define LOOP_SETTER "capture_loop_setter"

static void run_loop_setter(struct ctx *ctx, const struct work *w) {
    const struct function *f = w->u.kernel.f;
    if (f->count != 4) {
        fault(ctx, CUDA_ERROR_LAUNCH_FAILED, "%s takes 4 parameters, its image declares %u",
              LOOP_SETTER, f->count);
        return;
    }
    unsigned long long v[4];
    for (unsigned i = 0; i < 4; i++) {
        v[i] = 0;
        memcpy(&v[i], w->u.kernel.params + f->offsets[i], f->sizes[i] < 8 ? f->sizes[i] : 8);
    }
    for (unsigned i = 1; i < 4; i++)
        if (!alloc_holding((uintptr_t)v[i], 4)) {
            fault(ctx, CUDA_ERROR_ILLEGAL_ADDRESS,
                  "kernel %s faulted: parameter %u points at %#llx, not inside a live "
                  "allocation", LOOP_SETTER, i, v[i]);
            return;
        }
    unsigned flag, counter, max;
    memcpy(&flag, (void *)(uintptr_t)v[1], 4);
    memcpy(&counter, (void *)(uintptr_t)v[2], 4);
    memcpy(&max, (void *)(uintptr_t)v[3], 4);
    counter++;
    memcpy((void *)(uintptr_t)v[2], &counter, 4);
    struct cond_state *c = cond_value(v[0]);
    if (!c) {
        fault(ctx, CUDA_ERROR_LAUNCH_FAILED,
              "kernel %s set conditional handle %#llx, not one of the graph it runs in",
              LOOP_SETTER, v[0]);
        return;
    }
    c->value = flag == 0 && counter < max;
    totals.kernels_run++;
}

static void run_work(struct stream *s, struct work *w) {
    struct ctx *ctx = s->ctx;
    if (ctx->sticky) {
        /* A faulted context runs nothing more; a graph launch still lets go of its
           executable. */
        if (w->kind == W_GRAPH && --w->u.graph.exec->pending == 0 && w->u.graph.exec->destroyed)
            free_exec(w->u.graph.exec);
        return;
    }
    switch (w->kind) {
    case W_KERNEL: {
        struct function *f = w->u.kernel.f;
        if (!live_has(f) || !f->module->loaded) {
            fault(ctx, CUDA_ERROR_INVALID_HANDLE,
                  "kernel %s ran after its module was unloaded", w->u.kernel.entry);
            return;
        }
        if (w->u.kernel.programmatic && !f->waits_for_grid) {
            /* Started while its predecessor finishes, a kernel that never waits for its
               grid dependency reads bytes not yet written: on a GPU wrong results, here
               a fault naming it. */
            fault(ctx, CUDA_ERROR_ILLEGAL_INSTRUCTION,
                  "kernel %s was launched programmatically, but its code never waits for "
                  "its grid dependency (griddepcontrol.wait): it may read its "
                  "predecessor's outputs before they are written",
                  f->name);
            return;
        }
        if (!strcmp(f->name, LOOP_SETTER)) {
            run_loop_setter(ctx, w);
            return;
        }
        size_t libs;
        capture_model_run_fn *run = kernels(&libs);
        if (!run) {
            fault(ctx, CUDA_ERROR_LAUNCH_FAILED, "kernel %s cannot run: %s", f->name,
                  kernels_error);
            return;
        }
        struct capture_model_launch launch = {
            .entry = f->name,
            .grid = {w->u.kernel.grid[0], w->u.kernel.grid[1], w->u.kernel.grid[2]},
            .block = {w->u.kernel.block[0], w->u.kernel.block[1], w->u.kernel.block[2]},
            .shared_bytes = w->u.kernel.shared,
            .param_count = f->count,
            .params = w->u.kernel.params,
            .param_offsets = f->offsets,
            .param_sizes = f->sizes,
            .inside = inside,
        };
        char error[512] = "";
        int ran = CAPTURE_MODEL_UNKNOWN;
        for (size_t i = 0; i < libs && ran == CAPTURE_MODEL_UNKNOWN; i++)
            ran = run[i](&launch, error, sizeof error);
        totals.kernels_run++;
        if (w->u.kernel.programmatic) totals.programmatic_kernels_run++;
        if (ran == CAPTURE_MODEL_UNKNOWN)
            fault(ctx, CUDA_ERROR_LAUNCH_FAILED, "kernel %s has no host implementation: %s",
                  f->name, error);
        else if (ran != CAPTURE_MODEL_RAN)
            fault(ctx, CUDA_ERROR_ILLEGAL_ADDRESS, "kernel %s faulted: %s", f->name, error);
        return;
    }
    case W_HTOD:
        if (!alloc_holding(w->u.copy.device, w->u.copy.bytes) ||
            (w->u.copy.pinned && !alloc_holding((uintptr_t)w->u.copy.host, w->u.copy.bytes))) {
            fault(ctx, CUDA_ERROR_ILLEGAL_ADDRESS,
                  "a host-to-device copy of %zu bytes touches freed memory", w->u.copy.bytes);
            return;
        }
        memcpy((void *)w->u.copy.device, w->u.copy.host, w->u.copy.bytes);
        return;
    case W_DTOH:
        if (!alloc_holding(w->u.copy.device, w->u.copy.bytes) ||
            (w->u.copy.pinned && !alloc_holding((uintptr_t)w->u.copy.host, w->u.copy.bytes))) {
            fault(ctx, CUDA_ERROR_ILLEGAL_ADDRESS,
                  "a device-to-host copy of %zu bytes touches freed memory", w->u.copy.bytes);
            return;
        }
        memcpy(w->u.copy.host, (void *)w->u.copy.device, w->u.copy.bytes);
        return;
    case W_WAIT: {
        struct stream *other = w->u.wait.stream;
        if (other->running && other->done < w->u.wait.ticket) {
            fault(ctx, CUDA_ERROR_LAUNCH_TIMEOUT,
                  "streams %p and %p wait for each other", (void *)s, (void *)other);
            return;
        }
        run_stream(other, w->u.wait.ticket);
        return;
    }
    case W_RECORD:
        return;
    case W_MEMSET: {
        size_t bytes = w->u.memset.width * w->u.memset.elem_size;
        if (!alloc_holding(w->u.memset.device, bytes)) {
            fault(ctx, CUDA_ERROR_ILLEGAL_ADDRESS,
                  "a memset of %zu bytes touches memory outside a live allocation", bytes);
            return;
        }
        unsigned char *d = (unsigned char *)w->u.memset.device;
        for (size_t i = 0; i < w->u.memset.width; i++)
            for (unsigned b = 0; b < w->u.memset.elem_size; b++)
                d[i * w->u.memset.elem_size + b] = (unsigned char)(w->u.memset.value >> (8 * b));
        return;
    }
    case W_CHILD: {
        const struct plan *p = w->u.child.plan;
        run_nodes(s, p->count, p->works, p->indegree, p->nsucc, p->succ);
        return;
    }
    case W_COND: {
        /* WHILE: the body runs as long as the handle's value is non-zero, checked before
           each iteration (the first included). */
        const struct plan *p = w->u.child.plan;
        struct cond_state *c = cond_value(w->u.child.handle);
        unsigned long long iterations = 0;
        while (c && c->value && !ctx->sticky) {
            if (++iterations > MAX_WHILE_ITERATIONS) {
                fault(ctx, CUDA_ERROR_LAUNCH_TIMEOUT,
                      "a WHILE node ran %llu iterations: its condition is never cleared",
                      MAX_WHILE_ITERATIONS);
                return;
            }
            run_nodes(s, p->count, p->works, p->indegree, p->nsucc, p->succ);
        }
        return;
    }
    case W_GRAPH: {
        /* The nodes in an order the graph's edges allow and the recording's does not
           suggest; each conditional handle set to its default first where its flags say
           so (CU_GRAPH_COND_ASSIGN_DEFAULT). */
        struct exec *x = w->u.graph.exec;
        for (size_t i = 0; i < x->nconds; i++)
            if (x->conds[i].flags & CU_GRAPH_COND_ASSIGN_DEFAULT)
                x->conds[i].value = x->conds[i].default_value;
        struct exec *outer = running_exec;
        running_exec = x;
        run_nodes(s, w->u.graph.count, w->u.graph.works, x->indegree, x->nsucc, x->succ);
        running_exec = outer;
        totals.graphs_launched++;
        x->pending--;
        if (x->destroyed && !x->pending) free_exec(x);
        return;
    }
    }
}

/* Runs `s`'s queued work up to ticket `upto`. */
static void run_stream(struct stream *s, unsigned long long upto) {
    if (s->running) return;
    s->running = 1;
    while (s->head && s->done < upto) {
        struct work *w = s->head;
        s->head = w->next;
        if (!s->head) s->tail = NULL;
        run_work(s, w);
        s->done = w->ticket;
        free_work(w);
    }
    if (!s->head) s->done = s->enqueued;
    s->running = 0;
}

/* Runs every stream of `ctx` to its end (what a free or a context synchronisation
   waits for). */
static void run_all(struct ctx *ctx) {
    for (size_t i = 0; i < stream_len; i++)
        if (streams[i]->ctx == ctx) run_stream(streams[i], streams[i]->enqueued);
}

/* Where work for `s` goes: its queue, or its capture's graph. CUDA_SUCCESS with
   `*graph` set while it captures. */
static CUresult target(struct stream *s, struct graph **graph) {
    *graph = NULL;
    if (s->capture) {
        if (s->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        *graph = s->capture->graph;
    }
    return CUDA_SUCCESS;
}

/* A node `s` added to its capture: what its member has recorded grows. */
static void captured_node(struct stream *s) {
    s->capture->clock[s->member][s->member]++;
}

/* Member `m`'s frontier becomes the `n` nodes `nodes` (copied). */
static void front_set(struct capture *cap, size_t m, struct node **nodes, size_t n) {
    cap->front[m] = xrealloc(cap->front[m], (n ? n : 1) * sizeof *cap->front[m]);
    if (n) memcpy(cap->front[m], nodes, n * sizeof *nodes);
    cap->fcount[m] = n;
}

/* Member `m`'s frontier gains the `n` nodes `nodes` it does not hold yet. */
static void front_add(struct capture *cap, size_t m, struct node **nodes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int held = 0;
        for (size_t k = 0; k < cap->fcount[m] && !held; k++) held = cap->front[m][k] == nodes[i];
        if (held) continue;
        cap->front[m] = xrealloc(cap->front[m], (cap->fcount[m] + 1) * sizeof *cap->front[m]);
        cap->front[m][cap->fcount[m]++] = nodes[i];
    }
}

/* Adds `w` to `s`'s capture after `s`'s frontier, which becomes the new node. */
static void capture_add(struct stream *s, struct work *w) {
    struct capture *cap = s->capture;
    size_t m = s->member;
    int programmatic = w->kind == W_KERNEL && w->u.kernel.programmatic;
    struct node *n = graph_add(cap->graph, w, cap->front[m], cap->fcount[m], programmatic);
    front_set(cap, m, &n, 1);
    captured_node(s);
}

static void free_capture(struct capture *cap) {
    for (size_t j = 0; j < MAX_CAPTURE_STREAMS; j++) free(cap->front[j]);
    free(cap);
}

static CUresult submit(struct stream *s, struct work *w) {
    struct graph *g;
    CUresult r = target(s, &g);
    if (r) {
        free_work(w);
        return r;
    }
    if (g)
        capture_add(s, w);
    else
        enqueue(s, w);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------------- */
/* The API: initialisation, device, contexts                                            */

CUresult CUDAAPI cuInit(unsigned int Flags) {
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    lock();
    if (!initialized) {
        const char *v = getenv("CAPTURE_CUDA_MODEL_VERSION");
        if (v && atoi(v) > 0) driver_version = atoi(v);
        const char *m = getenv("CAPTURE_CUDA_MODEL_MEMORY");
        if (m && strtoull(m, NULL, 10) > 0) memory_limit = strtoull(m, NULL, 10);
        initialized = 1;
    }
    unlock();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = driver_version;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", MODEL_NAME);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)memory_limit;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *pi = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *pi = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *pi = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *pi = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *pi = SHARED_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *pi = SHARED_OPTIN; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *pi = 0; break;
    default:
        if ((int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
        *pi = 0;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    lock();
    if (primary_ctx.retains++ == 0) {
        primary_ctx.active = 1;
        primary_ctx.sticky = CUDA_SUCCESS;
        live_put(&primary_ctx);
        totals.contexts++;
    }
    *pctx = (CUcontext)&primary_ctx;
    unlock();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    lock();
    CUresult r = CUDA_SUCCESS;
    if (primary_ctx.retains == 0) {
        r = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--primary_ctx.retains == 0) {
        /* Destroyed: what was made in it and never destroyed stays counted. */
        run_all(&primary_ctx);
        primary_ctx.active = 0;
        totals.contexts--;
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    (void)flags;
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    lock();
    struct ctx *c = xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->h.kind = K_CTX;
    c->active = 1;
    live_put(c);
    totals.contexts++;
    totals.context_switches++;
    current = c;
    *pctx = (CUcontext)c;
    unlock();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) {
    lock();
    struct ctx *c = handle(ctx, K_CTX);
    CUresult r = CUDA_SUCCESS;
    if (!c || !c->active || c->primary) {
        r = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        run_all(c);
        c->active = 0;
        live_remove(c);
        totals.contexts--;
        if (current == c) current = NULL;
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)current;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx) {
        current = NULL;
        return CUDA_SUCCESS;
    }
    lock();
    struct ctx *c = handle(ctx, K_CTX);
    if (c && c->active && c != current) totals.context_switches++;
    unlock();
    if (!c || !c->active) return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    unlock();
    if (!c) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    if (c) {
        if (ctx_captures(c)) {
            invalidate_all(c, "cuCtxSynchronize");
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            run_all(c);
            r = c->sticky;
        }
    }
    unlock();
    return r;
}

/* ---------------------------------------------------------------------------------- */
/* Streams                                                                              */

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    if (!phStream || (Flags & ~CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    if (c) {
        *phStream = (CUstream)new_stream(c, Flags, 0);
        totals.streams++;
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags) {
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    if (s) *flags = s->flags;
    unlock();
    return s ? CUDA_SUCCESS : r;
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct stream *s = handle(hStream, K_STREAM);
    if (s && !s->destroyed && s->ctx->active) {
        *pctx = (CUcontext)s->ctx;
    } else if (!s && (hStream == NULL || hStream == CU_STREAM_LEGACY ||
                      hStream == CU_STREAM_PER_THREAD)) {
        struct ctx *c = current_ctx(&r);
        if (c) *pctx = (CUcontext)c;
    } else {
        r = CUDA_ERROR_INVALID_HANDLE;
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    if (s && s->is_default) {
        r = CUDA_ERROR_INVALID_HANDLE;
        s = NULL;
    }
    if (s) {
        if (s->capture) {
            invalidate(s->capture, "cuStreamDestroy of the capturing stream");
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            /* Its work still runs; its resources go once it has. */
            run_stream(s, s->enqueued);
            s->destroyed = 1;
            live_remove(s);
            totals.streams--;
            r = CUDA_SUCCESS;
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    if (s) {
        if (s->capture) {
            invalidate(s->capture, "cuStreamSynchronize of the capturing stream");
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            run_stream(s, s->enqueued);
            r = c->sticky;
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    if (s) {
        if (s->capture) {
            invalidate(s->capture, "cuStreamQuery of the capturing stream");
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            /* Observed work has run: the model runs it when asked. */
            run_stream(s, s->enqueued);
            r = c->sticky;
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
    if (Flags & ~CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    struct event *e = s ? handle(hEvent, K_EVENT) : NULL;
    if (s && !e) r = CUDA_ERROR_INVALID_HANDLE;
    if (s && e) {
        if (s->capture) {
            if (s->capture->invalidated) {
                r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            } else if (e->captured != s->capture) {
                invalidate(s->capture, "a wait on an event recorded outside the capture");
                r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
            } else {
                /* An event of the same capture: the linear graph has the order already;
                   the member now follows what the event's recorder had recorded. */
                struct capture *cap = s->capture;
                for (size_t k = 0; k < cap->members; k++)
                    if (e->clock[k] > cap->clock[s->member][k])
                        cap->clock[s->member][k] = e->clock[k];
                /* Its next node depends on what the recorder's did too. */
                front_add(cap, s->member, e->front, e->fcount);
            }
        } else if (e->captured && e->captured->invalidated) {
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else if (e->captured) {
            /* A fork: the stream joins the capture the event was recorded in. */
            struct capture *cap = e->captured;
            if (cap->members == MAX_CAPTURE_STREAMS) {
                say("a capture holds at most %d streams", MAX_CAPTURE_STREAMS);
                invalidate(cap, "too many streams joined the capture");
                r = CUDA_ERROR_NOT_SUPPORTED;
            } else {
                size_t j = cap->members++;
                cap->member[j] = s;
                s->capture = cap;
                s->member = j;
                memcpy(cap->clock[j], e->clock, sizeof cap->clock[j]);
                /* Joined, it is a branch the origin must join back before the end. */
                cap->clock[j][j] = 1;
                /* Its first node depends on what the recorder's frontier was. */
                front_set(cap, j, e->front, e->fcount);
            }
        } else if (e->captured_ever) {
            /* Recorded in a capture that has ended. */
            r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        } else if (e->stream && e->stream != s) {
            struct work *w = xmalloc(sizeof *w);
            memset(w, 0, sizeof *w);
            w->kind = W_WAIT;
            w->u.wait.stream = e->stream;
            w->u.wait.ticket = e->ticket;
            enqueue(s, w);
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    if (s && s->is_default) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (s && s->capture) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (s) {
        struct capture *cap = xmalloc(sizeof *cap);
        struct graph *g = xmalloc(sizeof *g);
        memset(g, 0, sizeof *g);
        g->h.kind = K_GRAPH;
        g->ctx = c;
        memset(cap, 0, sizeof *cap);
        cap->stream = s;
        cap->graph = g;
        cap->invalidated = 0;
        cap->members = 1;
        cap->member[0] = s;
        s->capture = cap;
        s->member = 0;
    }
    unlock();
    return r;
}

/* A capture ends: events recorded in it are no longer in a live capture. */
static void forget_capture(struct capture *cap) {
    for (size_t i = 0; i < event_len; i++)
        if (events[i]->captured == cap) {
            events[i]->captured = NULL;
            events[i]->fcount = 0; /* its nodes go with the capture's graph */
        }
}

/* A member `j` of `cap` left unjoined at the end: it stays in a capture of its own,
   invalidated, until its own cuStreamEndCapture (the driver documents no release of a
   joined stream by the origin's end), as CUDA leaves work nobody joined. */
static void orphan(struct capture *cap, size_t j) {
    struct stream *s = cap->member[j];
    struct capture *alone = xmalloc(sizeof *alone);
    struct graph *g = xmalloc(sizeof *g);
    memset(alone, 0, sizeof *alone);
    memset(g, 0, sizeof *g);
    g->h.kind = K_GRAPH;
    g->ctx = cap->graph->ctx;
    alone->stream = s;
    alone->graph = g;
    alone->invalidated = 1;
    alone->members = 1;
    alone->member[0] = s;
    s->capture = alone;
    s->member = 0;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    if (s && !s->capture) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (s && s->capture->stream != s) {
        /* A stream joined to another's capture: only the origin ends it. */
        invalidate(s->capture, "cuStreamEndCapture on a stream joined to the capture");
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    } else if (s) {
        struct capture *cap = s->capture;
        size_t unjoined = 0;
        for (size_t j = 1; j < cap->members; j++)
            if (cap->clock[0][j] < cap->clock[j][j] && !unjoined) unjoined = j;
        for (size_t j = 0; j < cap->members; j++) {
            /* An invalidated capture releases every member (its end is the error); a
               valid one refused as unjoined leaves the unjoined ones behind. */
            if (j && !cap->invalidated && cap->clock[0][j] < cap->clock[j][j])
                orphan(cap, j);
            else
                cap->member[j]->capture = NULL;
        }
        forget_capture(cap);
        if (cap->invalidated) {
            free_graph(cap->graph);
            *phGraph = NULL;
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else if (unjoined) {
            say("the capture on stream %p ends with stream %p unjoined", (void *)s,
                (void *)cap->member[unjoined]);
            free_graph(cap->graph);
            *phGraph = NULL;
            r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
        } else {
            live_put(cap->graph);
            totals.graphs++;
            *phGraph = (CUgraph)cap->graph;
        }
        free_capture(cap);
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    if (s) {
        if (!s->capture)
            *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        else if (s->capture->invalidated)
            *captureStatus = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        else
            *captureStatus = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    }
    unlock();
    return s ? CUDA_SUCCESS : r;
}

/* The stream's capture: its status, id, graph, and the stream's frontier (the nodes its
   next node will depend on: after a kernel launch, that launch's node; after a wait on an
   event of the capture, the recorder's too). The array lives until the next call that
   changes the stream's frontier. */
CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out,
                                        size_t *numDependencies_out) {
    if (!captureStatus_out) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    if (s) {
        struct capture *cap = s->capture;
        if (cap) totals.capture_info_calls++;
        *captureStatus_out = !cap ? CU_STREAM_CAPTURE_STATUS_NONE
                             : cap->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                : CU_STREAM_CAPTURE_STATUS_ACTIVE;
        if (id_out) *id_out = (cuuint64_t)(uintptr_t)cap;
        if (graph_out) *graph_out = cap ? (CUgraph)cap->graph : NULL;
        /* This stream's frontier: what its next node will depend on. */
        size_t n = cap ? cap->fcount[s->member] : 0;
        if (dependencies_out)
            *dependencies_out = n ? (const CUgraphNode *)cap->front[s->member] : NULL;
        if (numDependencies_out) *numDependencies_out = n;
    }
    unlock();
    return s ? CUDA_SUCCESS : r;
}

/* ---------------------------------------------------------------------------------- */
/* Memory                                                                               */

static CUresult allocate(size_t bytes, int host, void **out) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    if (c) {
        unsigned long long *used = host ? &host_bytes : &device_bytes;
        if (bytes == 0) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (bytes > memory_limit || *used + bytes > memory_limit) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            size_t padded = (bytes + 255) / 256 * 256;
            void *p = aligned_alloc(256, padded);
            if (!p) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                memset(p, FRESH, padded);
                struct allocation a = {(uintptr_t)p, bytes, host, c};
                alloc_insert(a);
                *used += bytes;
                if (host)
                    totals.host_allocations++;
                else
                    totals.device_allocations++;
                *out = p;
            }
        }
    }
    unlock();
    return r;
}

/* Frees an allocation: what is queued in the context runs first, as the driver's free
   synchronises; refused, invalidating every capture of the context, while one is open. */
static CUresult release(uintptr_t base, int host, const char *op) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    if (c) {
        struct allocation a = {0};
        size_t i = alloc_search(base);
        if (i == 0 || allocs[i - 1].base != base || allocs[i - 1].host != host) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (ctx_captures(c)) {
            char why[64];
            snprintf(why, sizeof why, "%s during stream capture", op);
            invalidate_all(c, why);
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            run_all(c);
            alloc_remove(base, host, &a);
            if (host) {
                host_bytes -= a.size;
                totals.host_allocations--;
            } else {
                device_bytes -= a.size;
                totals.device_allocations--;
            }
            free((void *)base);
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    CUresult r = allocate(bytesize, 0, &p);
    if (!r) *dptr = (CUdeviceptr)(uintptr_t)p;
    return r;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) { return release((uintptr_t)dptr, 0, "cuMemFree"); }

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
    if (!pp || (Flags & ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                          CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    return allocate(bytesize, 1, pp);
}

CUresult CUDAAPI cuMemFreeHost(void *p) { return release((uintptr_t)p, 1, "cuMemFreeHost"); }

/* A copy between `host` and device memory at `device`, on `hStream`. */
static CUresult copy(int to_device, uintptr_t device, void *host, size_t bytes, CUstream hStream) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    if (!s) goto out;
    struct allocation *d = alloc_holding(device, bytes);
    struct allocation *h = alloc_holding((uintptr_t)host, bytes);
    if (!d || d->host || !host) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    int pinned = h && h->host;
    if (!pinned && s->capture) {
        if (!s->capture->invalidated) {
            invalidate(s->capture, "a copy from or to pageable host memory");
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        }
        goto out;
    }
    struct work *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->kind = to_device ? W_HTOD : W_DTOH;
    w->u.copy.device = device;
    w->u.copy.bytes = bytes;
    w->u.copy.host = host;
    w->u.copy.pinned = pinned;
    if (!pinned && to_device) {
        /* Pageable bytes are staged at the call: the caller may reuse them at once. */
        w->u.copy.owned = xmalloc(bytes);
        memcpy(w->u.copy.owned, host, bytes);
        w->u.copy.host = w->u.copy.owned;
    }
    r = submit(s, w);
    if (!r && !pinned && !to_device) {
        /* To pageable memory the copy is synchronous: it has landed on return. */
        run_stream(s, s->enqueued);
        r = c->sticky;
    }
out:
    unlock();
    return r;
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream) {
    return copy(1, (uintptr_t)dstDevice, (void *)srcHost, ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream) {
    return copy(0, (uintptr_t)srcDevice, dstHost, ByteCount, hStream);
}

/* ---------------------------------------------------------------------------------- */
/* Events                                                                               */

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    if (!phEvent || (Flags & ~(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                               CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    if (c) {
        struct event *e = xmalloc(sizeof *e);
        memset(e, 0, sizeof *e);
        e->h.kind = K_EVENT;
        e->ctx = c;
        e->flags = Flags;
        live_put(e);
        events = xrealloc(events, (event_len + 1) * sizeof *events);
        events[event_len++] = e;
        totals.events++;
        *phEvent = (CUevent)e;
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    struct event *e = s ? handle(hEvent, K_EVENT) : NULL;
    if (s && !e) r = CUDA_ERROR_INVALID_HANDLE;
    if (s && e) {
        if (s->capture) {
            if (s->capture->invalidated) {
                r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            } else {
                struct capture *cap = s->capture;
                e->captured = cap;
                e->captured_ever = 1;
                e->stream = NULL;
                memcpy(e->clock, cap->clock[s->member], sizeof e->clock);
                size_t n = cap->fcount[s->member];
                e->front = xrealloc(e->front, (n ? n : 1) * sizeof *e->front);
                if (n) memcpy(e->front, cap->front[s->member], n * sizeof *e->front);
                e->fcount = n;
            }
        } else {
            struct work *w = xmalloc(sizeof *w);
            memset(w, 0, sizeof *w);
            w->kind = W_RECORD;
            e->stream = s;
            e->ticket = enqueue(s, w);
            e->captured = NULL;
            e->captured_ever = 0;
            e->fcount = 0;
        }
    }
    unlock();
    return r;
}

/* An event last recorded in a capture cannot be waited for from outside it. */
static CUresult event_wait(struct event *e, const char *op) {
    if (e->captured_ever) {
        if (e->captured) invalidate(e->captured, op);
        return CUDA_ERROR_CAPTURED_EVENT;
    }
    if (e->stream) run_stream(e->stream, e->ticket);
    return e->ctx->sticky;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct event *e = handle(hEvent, K_EVENT);
    if (!initialized)
        r = CUDA_ERROR_NOT_INITIALIZED;
    else if (!e)
        r = CUDA_ERROR_INVALID_HANDLE;
    else
        r = event_wait(e, "cuEventSynchronize of an event recorded in the capture");
    unlock();
    return r;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct event *e = handle(hEvent, K_EVENT);
    if (!initialized)
        r = CUDA_ERROR_NOT_INITIALIZED;
    else if (!e)
        r = CUDA_ERROR_INVALID_HANDLE;
    else
        r = event_wait(e, "cuEventQuery of an event recorded in the capture");
    unlock();
    return r;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct event *e = handle(hEvent, K_EVENT);
    if (!e) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        /* A wait already enqueued names the stream and place, not the event. */
        live_remove(e);
        for (size_t i = 0; i < event_len; i++)
            if (events[i] == e) events[i] = events[--event_len];
        totals.events--;
        free(e->front);
        free(e);
    }
    unlock();
    return r;
}

/* ---------------------------------------------------------------------------------- */
/* Modules, functions, launches                                                         */

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    if (!c) goto out;
    if (ctx_captures(c)) {
        invalidate_all(c, "cuModuleLoadData during stream capture");
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        goto out;
    }
    struct module *m = xmalloc(sizeof *m);
    memset(m, 0, sizeof *m);
    m->h.kind = K_MODULE;
    m->ctx = c;
    const unsigned char *d = image;
    if (d[0] == 0x7f && d[1] == 'E' && d[2] == 'L' && d[3] == 'F')
        r = load_cubin(m, d);
    else
        r = load_ptx(m, image);
    if (r) {
        free_module(m);
        free(m);
        goto out;
    }
    m->loaded = 1;
    for (size_t i = 0; i < m->count; i++) live_put(m->functions[i]);
    live_put(m);
    totals.modules++;
    *module = (CUmodule)m;
out:
    unlock();
    return r;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct module *m = c ? handle(hmod, K_MODULE) : NULL;
    if (c && !m) r = CUDA_ERROR_INVALID_HANDLE;
    if (m) {
        r = CUDA_ERROR_NOT_FOUND;
        for (size_t i = 0; i < m->count; i++)
            if (!strcmp(m->functions[i]->name, name)) {
                *hfunc = (CUfunction)m->functions[i];
                r = CUDA_SUCCESS;
            }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct module *m = c ? handle(hmod, K_MODULE) : NULL;
    if (c && !m) r = CUDA_ERROR_INVALID_HANDLE;
    if (m) {
        if (ctx_captures(c)) {
            invalidate_all(c, "cuModuleUnload during stream capture");
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            /* A launch still queued finds its module gone and faults. */
            m->loaded = 0;
            free_module(m);
            live_remove(m);
            totals.modules--;
            free(m);
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct function *f = handle(func, K_FUNCTION);
    if (!f)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (paramIndex >= f->count)
        r = CUDA_ERROR_INVALID_VALUE;
    else {
        if (paramOffset) *paramOffset = f->offsets[paramIndex];
        if (paramSize) *paramSize = f->sizes[paramIndex];
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct function *f = handle(hfunc, K_FUNCTION);
    if (!f)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (value < 0 || value > SHARED_OPTIN)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            f->max_dynamic_shared = value;
    } else if (attrib != CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct function *f = handle(hfunc, K_FUNCTION);
    if (!f) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        switch (attrib) {
        case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
        case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
        case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_shared; break;
        case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
        case CU_FUNC_ATTRIBUTE_PTX_VERSION:
        case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
        default: *pi = 0;
        }
    }
    unlock();
    return r;
}

/* A kernel launch, eager or captured; `programmatic` as its launch attributes said. */
static CUresult launch_kernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                              unsigned int gridDimZ, unsigned int blockDimX,
                              unsigned int blockDimY, unsigned int blockDimZ,
                              unsigned int sharedMemBytes, CUstream hStream,
                              void **kernelParams, void **extra, int programmatic) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    struct function *fn = s ? handle(f, K_FUNCTION) : NULL;
    if (!s) goto out;
    if (!fn || !fn->module->loaded) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (fn->module->ctx != c) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    unsigned long long threads = (unsigned long long)blockDimX * blockDimY * blockDimZ;
    if (!gridDimX || !gridDimY || !gridDimZ || !threads || extra ||
        (fn->count && !kernelParams)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (threads > 1024 || blockDimX > 1024 || blockDimY > 1024 || blockDimZ > 64 ||
        gridDimY > 65535 || gridDimZ > 65535 || gridDimX > 2147483647u ||
        sharedMemBytes > (unsigned)fn->max_dynamic_shared) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct work *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->kind = W_KERNEL;
    w->u.kernel.f = fn;
    w->u.kernel.entry = xstrdup(fn->name);
    w->u.kernel.param_bytes = fn->param_bytes;
    w->u.kernel.grid[0] = gridDimX;
    w->u.kernel.grid[1] = gridDimY;
    w->u.kernel.grid[2] = gridDimZ;
    w->u.kernel.block[0] = blockDimX;
    w->u.kernel.block[1] = blockDimY;
    w->u.kernel.block[2] = blockDimZ;
    w->u.kernel.shared = sharedMemBytes;
    w->u.kernel.programmatic = programmatic;
    /* The driver copies the arguments at the call. */
    w->u.kernel.params = xmalloc(fn->param_bytes);
    memset(w->u.kernel.params, 0, fn->param_bytes);
    for (unsigned i = 0; i < fn->count; i++) {
        if (!kernelParams[i]) {
            free_work(w);
            r = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        memcpy(w->u.kernel.params + fn->offsets[i], kernelParams[i], fn->sizes[i]);
    }
    r = submit(s, w);
out:
    unlock();
    return r;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra) {
    return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                         sharedMemBytes, hStream, kernelParams, extra, 0);
}

/* cuLaunchKernelEx: the launch's attributes read and validated first, then the launch
   as cuLaunchKernel makes it. */
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                  void **kernelParams, void **extra) {
    if (!config || (config->numAttrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
    int programmatic = 0;
    for (unsigned i = 0; i < config->numAttrs; i++) {
        const CUlaunchAttribute *a = &config->attrs[i];
        switch (a->id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE: break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            /* Non-zero allows the overlap (cuda.h); any value is valid. */
            programmatic = a->value.programmaticStreamSerializationAllowed != 0;
            break;
        default:
            /* The last id cuda.h declares outside NVIDIA's own builds (its
               CU_LAUNCH_ATTRIBUTE_MAX is internal). */
            if ((int)a->id < 0 || a->id > CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)
                return CUDA_ERROR_INVALID_VALUE;
            say("cuLaunchKernelEx: the model does not model launch attribute %d", (int)a->id);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    return launch_kernel(f, config->gridDimX, config->gridDimY, config->gridDimZ,
                         config->blockDimX, config->blockDimY, config->blockDimZ,
                         config->sharedMemBytes, config->hStream, kernelParams, extra,
                         programmatic);
}

/* ---------------------------------------------------------------------------------- */
/* Graphs                                                                               */

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
    if (!numNodes) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct graph *g = handle(hGraph, K_GRAPH);
    if (!g) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (!nodes) {
        *numNodes = g->count;
    } else {
        size_t n = *numNodes < g->count ? *numNodes : g->count;
        for (size_t i = 0; i < *numNodes; i++) nodes[i] = i < n ? (CUgraphNode)g->nodes[i] : NULL;
        *numNodes = n;
    }
    unlock();
    return r;
}

/* The graph's edges, one per dependency of each node, in node order: from, to, and (with
   `edgeData`) their type (programmatic from a kernel node before a programmatic launch,
   else the default). With `from` NULL, their count alone. */
CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                    CUgraphEdgeData *edgeData, size_t *numEdges) {
    if (!numEdges || (!from != !to)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct graph *g = handle(hGraph, K_GRAPH);
    if (!g) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        size_t total = 0, written = 0;
        for (size_t i = 0; i < g->count; i++) {
            struct node *n = g->nodes[i];
            for (size_t d = 0; d < n->ndeps; d++, total++) {
                if (!from || written == *numEdges) continue;
                from[written] = (CUgraphNode)n->deps[d];
                to[written] = (CUgraphNode)n;
                if (edgeData) {
                    memset(&edgeData[written], 0, sizeof edgeData[written]);
                    edgeData[written].type = n->dep_type[d];
                }
                written++;
            }
        }
        if (from) {
            /* Entries past the edges are zeroed, as cuda.h documents. */
            for (size_t i = written; i < *numEdges; i++) {
                from[i] = NULL;
                to[i] = NULL;
                if (edgeData) memset(&edgeData[i], 0, sizeof edgeData[i]);
            }
            *numEdges = written;
        } else {
            *numEdges = total;
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
    if (!type) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct node *n = handle(hNode, K_NODE);
    if (!n) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        switch (n->work->kind) {
        case W_KERNEL: *type = CU_GRAPH_NODE_TYPE_KERNEL; break;
        case W_HTOD:
        case W_DTOH: *type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
        case W_GRAPH:
        case W_CHILD: *type = CU_GRAPH_NODE_TYPE_GRAPH; break;
        case W_MEMSET: *type = CU_GRAPH_NODE_TYPE_MEMSET; break;
        case W_COND: *type = CU_GRAPH_NODE_TYPE_CONDITIONAL; break;
        default: *type = CU_GRAPH_NODE_TYPE_EMPTY;
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct graph *g = handle(hGraph, K_GRAPH);
    if (!g) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (g->owner) {
        /* A child graph node's graph or a conditional node's body: the node owns it. */
        say("cuGraphDestroy: the graph is owned by a node of another graph");
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        totals.graphs--;
        free_graph(g);
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    if (c) {
        struct graph *g = xmalloc(sizeof *g);
        memset(g, 0, sizeof *g);
        g->h.kind = K_GRAPH;
        g->ctx = c;
        live_put(g);
        totals.graphs++;
        *phGraph = (CUgraph)g;
    }
    unlock();
    return r;
}

/* Conditional nodes came with CUDA 12.3 (cuGraphConditionalHandleCreate, the node type
   in cuGraphAddNode); a driver claiming an older version has none. */
#define CONDITIONAL_DRIVER 12030

CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out,
                                                CUgraph hGraph, CUcontext ctx,
                                                unsigned int defaultLaunchValue,
                                                unsigned int flags) {
    if (driver_version < CONDITIONAL_DRIVER) {
        say("cuGraphConditionalHandleCreate: the driver claims CUDA %d.%d, before conditional "
            "nodes", driver_version / 1000, driver_version % 1000 / 10);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (!pHandle_out || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct graph *g = c ? handle(hGraph, K_GRAPH) : NULL;
    struct ctx *on = c ? handle(ctx, K_CTX) : NULL;
    if (c && (!g || !on)) r = CUDA_ERROR_INVALID_VALUE;
    if (g && on && on != g->ctx) r = CUDA_ERROR_INVALID_VALUE;
    if (g && on && !r) {
        struct cond *h = xmalloc(sizeof *h);
        memset(h, 0, sizeof *h);
        h->h.kind = K_COND;
        h->ctx = on;
        h->graph = g;
        h->default_value = defaultLaunchValue;
        h->flags = flags;
        g->conds = xrealloc(g->conds, (g->nconds + 1) * sizeof *g->conds);
        g->conds[g->nconds++] = h;
        live_put(h);
        *pHandle_out = (CUgraphConditionalHandle)(uintptr_t)h;
    }
    unlock();
    return r;
}

/* Whether every node of `g`, and of the graphs nested in it, is of a type cuda.h allows
   in a conditional body (kernels, empty nodes, child graphs, memsets, memcopies,
   conditionals). */
static int body_allows(const struct graph *g) {
    for (size_t i = 0; i < g->count; i++) {
        const struct work *w = g->nodes[i]->work;
        switch (w->kind) {
        case W_KERNEL:
        case W_HTOD:
        case W_DTOH:
        case W_MEMSET: break;
        case W_CHILD:
        case W_COND:
            if (!body_allows(w->u.child.graph)) return 0;
            break;
        default: return 0;
        }
    }
    return 1;
}

/* Whether every kernel of `g`, and of the graphs nested in it, belongs to `ctx`. */
static int kernels_of(const struct graph *g, const struct ctx *ctx) {
    for (size_t i = 0; i < g->count; i++) {
        const struct work *w = g->nodes[i]->work;
        if (w->kind == W_KERNEL && w->u.kernel.f->module->ctx != ctx) return 0;
        if ((w->kind == W_CHILD || w->kind == W_COND) && !kernels_of(w->u.child.graph, ctx))
            return 0;
    }
    return 1;
}

/* A copy of `src`, owned by node `owner`, its nodes in the same order with the same
   edges (a child graph node's clone). */
static struct graph *clone_graph(const struct graph *src, struct node *owner, int body) {
    struct graph *g = xmalloc(sizeof *g);
    memset(g, 0, sizeof *g);
    g->h.kind = K_GRAPH;
    g->ctx = src->ctx;
    g->owner = owner;
    g->body = body;
    live_put(g);
    struct node **deps = NULL;
    for (size_t i = 0; i < src->count; i++) {
        const struct node *from = src->nodes[i];
        struct work *w;
        if (from->work->kind == W_CHILD) {
            w = xmalloc(sizeof *w);
            *w = *from->work;
            w->next = NULL;
            w->u.child.graph = NULL; /* set below, once the node exists */
        } else {
            w = copy_work(from->work);
        }
        deps = xrealloc(deps, (from->ndeps ? from->ndeps : 1) * sizeof *deps);
        for (size_t d = 0; d < from->ndeps; d++)
            for (size_t j = 0; j < i; j++)
                if (src->nodes[j] == from->deps[d]) deps[d] = g->nodes[j];
        struct node *n = graph_add(g, w, deps, from->ndeps, 0);
        memcpy(n->dep_type, from->dep_type, from->ndeps);
        if (from->work->kind == W_CHILD)
            w->u.child.graph = clone_graph(from->work->u.child.graph, n, body);
    }
    free(deps);
    return g;
}

/* A kernel's work from a node's parameters, checked as a launch's are. */
static CUresult kernel_work(struct ctx *c, CUfunction func, const unsigned grid[3],
                            const unsigned block[3], unsigned shared, void **kernelParams,
                            void **extra, struct work **out) {
    struct function *fn = handle(func, K_FUNCTION);
    if (!fn || !fn->module->loaded) return CUDA_ERROR_INVALID_HANDLE;
    if (fn->module->ctx != c) return CUDA_ERROR_INVALID_CONTEXT;
    unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    if (!grid[0] || !grid[1] || !grid[2] || !threads || threads > 1024 || extra ||
        (fn->count && !kernelParams) || shared > (unsigned)fn->max_dynamic_shared)
        return CUDA_ERROR_INVALID_VALUE;
    struct work *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->kind = W_KERNEL;
    w->u.kernel.f = fn;
    w->u.kernel.entry = xstrdup(fn->name);
    w->u.kernel.param_bytes = fn->param_bytes;
    memcpy(w->u.kernel.grid, grid, sizeof w->u.kernel.grid);
    memcpy(w->u.kernel.block, block, sizeof w->u.kernel.block);
    w->u.kernel.shared = shared;
    w->u.kernel.params = xmalloc(fn->param_bytes);
    memset(w->u.kernel.params, 0, fn->param_bytes);
    for (unsigned i = 0; i < fn->count; i++) {
        if (!kernelParams[i]) {
            free_work(w);
            return CUDA_ERROR_INVALID_VALUE;
        }
        memcpy(w->u.kernel.params + fn->offsets[i], kernelParams[i], fn->sizes[i]);
    }
    *out = w;
    return CUDA_SUCCESS;
}

/* A memset's work from a node's parameters: 1-dimensional (a height of 1) alone is
   modelled. */
static CUresult memset_work(CUdeviceptr dst, unsigned value, unsigned elem, size_t width,
                            size_t height, struct work **out) {
    if (!dst || !width || (elem != 1 && elem != 2 && elem != 4)) return CUDA_ERROR_INVALID_VALUE;
    if (height != 1) {
        say("a memset node of %zu rows: the model models 1-dimensional memsets alone", height);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    struct work *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->kind = W_MEMSET;
    w->u.memset.device = (uintptr_t)dst;
    w->u.memset.value = value;
    w->u.memset.elem_size = elem;
    w->u.memset.width = width;
    *out = w;
    return CUDA_SUCCESS;
}

/* Whether `g` is `ancestor` or nested in it. */
static int within(const struct graph *g, const struct graph *ancestor) {
    for (; g; g = g->owner ? g->owner->graph : NULL)
        if (g == ancestor) return 1;
    return 0;
}

/* cuGraphAddNode for the node types the model models: kernels, memsets, child graphs
   (cloned) and WHILE conditional nodes (CUDA 12.3), each checked as cuda.h documents:
   the dependencies nodes of the graph, none twice; in a conditional body (or a graph
   nested in one) only the types a body allows, every kernel of the body's context; a
   child graph holding no conditional node; a conditional node's handle created on this
   graph or one it is nested in, used by no other node, of the node's context. Other node
   types are refused with CUDA_ERROR_NOT_SUPPORTED and a line saying so. */
CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *dependencies, size_t numDependencies,
                                CUgraphNodeParams *nodeParams) {
    if (!phGraphNode || !nodeParams || (numDependencies && !dependencies))
        return CUDA_ERROR_INVALID_VALUE;
    if (driver_version < 12020) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct graph *g = c ? handle(hGraph, K_GRAPH) : NULL;
    struct node **deps = NULL;
    struct work *w = NULL;
    struct cond *h = NULL;
    if (c && !g) r = CUDA_ERROR_INVALID_VALUE;
    if (g && g->ctx != c) r = CUDA_ERROR_INVALID_CONTEXT;
    if (!r && g) {
        deps = xmalloc((numDependencies ? numDependencies : 1) * sizeof *deps);
        for (size_t i = 0; i < numDependencies && !r; i++) {
            deps[i] = handle(dependencies[i], K_NODE);
            if (!deps[i] || deps[i]->graph != g) r = CUDA_ERROR_INVALID_VALUE;
            for (size_t j = 0; j < i && !r; j++)
                if (deps[j] == deps[i]) r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (!r && g) {
        switch (nodeParams->type) {
        case CU_GRAPH_NODE_TYPE_KERNEL: {
            const CUDA_KERNEL_NODE_PARAMS_v3 *k = &nodeParams->kernel;
            unsigned grid[3] = {k->gridDimX, k->gridDimY, k->gridDimZ};
            unsigned block[3] = {k->blockDimX, k->blockDimY, k->blockDimZ};
            if (!k->func) {
                say("cuGraphAddNode: a kernel node by CUkernel: the model models CUfunction alone");
                r = CUDA_ERROR_NOT_SUPPORTED;
            } else {
                r = kernel_work(c, k->func, grid, block, k->sharedMemBytes, k->kernelParams,
                                k->extra, &w);
            }
            break;
        }
        case CU_GRAPH_NODE_TYPE_MEMSET: {
            const CUDA_MEMSET_NODE_PARAMS_v2 *m = &nodeParams->memset;
            if (m->ctx && m->ctx != (CUcontext)c)
                r = CUDA_ERROR_INVALID_CONTEXT;
            else
                r = memset_work(m->dst, m->value, m->elementSize, m->width, m->height, &w);
            break;
        }
        case CU_GRAPH_NODE_TYPE_GRAPH: {
            struct graph *child = handle(nodeParams->graph.graph, K_GRAPH);
            if (!child || child == g) {
                r = CUDA_ERROR_INVALID_VALUE;
            } else if (nodeParams->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) {
                say("cuGraphAddNode: a child graph moved to its parent: the model clones alone");
                r = CUDA_ERROR_NOT_SUPPORTED;
            } else if (holds_conditional(child)) {
                /* cuda.h: a graph with conditional nodes cannot be used in a child node. */
                say("cuGraphAddNode: a child graph holding a conditional node");
                r = CUDA_ERROR_INVALID_VALUE;
            } else if (g->body && !body_allows(child)) {
                say("cuGraphAddNode: a child graph holding a node type a conditional body "
                    "does not allow");
                r = CUDA_ERROR_NOT_SUPPORTED;
            } else if (child->ctx != c || !kernels_of(child, c)) {
                r = CUDA_ERROR_INVALID_CONTEXT;
            } else {
                w = xmalloc(sizeof *w);
                memset(w, 0, sizeof *w);
                w->kind = W_CHILD;
            }
            break;
        }
        case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
            const CUDA_CONDITIONAL_NODE_PARAMS *p = &nodeParams->conditional;
            h = (struct cond *)handle((void *)(uintptr_t)p->handle, K_COND);
            if (driver_version < CONDITIONAL_DRIVER) {
                say("cuGraphAddNode: the driver claims CUDA %d.%d, before conditional nodes",
                    driver_version / 1000, driver_version % 1000 / 10);
                r = CUDA_ERROR_NOT_SUPPORTED;
            } else if (p->type != CU_GRAPH_COND_TYPE_WHILE) {
                say("cuGraphAddNode: a conditional node of type %d: the model models WHILE "
                    "alone", (int)p->type);
                r = CUDA_ERROR_NOT_SUPPORTED;
            } else if (!h || h->node || !within(g, h->graph) || p->size != 1 ||
                       !p->phGraph_out) {
                r = CUDA_ERROR_INVALID_VALUE;
            } else if ((p->ctx && p->ctx != (CUcontext)h->ctx) || h->ctx != c) {
                r = CUDA_ERROR_INVALID_CONTEXT;
            } else {
                w = xmalloc(sizeof *w);
                memset(w, 0, sizeof *w);
                w->kind = W_COND;
                w->u.child.handle = p->handle;
            }
            break;
        }
        case CU_GRAPH_NODE_TYPE_HOST:
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
        case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
        case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        case CU_GRAPH_NODE_TYPE_MEM_FREE:
        case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
            if (g->body)
                say("cuGraphAddNode: node type %d in a conditional body, which allows "
                    "kernels, empty nodes, child graphs, memsets, memcopies and conditionals",
                    (int)nodeParams->type);
            else
                say("cuGraphAddNode: the model does not model node type %d",
                    (int)nodeParams->type);
            r = CUDA_ERROR_NOT_SUPPORTED;
            break;
        default:
            say("cuGraphAddNode: the model does not model node type %d", (int)nodeParams->type);
            r = CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    if (!r && w) {
        struct node *n = graph_add(g, w, deps, numDependencies, 0);
        if (w->kind == W_CHILD) {
            w->u.child.graph =
                clone_graph(handle(nodeParams->graph.graph, K_GRAPH), n, g->body);
        }
        if (w->kind == W_COND) {
            struct graph *body = xmalloc(sizeof *body);
            memset(body, 0, sizeof *body);
            body->h.kind = K_GRAPH;
            body->ctx = c;
            body->owner = n;
            body->body = 1;
            live_put(body);
            w->u.child.graph = body;
            h->node = n;
            nodeParams->conditional.phGraph_out[0] = (CUgraph)body;
        }
        *phGraphNode = (CUgraphNode)n;
    }
    free(deps);
    unlock();
    return r;
}

CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph) {
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct node *n = handle(hNode, K_NODE);
    if (!n || n->work->kind != W_CHILD)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        *phGraph = (CUgraph)n->work->u.child.graph;
    unlock();
    return r;
}

/* Sets a kernel node's parameters in its graph (executables made from it keep theirs). */
CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode,
                                            const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
    if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct node *n = c ? handle(hNode, K_NODE) : NULL;
    if (c && (!n || n->work->kind != W_KERNEL)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && n) {
        unsigned grid[3] = {nodeParams->gridDimX, nodeParams->gridDimY, nodeParams->gridDimZ};
        unsigned block[3] = {nodeParams->blockDimX, nodeParams->blockDimY, nodeParams->blockDimZ};
        struct work *w = NULL;
        r = kernel_work(c, nodeParams->func, grid, block, nodeParams->sharedMemBytes,
                        nodeParams->kernelParams, nodeParams->extra, &w);
        if (!r) {
            free_work(n->work);
            n->work = w;
        }
    }
    unlock();
    return r;
}

/* Sets `to`'s works (an executable's instantiation of a child graph) from `from`'s
   nodes, of the same topology and insertion order, recursively: kernels' parameters
   (the same function), memsets' and copies' operands. CUDA_ERROR_INVALID_VALUE, nothing
   changed, where the topology or a kernel's function differs. */
static CUresult plan_set(struct plan *to, const struct graph *from, int apply) {
    if (to->count != from->count) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < to->count; i++) {
        struct work *w = to->works[i];
        const struct node *n = from->nodes[i];
        const struct work *f = n->work;
        if (f->kind != w->kind || n->ndeps != to->indegree[i]) return CUDA_ERROR_INVALID_VALUE;
        switch (w->kind) {
        case W_KERNEL:
            if (f->u.kernel.f != w->u.kernel.f) return CUDA_ERROR_INVALID_VALUE;
            if (apply) {
                struct work *c = copy_work(f);
                c->ticket = w->ticket;
                free_work(w);
                to->works[i] = c;
            }
            break;
        case W_HTOD:
        case W_DTOH:
            if (apply) {
                struct work *c = copy_work(f);
                free_work(w);
                to->works[i] = c;
            }
            break;
        case W_MEMSET:
            if (f->u.memset.elem_size != w->u.memset.elem_size ||
                f->u.memset.width != w->u.memset.width)
                return CUDA_ERROR_INVALID_VALUE;
            if (apply) w->u.memset = f->u.memset;
            break;
        case W_CHILD:
        case W_COND: {
            CUresult r = plan_set(w->u.child.plan, f->u.child.graph, apply);
            if (r) return r;
            break;
        }
        default: break;
        }
    }
    return CUDA_SUCCESS;
}

/* cuGraphExecChildGraphNodeSetParams: the executable's instantiation of child graph node
   `hNode` (a node of the graph it came from, or of a graph nested in it: a conditional
   body) set from `childGraph`'s nodes, whose topology and insertion order match the
   node's graph; only launches enqueued after the call see the change. */
CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUgraph childGraph) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct exec *x = c ? handle(hGraphExec, K_EXEC) : NULL;
    struct node *n = x ? handle(hNode, K_NODE) : NULL;
    struct graph *from = x ? handle(childGraph, K_GRAPH) : NULL;
    if (c && !x) r = CUDA_ERROR_INVALID_HANDLE;
    if (x && x->ctx != c) r = CUDA_ERROR_INVALID_CONTEXT;
    if (x && !r) {
        struct work *w = n ? plan_find(x->count, x->works, x->nodes, n) : NULL;
        if (!w || w->kind != W_CHILD || !from)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!(r = plan_set(w->u.child.plan, from, 0)))
            plan_set(w->u.child.plan, from, 1);
    }
    unlock();
    return r;
}

/* cuGraphExecMemsetNodeSetParams: a 1-dimensional memset node's value and destination
   set in the executable (the same element size and width, in the node's context); only
   launches enqueued after the call see it. */
CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                                CUcontext ctx) {
    if (!memsetParams) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct exec *x = c ? handle(hGraphExec, K_EXEC) : NULL;
    struct node *n = x ? handle(hNode, K_NODE) : NULL;
    if (c && !x) r = CUDA_ERROR_INVALID_HANDLE;
    if (x && (x->ctx != c || (ctx && ctx != (CUcontext)c))) r = CUDA_ERROR_INVALID_CONTEXT;
    if (x && !r) {
        struct work *w = n ? plan_find(x->count, x->works, x->nodes, n) : NULL;
        struct work *m = NULL;
        if (!w || w->kind != W_MEMSET) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (!(r = memset_work(memsetParams->dst, memsetParams->value,
                                     memsetParams->elementSize, memsetParams->width,
                                     memsetParams->height, &m))) {
            if (m->u.memset.elem_size != w->u.memset.elem_size ||
                m->u.memset.width != w->u.memset.width)
                r = CUDA_ERROR_INVALID_VALUE;
            else
                w->u.memset = m->u.memset;
            free_work(m);
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags) {
    if (!phGraphExec) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned long long)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                      CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                      CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct graph *g = c ? handle(hGraph, K_GRAPH) : NULL;
    if (c && !g) r = CUDA_ERROR_INVALID_HANDLE;
    struct cond *unused = g ? unused_handle(g) : NULL;
    int conditional = g && holds_conditional(g);
    if (g && g->owner) {
        /* A child graph's or a body's: instantiated only with the graph that owns it. */
        say("cuGraphInstantiate: the graph is owned by a node of another graph");
        r = CUDA_ERROR_INVALID_VALUE;
        g = NULL;
    } else if (unused) {
        /* cuda.h: handles not associated with a conditional node may make
           instantiation fail (CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED). */
        say("cuGraphInstantiate: conditional handle %p is used by no conditional node",
            (void *)unused);
        r = CUDA_ERROR_INVALID_VALUE;
        g = NULL;
    } else if (conditional && g->execs) {
        /* cuda.h: only one instantiation of a graph with conditional nodes may exist. */
        say("cuGraphInstantiate: a graph with conditional nodes has a live executable already");
        r = CUDA_ERROR_INVALID_VALUE;
        g = NULL;
    }
    if (g) {
        struct exec *x = xmalloc(sizeof *x);
        memset(x, 0, sizeof *x);
        x->h.kind = K_EXEC;
        x->ctx = g->ctx;
        struct plan p;
        plan_build(g, &p, x);
        x->count = p.count;
        x->works = p.works;
        x->nodes = p.nodes;
        x->indegree = p.indegree;
        x->nsucc = p.nsucc;
        x->succ = p.succ;
        x->source = g;
        g->execs++;
        live_put(x);
        totals.graph_execs++;
        *phGraphExec = (CUgraphExec)x;
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    struct exec *x = s ? handle(hGraphExec, K_EXEC) : NULL;
    if (s && !x) r = CUDA_ERROR_INVALID_HANDLE;
    if (x && s->capture && s->capture->invalidated) r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    unlock();
    return r;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct stream *s = c ? stream_of(hStream, c, &r) : NULL;
    struct exec *x = s ? handle(hGraphExec, K_EXEC) : NULL;
    if (s && !x) r = CUDA_ERROR_INVALID_HANDLE;
    if (x && x->ctx != c) r = CUDA_ERROR_INVALID_CONTEXT;
    if (x && !r) {
        struct graph *g;
        r = target(s, &g);
        int nested = 0;
        for (size_t i = 0; i < x->count; i++)
            nested |= x->works[i]->kind == W_CHILD || x->works[i]->kind == W_COND;
        if (!r && g && nested) {
            say("cuGraphLaunch captured: the model does not model capturing a launch of a "
                "graph with child graph or conditional nodes");
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else if (!r && g) {
            /* Captured: the executable's nodes inlined, in order, after the frontier. */
            for (size_t i = 0; i < x->count; i++) capture_add(s, copy_work(x->works[i]));
        } else if (!r) {
            struct work *w = xmalloc(sizeof *w);
            memset(w, 0, sizeof *w);
            w->kind = W_GRAPH;
            w->u.graph.exec = x;
            w->u.graph.count = x->count;
            w->u.graph.works = xmalloc((x->count ? x->count : 1) * sizeof *w->u.graph.works);
            for (size_t i = 0; i < x->count; i++) w->u.graph.works[i] = copy_work(x->works[i]);
            x->pending++;
            enqueue(s, w);
        }
    }
    unlock();
    return r;
}

/* Sets a kernel node's parameters in an executable, as the driver documents it: the node
   is one of the graph the executable came from, its function stays the same, and only
   launches enqueued after the call see the change (each launch ran from its own copy). */
CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
    if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    lock();
    struct ctx *c = current_ctx(&r);
    struct exec *x = c ? handle(hGraphExec, K_EXEC) : NULL;
    struct node *n = x ? handle(hNode, K_NODE) : NULL;
    struct work *w = NULL;
    if (c && !x) r = CUDA_ERROR_INVALID_HANDLE;
    if (x && x->ctx != c) r = CUDA_ERROR_INVALID_CONTEXT;
    if (x && !r) {
        if (!n) r = CUDA_ERROR_INVALID_HANDLE;
        for (size_t i = 0; n && i < x->count && !w; i++)
            if (x->nodes[i] == n) w = x->works[i];
        if (n && !w) r = CUDA_ERROR_INVALID_VALUE; /* not a node of its graph */
    }
    if (w && !r) {
        struct function *fn = handle(nodeParams->func, K_FUNCTION);
        unsigned long long threads = (unsigned long long)nodeParams->blockDimX *
                                     nodeParams->blockDimY * nodeParams->blockDimZ;
        if (w->kind != W_KERNEL || fn != w->u.kernel.f) {
            /* Another kind of node, or another function: the driver refuses both. */
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (!nodeParams->gridDimX || !nodeParams->gridDimY || !nodeParams->gridDimZ ||
                   !threads || threads > 1024 || nodeParams->extra ||
                   (fn->count && !nodeParams->kernelParams) ||
                   nodeParams->sharedMemBytes > (unsigned)fn->max_dynamic_shared) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            unsigned char *params = xmalloc(fn->param_bytes);
            memset(params, 0, fn->param_bytes);
            for (unsigned i = 0; i < fn->count && !r; i++) {
                if (!nodeParams->kernelParams[i]) r = CUDA_ERROR_INVALID_VALUE;
                else memcpy(params + fn->offsets[i], nodeParams->kernelParams[i], fn->sizes[i]);
            }
            if (r) {
                free(params);
            } else {
                free(w->u.kernel.params);
                w->u.kernel.params = params;
                w->u.kernel.grid[0] = nodeParams->gridDimX;
                w->u.kernel.grid[1] = nodeParams->gridDimY;
                w->u.kernel.grid[2] = nodeParams->gridDimZ;
                w->u.kernel.block[0] = nodeParams->blockDimX;
                w->u.kernel.block[1] = nodeParams->blockDimY;
                w->u.kernel.block[2] = nodeParams->blockDimZ;
                w->u.kernel.shared = nodeParams->sharedMemBytes;
                totals.kernel_node_updates++;
            }
        }
    }
    unlock();
    return r;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
    CUresult r = CUDA_SUCCESS;
    lock();
    struct exec *x = handle(hGraphExec, K_EXEC);
    if (!x) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        /* In flight, it is freed when its last launch has run. */
        live_remove(x);
        if (handle(x->source, K_GRAPH) && x->source->execs) x->source->execs--;
        totals.graph_execs--;
        if (x->pending)
            x->destroyed = 1;
        else
            free_exec(x);
    }
    unlock();
    return r;
}

/* ---------------------------------------------------------------------------------- */
/* Errors                                                                               */

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define NAME(code) \
    case code: *pStr = #code; return CUDA_SUCCESS;
        NAME(CUDA_SUCCESS)
        NAME(CUDA_ERROR_INVALID_VALUE)
        NAME(CUDA_ERROR_NOT_SUPPORTED)
        NAME(CUDA_ERROR_OUT_OF_MEMORY)
        NAME(CUDA_ERROR_NOT_INITIALIZED)
        NAME(CUDA_ERROR_STUB_LIBRARY)
        NAME(CUDA_ERROR_NO_DEVICE)
        NAME(CUDA_ERROR_INVALID_DEVICE)
        NAME(CUDA_ERROR_INVALID_IMAGE)
        NAME(CUDA_ERROR_INVALID_CONTEXT)
        NAME(CUDA_ERROR_NO_BINARY_FOR_GPU)
        NAME(CUDA_ERROR_INVALID_PTX)
        NAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
        NAME(CUDA_ERROR_JIT_COMPILER_NOT_FOUND)
        NAME(CUDA_ERROR_INVALID_HANDLE)
        NAME(CUDA_ERROR_ILLEGAL_STATE)
        NAME(CUDA_ERROR_NOT_FOUND)
        NAME(CUDA_ERROR_NOT_READY)
        NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
        NAME(CUDA_ERROR_LAUNCH_TIMEOUT)
        NAME(CUDA_ERROR_LAUNCH_FAILED)
        NAME(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        NAME(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
        NAME(CUDA_ERROR_STREAM_CAPTURE_MERGE)
        NAME(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
        NAME(CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
        NAME(CUDA_ERROR_STREAM_CAPTURE_ISOLATION)
        NAME(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
        NAME(CUDA_ERROR_CAPTURED_EVENT)
        NAME(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
#undef NAME
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
    return cuGetErrorName(error, pStr);
}

/* NVIDIA's private tables (NVRTC asks for them through the loaded driver): the model has
   none. NVRTC, finding a driver without them, compiles as on a machine with no GPU. */
CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId) {
    (void)pExportTableId;
    if (ppExportTable) *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---------------------------------------------------------------------------------- */
/* The model's own exports                                                              */

const char *capture_model_name(void) { return MODEL_NAME; }

CUresult capture_model_counts(struct capture_model_counts *out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    lock();
    *out = totals;
    out->device_bytes = (size_t)device_bytes;
    out->host_bytes = (size_t)host_bytes;
    unlock();
    return CUDA_SUCCESS;
}
