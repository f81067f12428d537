/*
 * fakenvml.c: a fake libnvidia-ml.so.1 for gpuwatch's tests (no GPU needed).
 *
 * Compiled against the real nvml.h (PyPI nvidia-nvml-dev), so every struct, enum and
 * return code has the layout the real pynvml expects:
 *
 *   gcc -shared -fPIC -O2 -I<dir of nvml.h> -Wl,-soname,libnvidia-ml.so.1 \
 *       -o libnvidia-ml.so.1 fakenvml.c
 *
 * With -DGPUWATCH_FAKE_OLD_DRIVER the library plays an old driver: the newer symbols
 * (nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetTemperatureV,
 * nvmlDeviceGetCurrentClocksEventReasons, nvmlDevice{Compute,Graphics}RunningProcesses_v3,
 * every nvmlGpm* function) are not exported at all, so pynvml's lookup fails exactly as on a real old driver.
 *
 * The "hardware" is a text file named by $FAKE_NVML_CONFIG, checked on EVERY call so that a
 * test can rewrite it mid-test (re-parsed when its path, inode, size or times change: replace
 * it atomically, as build.py's write_config does). A missing file means "driver not loaded".
 * Format, one item a line, '#' starts a comment; tests/fakenvml/build.py writes it from Python
 * values:
 *
 *   driver 550.54.15
 *   gpu uuid=GPU-... name="NVIDIA H100 80GB HBM3" util=3 memutil=1
 *       total=<B> used=<B> reserved=<B> power=<mW> limit=<mW> temp=<C> sm=<MHz>
 *       energy=<mJ> ecc_corrected=<n> ecc_uncorrected=<n> throttle=<bitmask, 0x.. allowed>
 *       migmode=0|1 migmax=<n> lost=1 bus=<PCI bus id>
 *       remap_corr=<n> remap_unc=<n> remap_pending=0|1 remap_failure=0|1
 *       gpm=1 smactive=<%> smocc=<%> tensor=<%> dram=<%> fp16=<%> fp32=<%> fp64=<%>
 *       gpmfail=<code>
 *                                                      (all on one line; one line per GPU,
 *                                                      in index order)
 *   mig gpu=<index> idx=<slot> uuid=MIG-... total=<B> used=<B> reserved=<B> gi=<id> ci=<id>
 *       [slices=<n>]                   its GPU instance's slices (nvmlDeviceGetAttributes_v2)
 *       [smactive=<%> smocc=<%> tensor=<%> dram=<%> fp16=<%> fp32=<%> fp64=<%>]
 *   proc gpu=<index> pid=<pid> mem=<B> type=compute|graphics|both [mig=<slot>]
 *       [smutil=<percent>]             its SM utilization (nvmlDeviceGetProcessUtilization)
 *   missing <nvmlFunctionName>          that function returns NVML_ERROR_FUNCTION_NOT_FOUND
 *   fail <nvmlFunctionName> <code>      that function returns <code> (e.g. 18 at init)
 *   xid gpu=<index> code=<n>            an Xid event on that GPU (nvmlEventSetWait_v2)
 *   hang <nvmlFunctionName> <seconds>   that function blocks that long (a driver call stuck
 *                                      in the kernel), then answers as usual; for the
 *                                      systemd watchdog test (tests/systemd_boot)
 *
 * A numeric GPU field that is absent or negative makes the functions reading it return
 * NVML_ERROR_NOT_SUPPORTED (util covers both utilization rates; total covers memory info).
 * A process mem of -1 is reported as NVML_VALUE_NOT_AVAILABLE (pynvml turns it into None).
 * nvmlDeviceGetProcessUtilization answers NOT_SUPPORTED on a GPU none of whose processes has
 * an smutil key (and on MIG); otherwise, as the real one, one sample per process whose smutil
 * is above 0 (a process idle over the sample period is left out), NOT_FOUND when there is none.
 * No migmode key means the GPU is not MIG-capable. lost=1 makes every call on that GPU's
 * handles (and nvmlDeviceGetHandleByIndex for it) return NVML_ERROR_GPU_IS_LOST.
 * Calls before nvmlInit or after the matching nvmlShutdown return NVML_ERROR_UNINITIALIZED.
 * The remap_* keys are nvmlDeviceGetRemappedRows' four values (all four, or NOT_SUPPORTED);
 * bus defaults to 00000000:<0x18 + index>:00.0 (nvmlDeviceGetPciInfo_v3's busId).
 *
 * GPM (Hopper and newer): gpm=1 makes nvmlGpmQueryDeviceSupport say the GPU is supported; no
 * gpm key (or 0) makes it say unsupported, and the sample calls answer NOT_SUPPORTED. A sample
 * (nvmlGpmSampleGet on a GPU, nvmlGpmMigSampleGet on a GPU and a MIG instance's gi) records
 * its device and a sequence number; nvmlGpmMetricsGet between two samples of the same device,
 * sample2 newer than sample1, gives each metric its configured percent as read at that call
 * (smactive: SM_UTIL, smocc: SM_OCCUPANCY, tensor: ANY_TENSOR_UTIL, dram: DRAM_BW_UTIL,
 * fp16/fp32/fp64: FP16/FP32/FP64_UTIL, util: GRAPHICS_UTIL); a metric without its key, or any
 * other metric id, gets NOT_SUPPORTED in its own nvmlReturn. Samples of different devices, or
 * not in order, make the whole call INVALID_ARGUMENT. gpmfail=<code> makes that GPU's (and its
 * MIG instances') sample calls return <code>. Every allocated sample is counted in the exported
 * int gpuwatch_fake_gpm_live_samples (read it with ctypes to check for leaks);
 * nvmlGpmSampleFree works whatever state the driver is in, as nvmlShutdown does.
 *
 * Xid events, as real NVML delivers them: an event set sees only the events raised after it
 * was created, on the GPUs registered in it for nvmlEventTypeXidCriticalError, each once. The
 * fake counts the xid lines: a new set starts past the lines already in the file, and
 * nvmlEventSetWait_v2 hands out the next line after its cursor (skipping unregistered GPUs),
 * or NVML_ERROR_TIMEOUT at once (it never blocks). A test raises an Xid by writing the file
 * again with one more xid line at the end (FakeNvmlConfig.xids).
 */

/* Declares the explicitly versioned names (..._v2) and stops the header from renaming ours. */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_GPUS 16
#define MAX_MIGS 8
#define MAX_PROCS 64
#define MAX_FAILS 32
#define MAX_HANGS 8
#define MAX_XIDS 256
#define MAX_EVENT_SETS 8
#define NOT_SET (-1LL)

/* Lets the tests tell this library from a real driver's (a plain string, found by grep). */
__attribute__((visibility("default"))) const char gpuwatch_fake_nvml[] = "gpuwatch fake libnvidia-ml";

/* GPM metrics in percent, NOT_SET where the "hardware" lacks them. */
typedef struct {
    long long smactive, smocc, tensor, dram, fp16, fp32, fp64;
} fake_gpm;

static const char *gpm_keys[] = {"smactive", "smocc", "tensor", "dram", "fp16", "fp32", "fp64"};
#define GPM_KEYS (sizeof gpm_keys / sizeof gpm_keys[0])

typedef struct {
    int present;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    long long total, used, reserved, gi, ci, slices;
    fake_gpm gpm;
} fake_mig;

typedef struct {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    long long util, memutil, total, used, reserved, power, limit, temp, sm, energy;
    long long ecc_corrected, ecc_uncorrected, throttle, migmode, migmax;
    long long remap_corr, remap_unc, remap_pending, remap_failure;
    int lost;
    long long gpmsupport, gpmfail;
    fake_gpm gpm;
    char bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    fake_mig migs[MAX_MIGS];
} fake_gpu;

typedef struct {
    int gpu, mig; /* mig: slot index, or -1 when the process is not in a MIG instance */
    unsigned int pid;
    long long mem;
    long long smutil; /* percent; NOT_SET: this process has no utilization sample */
    int compute, graphics;
} fake_proc;

typedef struct {
    char fn[96];
    int code;
} fake_fail;

typedef struct {
    int gpu;
    unsigned long long code;
} fake_xid;

typedef struct {
    char fn[96];
    long long seconds;
} fake_hang;

typedef struct {
    int loaded; /* 0 when the file is missing: "driver not loaded" */
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int ngpus, nprocs, nfails, nxids, nhangs;
    fake_gpu gpus[MAX_GPUS];
    fake_proc procs[MAX_PROCS];
    fake_fail fails[MAX_FAILS];
    fake_xid xids[MAX_XIDS];
    fake_hang hangs[MAX_HANGS];
} fake_config;

/* NVML handles are opaque pointers; ours point into these fixed arrays and never dangle. */
struct nvmlDevice_st {
    int gpu;
    int mig; /* -1 for a physical GPU */
};
static struct nvmlDevice_st gpu_handles[MAX_GPUS];
static struct nvmlDevice_st mig_handles[MAX_GPUS][MAX_MIGS];

/* An event set: which GPUs are registered for which event types, and the next xid line. */
struct nvmlEventSet_st {
    int used;
    int cursor;
    unsigned long long registered[MAX_GPUS];
};
static struct nvmlEventSet_st event_sets[MAX_EVENT_SETS];

static int init_count; /* NVML's init is reference counted */

/* ctypes drops the GIL around calls, so each thread parses into its own copy. */
static __thread fake_config cfg;

/* ---------------------------------------------------------------- config parsing */

static long long parse_number(const char *s)
{
    return strtoll(s, NULL, (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? 16 : 10);
}

/* Next key=value pair from *cursor; value may be "double quoted". Returns 0 at end of line. */
static int next_pair(char **cursor, char **key, char **value)
{
    char *p = *cursor;
    while (*p && isspace((unsigned char)*p))
        p++;
    if (!*p)
        return 0;
    *key = p;
    while (*p && *p != '=' && !isspace((unsigned char)*p))
        p++;
    if (*p != '=') { /* a bare word: treat as key with empty value */
        *value = p;
        if (*p)
            *p++ = '\0';
        *cursor = p;
        return 1;
    }
    *p++ = '\0';
    if (*p == '"') {
        *value = ++p;
        while (*p && *p != '"')
            p++;
    } else {
        *value = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
    }
    if (*p)
        *p++ = '\0';
    *cursor = p;
    return 1;
}

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src);
}

static long long *gpm_field(fake_gpm *gpm, size_t i)
{
    long long *fields[] = {&gpm->smactive, &gpm->smocc, &gpm->tensor, &gpm->dram,
                           &gpm->fp16, &gpm->fp32, &gpm->fp64};
    return fields[i];
}

static void gpm_unset(fake_gpm *gpm)
{
    for (size_t i = 0; i < GPM_KEYS; i++)
        *gpm_field(gpm, i) = NOT_SET;
}

/* 1 when key is one of the GPM metric keys (and stores its value). */
static int gpm_pair(fake_gpm *gpm, const char *key, const char *value)
{
    for (size_t i = 0; i < GPM_KEYS; i++) {
        if (!strcmp(key, gpm_keys[i])) {
            *gpm_field(gpm, i) = parse_number(value);
            return 1;
        }
    }
    return 0;
}

static void parse_gpu(char *rest)
{
    if (cfg.ngpus >= MAX_GPUS)
        return;
    int idx = cfg.ngpus++;
    fake_gpu *g = &cfg.gpus[idx];
    memset(g, 0, sizeof *g);
    long long *numbers[] = {&g->util, &g->memutil, &g->total, &g->used, &g->reserved,
                            &g->power, &g->limit, &g->temp, &g->sm, &g->energy,
                            &g->ecc_corrected, &g->ecc_uncorrected, &g->throttle,
                            &g->migmode, &g->migmax, &g->remap_corr, &g->remap_unc,
                            &g->remap_pending, &g->remap_failure};
    static const char *names[] = {"util", "memutil", "total", "used", "reserved",
                                  "power", "limit", "temp", "sm", "energy",
                                  "ecc_corrected", "ecc_uncorrected", "throttle",
                                  "migmode", "migmax", "remap_corr", "remap_unc",
                                  "remap_pending", "remap_failure"};
    size_t n = sizeof names / sizeof names[0];
    for (size_t i = 0; i < n; i++)
        *numbers[i] = NOT_SET;
    g->gpmsupport = 0;
    g->gpmfail = 0;
    gpm_unset(&g->gpm);
    snprintf(g->uuid, sizeof g->uuid, "GPU-fake-%d", idx);
    snprintf(g->bus, sizeof g->bus, "00000000:%02X:00.0", 0x18 + idx);
    copy_str(g->name, sizeof g->name, "Fake GPU");

    char *key, *value;
    while (next_pair(&rest, &key, &value)) {
        if (!strcmp(key, "uuid"))
            copy_str(g->uuid, sizeof g->uuid, value);
        else if (!strcmp(key, "name"))
            copy_str(g->name, sizeof g->name, value);
        else if (!strcmp(key, "lost"))
            g->lost = (int)parse_number(value);
        else if (!strcmp(key, "bus"))
            copy_str(g->bus, sizeof g->bus, value);
        else if (!strcmp(key, "gpm"))
            g->gpmsupport = parse_number(value);
        else if (!strcmp(key, "gpmfail"))
            g->gpmfail = parse_number(value);
        else if (gpm_pair(&g->gpm, key, value))
            continue;
        else
            for (size_t i = 0; i < n; i++)
                if (!strcmp(key, names[i]))
                    *numbers[i] = parse_number(value);
    }
    if (g->migmode >= 0 && g->migmax < 0)
        g->migmax = 7; /* an A100/H100 offers up to 7 MIG devices */
}

static void parse_mig(char *rest)
{
    long long gpu = -1, slot = -1;
    fake_mig m = {.present = 1, .total = NOT_SET, .used = 0, .reserved = 0, .gi = 0, .ci = 0,
                  .slices = NOT_SET};
    gpm_unset(&m.gpm);
    char *key, *value;
    while (next_pair(&rest, &key, &value)) {
        if (!strcmp(key, "gpu"))
            gpu = parse_number(value);
        else if (!strcmp(key, "idx"))
            slot = parse_number(value);
        else if (!strcmp(key, "uuid"))
            copy_str(m.uuid, sizeof m.uuid, value);
        else if (!strcmp(key, "total"))
            m.total = parse_number(value);
        else if (!strcmp(key, "used"))
            m.used = parse_number(value);
        else if (!strcmp(key, "reserved"))
            m.reserved = parse_number(value);
        else if (!strcmp(key, "gi"))
            m.gi = parse_number(value);
        else if (!strcmp(key, "ci"))
            m.ci = parse_number(value);
        else if (!strcmp(key, "slices"))
            m.slices = parse_number(value);
        else
            gpm_pair(&m.gpm, key, value);
    }
    /* A mig line must follow its gpu line. */
    if (gpu >= 0 && gpu < cfg.ngpus && slot >= 0 && slot < MAX_MIGS)
        cfg.gpus[gpu].migs[slot] = m;
}

static void parse_proc(char *rest)
{
    if (cfg.nprocs >= MAX_PROCS)
        return;
    fake_proc p = {.gpu = 0, .mig = -1, .pid = 0, .mem = NOT_SET, .smutil = NOT_SET,
                   .compute = 1, .graphics = 0};
    char *key, *value;
    while (next_pair(&rest, &key, &value)) {
        if (!strcmp(key, "gpu"))
            p.gpu = (int)parse_number(value);
        else if (!strcmp(key, "mig"))
            p.mig = (int)parse_number(value);
        else if (!strcmp(key, "pid"))
            p.pid = (unsigned int)parse_number(value);
        else if (!strcmp(key, "mem"))
            p.mem = parse_number(value);
        else if (!strcmp(key, "smutil"))
            p.smutil = parse_number(value);
        else if (!strcmp(key, "type")) {
            p.compute = !strcmp(value, "compute") || !strcmp(value, "both");
            p.graphics = !strcmp(value, "graphics") || !strcmp(value, "both");
        }
    }
    cfg.procs[cfg.nprocs++] = p;
}

static void parse_xid(char *rest)
{
    if (cfg.nxids >= MAX_XIDS)
        return;
    fake_xid x = {.gpu = 0, .code = 0};
    char *key, *value;
    while (next_pair(&rest, &key, &value)) {
        if (!strcmp(key, "gpu"))
            x.gpu = (int)parse_number(value);
        else if (!strcmp(key, "code"))
            x.code = (unsigned long long)parse_number(value);
    }
    cfg.xids[cfg.nxids++] = x;
}

static void parse_fail(char *rest, int missing)
{
    if (cfg.nfails >= MAX_FAILS)
        return;
    fake_fail *f = &cfg.fails[cfg.nfails];
    int code = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (missing ? sscanf(rest, "%95s", f->fn) == 1 : sscanf(rest, "%95s %d", f->fn, &code) == 2) {
        f->code = code;
        cfg.nfails++;
    }
}

static void parse_hang(char *rest)
{
    if (cfg.nhangs >= MAX_HANGS)
        return;
    fake_hang *h = &cfg.hangs[cfg.nhangs];
    if (sscanf(rest, "%95s %lld", h->fn, &h->seconds) == 2 && h->seconds > 0)
        cfg.nhangs++;
}

/* What the thread's cfg was parsed from: the path and the file's identity. Tests replace the
 * file atomically (a rename: a new inode), so an unchanged identity means unchanged content;
 * parsing it again on every call cost ~0.6 ms a call, which made the fake, not the code under
 * test, most of a benchmarked tick (a real driver answers these calls in microseconds). */
typedef struct {
    int valid;
    char path[4096];
    struct stat st;
} fake_source;
static __thread fake_source source;

static int same_file(const char *path, const struct stat *st)
{
    return source.valid && !strcmp(source.path, path) && source.st.st_dev == st->st_dev &&
           source.st.st_ino == st->st_ino && source.st.st_size == st->st_size &&
           source.st.st_mtim.tv_sec == st->st_mtim.tv_sec &&
           source.st.st_mtim.tv_nsec == st->st_mtim.tv_nsec &&
           source.st.st_ctim.tv_sec == st->st_ctim.tv_sec &&
           source.st.st_ctim.tv_nsec == st->st_ctim.tv_nsec;
}

static void load_config(void)
{
    const char *path = getenv("FAKE_NVML_CONFIG");
    struct stat st;
    if (path && strlen(path) < sizeof source.path && stat(path, &st) == 0 && same_file(path, &st))
        return;
    source.valid = 0;
    memset(&cfg, 0, sizeof cfg);
    FILE *fp = path ? fopen(path, "r") : NULL;
    if (!fp)
        return;
    if (strlen(path) < sizeof source.path && fstat(fileno(fp), &st) == 0) {
        source.valid = 1;
        strcpy(source.path, path);
        source.st = st;
    }
    cfg.loaded = 1;
    copy_str(cfg.driver, sizeof cfg.driver, "550.54.15");

    char line[1024], word[32];
    while (fgets(line, sizeof line, fp)) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        int used = 0;
        if (sscanf(line, "%31s%n", word, &used) != 1)
            continue;
        char *rest = line + used;
        if (!strcmp(word, "driver"))
            sscanf(rest, "%79s", cfg.driver);
        else if (!strcmp(word, "gpu"))
            parse_gpu(rest);
        else if (!strcmp(word, "mig"))
            parse_mig(rest);
        else if (!strcmp(word, "proc"))
            parse_proc(rest);
        else if (!strcmp(word, "missing"))
            parse_fail(rest, 1);
        else if (!strcmp(word, "fail"))
            parse_fail(rest, 0);
        else if (!strcmp(word, "xid"))
            parse_xid(rest);
        else if (!strcmp(word, "hang"))
            parse_hang(rest);
    }
    fclose(fp);
}

/* ---------------------------------------------------------------- common entry checks */

static nvmlReturn_t injected_failure(const char *fn)
{
    for (int i = 0; i < cfg.nfails; i++)
        if (!strcmp(cfg.fails[i].fn, fn))
            return (nvmlReturn_t)cfg.fails[i].code;
    return NVML_SUCCESS;
}

/* A stuck driver call: block for the whole time, as an uninterruptible ioctl would. A signal
 * handled by another part of the process (SIGHUP, SIGTERM) interrupts nanosleep with EINTR, so
 * sleep again for what is left rather than return early. */
static void injected_hang(const char *fn)
{
    for (int i = 0; i < cfg.nhangs; i++) {
        if (strcmp(cfg.hangs[i].fn, fn))
            continue;
        struct timespec left = {.tv_sec = (time_t)cfg.hangs[i].seconds, .tv_nsec = 0};
        while (nanosleep(&left, &left) != 0 && errno == EINTR)
            ;
        return;
    }
}

/* Every call: fresh config, injected hangs and failures, then the driver and init state. */
static nvmlReturn_t enter(const char *fn)
{
    load_config();
    injected_hang(fn);
    nvmlReturn_t r = injected_failure(fn);
    if (r != NVML_SUCCESS)
        return r;
    if (!cfg.loaded)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    return NVML_SUCCESS;
}

/* Map a handle to its GPU (and MIG instance, NULL for a physical GPU). */
static nvmlReturn_t resolve(nvmlDevice_t dev, const fake_gpu **g, const fake_mig **m)
{
    if (!dev || dev->gpu < 0 || dev->gpu >= cfg.ngpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    *g = &cfg.gpus[dev->gpu];
    *m = NULL;
    if ((*g)->lost)
        return NVML_ERROR_GPU_IS_LOST;
    if (dev->mig >= 0) {
        *m = &(*g)->migs[dev->mig];
        if ((*g)->migmode != NVML_DEVICE_MIG_ENABLE || !(*m)->present)
            return NVML_ERROR_INVALID_ARGUMENT; /* the instance was destroyed */
    }
    return NVML_SUCCESS;
}

#define BEGIN()                                                                          \
    nvmlReturn_t r_ = enter(__func__);                                                   \
    if (r_ != NVML_SUCCESS)                                                              \
    return r_

#define BEGIN_DEVICE(dev)                                                                \
    const fake_gpu *g;                                                                   \
    const fake_mig *m;                                                                   \
    BEGIN();                                                                             \
    r_ = resolve((dev), &g, &m);                                                         \
    (void)g;                                                                             \
    (void)m;                                                                             \
    if (r_ != NVML_SUCCESS)                                                              \
    return r_

/* A physical-GPU reading: not on MIG handles, and only when the config sets it. */
#define REQUIRE_GPU_FIELD(value)                                                         \
    if (m != NULL || (value) < 0)                                                        \
    return NVML_ERROR_NOT_SUPPORTED

static nvmlReturn_t put_string(char *dst, unsigned int length, const char *src)
{
    if (!dst || strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- init and system */

static nvmlReturn_t do_init(const char *fn)
{
    load_config();
    nvmlReturn_t r = injected_failure(fn);
    if (r != NVML_SUCCESS)
        return r;
    if (!cfg.loaded)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    __atomic_add_fetch(&init_count, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init(__func__);
}

nvmlReturn_t nvmlInit_v2(void)
{
    return do_init(__func__);
}

nvmlReturn_t nvmlShutdown(void)
{
    load_config();
    nvmlReturn_t r = injected_failure(__func__);
    if (r != NVML_SUCCESS)
        return r;
    /* Shutdown works without a config file: a driver that vanished must still be let go. */
    int old = __atomic_load_n(&init_count, __ATOMIC_SEQ_CST);
    while (old > 0 && !__atomic_compare_exchange_n(&init_count, &old, old - 1, 0,
                                                   __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    return old > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    BEGIN();
    return put_string(version, length, cfg.driver);
}

/* ---------------------------------------------------------------- enumeration and identity */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    BEGIN();
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned int)cfg.ngpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    BEGIN();
    if (!device || index >= (unsigned int)cfg.ngpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (cfg.gpus[index].lost)
        return NVML_ERROR_GPU_IS_LOST; /* nvidia-smi: "Unable to determine the device handle" */
    gpu_handles[index].gpu = (int)index;
    gpu_handles[index].mig = -1;
    *device = &gpu_handles[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    BEGIN_DEVICE(device);
    return put_string(name, length, g->name);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    BEGIN_DEVICE(device);
    return put_string(uuid, length, m ? m->uuid : g->uuid);
}

/* ---------------------------------------------------------------- readings */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->util);
    utilization->gpu = (unsigned int)g->util;
    utilization->memory = (unsigned int)(g->memutil < 0 ? 0 : g->memutil);
    return NVML_SUCCESS;
}

/* Memory of a GPU or of a MIG instance: {total, used, reserved}, or NOT_SUPPORTED. */
static nvmlReturn_t memory_of(const fake_gpu *g, const fake_mig *m, unsigned long long out[3])
{
    long long total = m ? m->total : g->total;
    long long used = m ? m->used : g->used;
    long long reserved = m ? m->reserved : g->reserved;
    if (total < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    out[0] = (unsigned long long)total;
    out[1] = (unsigned long long)(used < 0 ? 0 : used);
    out[2] = (unsigned long long)(reserved < 0 ? 0 : reserved);
    return NVML_SUCCESS;
}

/* v1 counts the driver's reserved memory as used (used = total - free), as real NVML does. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    BEGIN_DEVICE(device);
    unsigned long long v[3];
    r_ = memory_of(g, m, v);
    if (r_ != NVML_SUCCESS)
        return r_;
    memory->total = v[0];
    memory->used = v[1] + v[2];
    memory->free = v[0] - v[1] - v[2];
    return NVML_SUCCESS;
}

#ifndef GPUWATCH_FAKE_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    BEGIN_DEVICE(device);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long v[3];
    r_ = memory_of(g, m, v);
    if (r_ != NVML_SUCCESS)
        return r_;
    memory->total = v[0];
    memory->used = v[1];
    memory->reserved = v[2];
    memory->free = v[0] - v[1] - v[2];
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->power);
    *power = (unsigned int)g->power;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->limit);
    *limit = (unsigned int)g->limit;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp)
{
    BEGIN_DEVICE(device);
    if (sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_NOT_SUPPORTED;
    REQUIRE_GPU_FIELD(g->temp);
    *temp = (unsigned int)g->temp;
    return NVML_SUCCESS;
}

#ifndef GPUWATCH_FAKE_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    BEGIN_DEVICE(device);
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_NOT_SUPPORTED;
    REQUIRE_GPU_FIELD(g->temp);
    temperature->temperature = (int)g->temp;
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    BEGIN_DEVICE(device);
    if (type != NVML_CLOCK_SM)
        return NVML_ERROR_NOT_SUPPORTED;
    REQUIRE_GPU_FIELD(g->sm);
    *clock = (unsigned int)g->sm;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->energy);
    *energy = (unsigned long long)g->energy;
    return NVML_SUCCESS;
}

/* Only the volatile counters (since the driver loaded) are faked. */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts)
{
    BEGIN_DEVICE(device);
    if (counterType != NVML_VOLATILE_ECC)
        return NVML_ERROR_NOT_SUPPORTED;
    long long v = errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED ? g->ecc_corrected
                                                                : g->ecc_uncorrected;
    REQUIRE_GPU_FIELD(v);
    *eccCounts = (unsigned long long)v;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *reasons)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->throttle);
    *reasons = (unsigned long long)g->throttle;
    return NVML_SUCCESS;
}

#ifndef GPUWATCH_FAKE_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *reasons)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->throttle);
    *reasons = (unsigned long long)g->throttle;
    return NVML_SUCCESS;
}
#endif

/* ---------------------------------------------------------------- processes */

/*
 * NVML's two-call protocol: with too small a buffer (or none) return INSUFFICIENT_SIZE and
 * the needed count; SUCCESS with count 0 when nothing runs. A MIG handle lists only its
 * instance's processes; a physical GPU lists all of them.
 */
static nvmlReturn_t list_processes(const fake_gpu *g, const fake_mig *m, nvmlDevice_t device,
                                   int want_graphics, unsigned int *count,
                                   nvmlProcessInfo_v2_t *infos)
{
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    int gpu = device->gpu;
    unsigned int n = 0, capacity = *count;
    for (int i = 0; i < cfg.nprocs; i++) {
        const fake_proc *p = &cfg.procs[i];
        if (p->gpu != gpu || !(want_graphics ? p->graphics : p->compute))
            continue;
        if (m && p->mig != device->mig)
            continue;
        if (infos && n < capacity) {
            const fake_mig *pm = p->mig >= 0 && p->mig < MAX_MIGS ? &g->migs[p->mig] : NULL;
            infos[n].pid = p->pid;
            infos[n].usedGpuMemory = p->mem < 0 ? (unsigned long long)NVML_VALUE_NOT_AVAILABLE
                                                : (unsigned long long)p->mem;
            infos[n].gpuInstanceId = pm ? (unsigned int)pm->gi : 0xFFFFFFFFu;
            infos[n].computeInstanceId = pm ? (unsigned int)pm->ci : 0xFFFFFFFFu;
        }
        n++;
    }
    *count = n;
    if (n == 0)
        return NVML_SUCCESS;
    return (infos && n <= capacity) ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    BEGIN_DEVICE(device);
    return list_processes(g, m, device, 0, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos)
{
    BEGIN_DEVICE(device);
    return list_processes(g, m, device, 1, infoCount, infos);
}

#ifndef GPUWATCH_FAKE_OLD_DRIVER
/* _v3 shares _v2's struct (nvmlProcessInfo_t) in the header; only the symbol differs. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    BEGIN_DEVICE(device);
    return list_processes(g, m, device, 0, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    BEGIN_DEVICE(device);
    return list_processes(g, m, device, 1, infoCount, infos);
}
#endif

/*
 * Per-process utilization, with NVML's two-call protocol (pynvml asks with no buffer first and
 * expects INSUFFICIENT_SIZE). Samples are stamped now, in CPU microseconds as the real one
 * stamps them, so any lastSeenTimeStamp from an earlier answer still sees them.
 */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp)
{
    BEGIN_DEVICE(device);
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m != NULL || g->migmode == NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long stamp =
        (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
    int supported = 0;
    unsigned int n = 0, capacity = *processSamplesCount;
    for (int i = 0; i < cfg.nprocs; i++) {
        const fake_proc *p = &cfg.procs[i];
        if (p->gpu != device->gpu || p->smutil == NOT_SET)
            continue;
        supported = 1;
        if (p->smutil <= 0 || stamp <= lastSeenTimeStamp)
            continue; /* idle over the period: the real library leaves it out */
        if (utilization && n < capacity) {
            nvmlProcessUtilizationSample_t *s = &utilization[n];
            memset(s, 0, sizeof(*s));
            s->pid = p->pid;
            s->timeStamp = stamp;
            s->smUtil = (unsigned int)p->smutil;
        }
        n++;
    }
    *processSamplesCount = n;
    if (!supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    return (utilization && n <= capacity) ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

/* ---------------------------------------------------------------- MIG */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->migmode);
    *currentMode = (unsigned int)g->migmode;
    *pendingMode = (unsigned int)g->migmode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->migmode);
    *count = (unsigned int)g->migmax;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->migmode);
    if (index >= (unsigned int)g->migmax || index >= MAX_MIGS)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->migmode != NVML_DEVICE_MIG_ENABLE || !g->migs[index].present)
        return NVML_ERROR_NOT_FOUND;
    struct nvmlDevice_st *h = &mig_handles[device->gpu][index];
    h->gpu = device->gpu;
    h->mig = (int)index;
    *migDevice = h;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    BEGIN_DEVICE(device);
    *isMigDevice = m != NULL;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    BEGIN_DEVICE(device);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = (unsigned int)m->gi;
    return NVML_SUCCESS;
}

/* A MIG instance's attributes: its GPU instance's slices and its memory; the other counts
 * (multiprocessors, engines) are not played and read 0. Not on a physical GPU (as the real
 * library, which answers NOT_SUPPORTED there), nor on an instance without a slices key. */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    BEGIN_DEVICE(device);
    if (attributes == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!m || m->slices < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(attributes, 0, sizeof *attributes);
    attributes->gpuInstanceSliceCount = (unsigned int)m->slices;
    attributes->computeInstanceSliceCount = (unsigned int)m->slices;
    attributes->memorySizeMB = m->total < 0 ? 0 : (unsigned long long)m->total / (1024 * 1024);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    BEGIN_DEVICE(device);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = (unsigned int)m->ci;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device)
{
    BEGIN_DEVICE(migDevice);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlDevice_st *h = &gpu_handles[migDevice->gpu];
    h->gpu = migDevice->gpu;
    h->mig = -1;
    *device = h;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- PCI and row remapping */

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    BEGIN_DEVICE(device);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    copy_str(pci->busId, sizeof pci->busId, g->bus);
    copy_str(pci->busIdLegacy, sizeof pci->busIdLegacy, g->bus + 4); /* 0000:18:00.0 */
    pci->bus = (unsigned int)(0x18 + device->gpu);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred)
{
    BEGIN_DEVICE(device);
    REQUIRE_GPU_FIELD(g->remap_corr);
    REQUIRE_GPU_FIELD(g->remap_unc);
    REQUIRE_GPU_FIELD(g->remap_pending);
    REQUIRE_GPU_FIELD(g->remap_failure);
    *corrRows = (unsigned int)g->remap_corr;
    *uncRows = (unsigned int)g->remap_unc;
    *isPending = (unsigned int)g->remap_pending;
    *failureOccurred = (unsigned int)g->remap_failure;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- events (Xid) */

static int valid_set(nvmlEventSet_t set)
{
    return set && set >= event_sets && set < event_sets + MAX_EVENT_SETS && set->used;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    BEGIN();
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < MAX_EVENT_SETS; i++) {
        if (!event_sets[i].used) {
            memset(&event_sets[i], 0, sizeof event_sets[i]);
            event_sets[i].used = 1;
            event_sets[i].cursor = cfg.nxids; /* only events raised from now on */
            *set = &event_sets[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_MEMORY;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    BEGIN_DEVICE(device);
    if (!eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = m ? 0 : nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set)
{
    BEGIN_DEVICE(device);
    if (!valid_set(set) || m)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(unsigned long long)(nvmlEventTypeXidCriticalError |
                                           nvmlEventTypeDoubleBitEccError))
        return NVML_ERROR_NOT_SUPPORTED;
    set->registered[device->gpu] |= eventTypes;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    (void)timeoutms; /* never blocks: a test has nothing else that could raise an event */
    BEGIN();
    if (!valid_set(set) || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    while (set->cursor < cfg.nxids) {
        const fake_xid *x = &cfg.xids[set->cursor++];
        if (x->gpu < 0 || x->gpu >= MAX_GPUS ||
            !(set->registered[x->gpu] & nvmlEventTypeXidCriticalError))
            continue; /* not registered in this set: never delivered to it */
        memset(data, 0, sizeof *data);
        gpu_handles[x->gpu].gpu = x->gpu;
        gpu_handles[x->gpu].mig = -1;
        data->device = &gpu_handles[x->gpu];
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = x->code;
        data->gpuInstanceId = 0xFFFFFFFFu;
        data->computeInstanceId = 0xFFFFFFFFu;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    /* Like shutdown, freeing must work whatever state the driver is in. */
    load_config();
    nvmlReturn_t r = injected_failure(__func__);
    if (r != NVML_SUCCESS)
        return r;
    if (!valid_set(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    set->used = 0;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- GPM */

/* Live samples (allocated, not yet freed): a test reads it with ctypes to check for leaks. */
__attribute__((visibility("default"))) int gpuwatch_fake_gpm_live_samples;

#ifndef GPUWATCH_FAKE_OLD_DRIVER
#define GPM_MAGIC 0x47504d53 /* "GPMS": tells our samples from a stray pointer */

struct nvmlGpmSample_st {
    int magic;
    int filled;
    int gpu, mig; /* mig: the instance's slot, -1 for the whole GPU */
    unsigned long long seq;
};

static unsigned long long gpm_seq; /* every sample taken gets the next number */

static int valid_sample(nvmlGpmSample_t s)
{
    return s && s->magic == GPM_MAGIC;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
    BEGIN_DEVICE(device);
    if (!gpmSupport)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    gpmSupport->isSupportedDevice = g->gpmsupport > 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
    BEGIN();
    if (!gpmSample)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlGpmSample_t s = calloc(1, sizeof *s);
    if (!s)
        return NVML_ERROR_MEMORY;
    s->magic = GPM_MAGIC;
    __atomic_add_fetch(&gpuwatch_fake_gpm_live_samples, 1, __ATOMIC_SEQ_CST);
    *gpmSample = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
    /* Like shutdown, freeing must work whatever state the driver is in. */
    load_config();
    nvmlReturn_t r = injected_failure(__func__);
    if (r != NVML_SUCCESS)
        return r;
    if (!valid_sample(gpmSample))
        return NVML_ERROR_INVALID_ARGUMENT;
    gpmSample->magic = 0; /* a second free of the same sample is caught, not a double free */
    free(gpmSample);
    __atomic_sub_fetch(&gpuwatch_fake_gpm_live_samples, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

/* The checks both sample calls share: a physical GPU's handle, GPM supported, no injected
 * per-GPU failure. */
static nvmlReturn_t gpm_sampleable(const fake_gpu *g, const fake_mig *m, nvmlGpmSample_t s)
{
    if (m != NULL || !valid_sample(s))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->gpmfail != 0)
        return (nvmlReturn_t)g->gpmfail;
    if (g->gpmsupport <= 0)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static void gpm_fill(nvmlGpmSample_t s, int gpu, int mig)
{
    s->filled = 1;
    s->gpu = gpu;
    s->mig = mig;
    s->seq = __atomic_add_fetch(&gpm_seq, 1, __ATOMIC_SEQ_CST);
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
    BEGIN_DEVICE(device);
    r_ = gpm_sampleable(g, m, gpmSample);
    if (r_ != NVML_SUCCESS)
        return r_;
    gpm_fill(gpmSample, device->gpu, -1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                 nvmlGpmSample_t gpmSample)
{
    BEGIN_DEVICE(device);
    r_ = gpm_sampleable(g, m, gpmSample);
    if (r_ != NVML_SUCCESS)
        return r_;
    if (g->migmode != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    for (int slot = 0; slot < MAX_MIGS; slot++) {
        if (g->migs[slot].present && g->migs[slot].gi == (long long)gpuInstanceId) {
            gpm_fill(gpmSample, device->gpu, slot);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* The configured percent of one metric on a sample's device, or NOT_SET. */
static long long gpm_value(const fake_gpu *g, int mig, unsigned int metricId)
{
    const fake_gpm *gpm = mig >= 0 ? &g->migs[mig].gpm : &g->gpm;
    switch (metricId) {
    case NVML_GPM_METRIC_GRAPHICS_UTIL: return mig >= 0 ? NOT_SET : g->util;
    case NVML_GPM_METRIC_SM_UTIL: return gpm->smactive;
    case NVML_GPM_METRIC_SM_OCCUPANCY: return gpm->smocc;
    case NVML_GPM_METRIC_ANY_TENSOR_UTIL: return gpm->tensor;
    case NVML_GPM_METRIC_DRAM_BW_UTIL: return gpm->dram;
    case NVML_GPM_METRIC_FP64_UTIL: return gpm->fp64;
    case NVML_GPM_METRIC_FP32_UTIL: return gpm->fp32;
    case NVML_GPM_METRIC_FP16_UTIL: return gpm->fp16;
    default: return NOT_SET;
    }
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
    BEGIN();
    if (!metricsGet)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpmSample_t a = metricsGet->sample1, b = metricsGet->sample2;
    if (!valid_sample(a) || !valid_sample(b) || !a->filled || !b->filled)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (a->gpu != b->gpu || a->mig != b->mig || b->seq <= a->seq)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (metricsGet->numMetrics > NVML_GPM_METRIC_MAX || a->gpu >= cfg.ngpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fake_gpu *g = &cfg.gpus[a->gpu];
    if (g->lost)
        return NVML_ERROR_GPU_IS_LOST;
    for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &metricsGet->metrics[i];
        long long value = gpm_value(g, a->mig, metric->metricId);
        metric->nvmlReturn = value < 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
        metric->value = value < 0 ? 0.0 : (double)value;
        memset(&metric->metricInfo, 0, sizeof metric->metricInfo);
    }
    return NVML_SUCCESS;
}
#endif
