/*
 * fake_nvml.c - a test double for NVIDIA's NVML (libnvidia-ml.so.1).
 *
 * GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
 *
 * The real Python binding (nvidia-ml-py, module pynvml) loads this library
 * with ctypes exactly as it loads the vendor library. Every answer comes from
 * a JSON fixture named by $FAKE_NVML_FIXTURE (default
 * /etc/fake-nvml/fixture.json), read on the first successful nvmlInit*
 * (and again whenever it changes, with "live": true). What the setters
 * change is kept in a JSON state file that every process using the double
 * reads, like the driver's state. The fixture schema is documented in
 * README.md next to this file.
 *
 * Rules:
 *   - fixture missing/unreadable  -> nvmlInit* returns NVML_ERROR_DRIVER_NOT_LOADED
 *   - fixture is not valid JSON   -> nvmlInit* returns NVML_ERROR_UNKNOWN
 *                                    (and a diagnostic is printed on stderr)
 *   - "init_error" set            -> nvmlInit* returns that error
 *   - value absent or null        -> NVML_ERROR_NOT_SUPPORTED
 *   - value of the wrong type     -> NVML_ERROR_UNKNOWN (+ stderr diagnostic)
 *   - "errors" map entry          -> that error is returned instead
 *   - "hang_ms" map entry         -> that call sleeps first (a GPU that hangs NVML)
 *   - "live": true                -> the fixture is read again when it is replaced
 *                                    (a bad version keeps the previous one)
 *   - setter called by non-root   -> NVML_ERROR_NO_PERMISSION
 *   - setter succeeds             -> "state_file" (default /run/fake-nvml/state.json)
 *                                    holds the change; the getters answer with it
 *
 * Self-contained on purpose (libc only) so it builds anywhere with:
 *   gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o libnvidia-ml.so.1 fake_nvml.c
 */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define DEFAULT_FIXTURE "/etc/fake-nvml/fixture.json"
/* under /run, so cleared at boot like a real power limit or clock lock */
#define DEFAULT_STATE_FILE "/run/fake-nvml/state.json"
#define MAX_DEVICES 64

/* ------------------------------------------------------------------ */
/* NVML types and constants (values as in nvml.h / pynvml)             */
/* ------------------------------------------------------------------ */

typedef int nvmlReturn_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_UNKNOWN 999

struct fake_device {
    const struct jv *json;
    unsigned int index;
};
typedef struct fake_device *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int version;
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int baseClass;
    unsigned int subClass;
    char busId[32];
} nvmlPciInfoExt_t;
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24U))
#define nvmlPciInfoExt_v1 NVML_STRUCT_VERSION(sizeof(nvmlPciInfoExt_t), 1)

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
    unsigned long long bar1Total;
    unsigned long long bar1Free;
    unsigned long long bar1Used;
} nvmlBAR1Memory_t;

typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_t;
#define nvmlTemperature_v1 NVML_STRUCT_VERSION(sizeof(nvmlTemperature_t), 1)

typedef struct {
    unsigned int version;
    unsigned int powerScope; /* nvmlPowerScopeType_t: 0 GPU, 1 module, 2 memory */
    unsigned int powerValueMw;
} nvmlPowerValue_v2_t;
#define nvmlPowerValue_v2 NVML_STRUCT_VERSION(sizeof(nvmlPowerValue_v2_t), 2)

/* The struct versions must match what pynvml sends (see pynvml.py). */
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(nvmlPciInfoExt_v1 == 0x1000040, "nvmlPciInfoExt_v1");
_Static_assert(nvmlMemory_v2 == 0x02000028, "nvmlMemory_v2");
_Static_assert(nvmlTemperature_v1 == 0x100000C, "nvmlTemperature_v1");
_Static_assert(nvmlPowerValue_v2 == 0x0200000C, "nvmlPowerValue_v2");

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t layout");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t layout");

/* nvmlValueType_t */
#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_VALUE_TYPE_UNSIGNED_LONG_LONG 3
/* nvmlEventType* bits */
#define NVML_EVENT_TYPE_XID_CRITICAL_ERROR 0x8ULL
/* nvmlFieldValue_t field ids used by name in fixtures */
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230

struct named_value {
    const char *name;
    long long value;
};

static const struct named_value error_names[] = {
    {"NVML_SUCCESS", 0},
    {"NVML_ERROR_UNINITIALIZED", 1},
    {"NVML_ERROR_INVALID_ARGUMENT", 2},
    {"NVML_ERROR_NOT_SUPPORTED", 3},
    {"NVML_ERROR_NO_PERMISSION", 4},
    {"NVML_ERROR_ALREADY_INITIALIZED", 5},
    {"NVML_ERROR_NOT_FOUND", 6},
    {"NVML_ERROR_INSUFFICIENT_SIZE", 7},
    {"NVML_ERROR_INSUFFICIENT_POWER", 8},
    {"NVML_ERROR_DRIVER_NOT_LOADED", 9},
    {"NVML_ERROR_TIMEOUT", 10},
    {"NVML_ERROR_IRQ_ISSUE", 11},
    {"NVML_ERROR_LIBRARY_NOT_FOUND", 12},
    {"NVML_ERROR_FUNCTION_NOT_FOUND", 13},
    {"NVML_ERROR_CORRUPTED_INFOROM", 14},
    {"NVML_ERROR_GPU_IS_LOST", 15},
    {"NVML_ERROR_RESET_REQUIRED", 16},
    {"NVML_ERROR_OPERATING_SYSTEM", 17},
    {"NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18},
    {"NVML_ERROR_IN_USE", 19},
    {"NVML_ERROR_MEMORY", 20},
    {"NVML_ERROR_NO_DATA", 21},
    {"NVML_ERROR_VGPU_ECC_NOT_SUPPORTED", 22},
    {"NVML_ERROR_INSUFFICIENT_RESOURCES", 23},
    {"NVML_ERROR_FREQ_NOT_SUPPORTED", 24},
    {"NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25},
    {"NVML_ERROR_DEPRECATED", 26},
    {"NVML_ERROR_NOT_READY", 27},
    {"NVML_ERROR_GPU_NOT_FOUND", 28},
    {"NVML_ERROR_INVALID_STATE", 29},
    {"NVML_ERROR_RESET_TYPE_NOT_SUPPORTED", 30},
    {"NVML_ERROR_UNKNOWN", 999},
    {NULL, 0},
};

static const struct named_value topology_names[] = {
    {"internal", 0}, {"single", 10}, {"multiple", 20}, {"hostbridge", 30},
    {"node", 40}, {"cpu", 40}, {"system", 50}, {NULL, 0},
};

static const struct named_value p2p_status_names[] = {
    {"ok", 0}, {"chipset_not_supported", 1}, {"gpu_not_supported", 2},
    {"iohtopology_not_supported", 3}, {"ioh_topology_not_supported", 3},
    {"disabled_by_regkey", 4}, {"not_supported", 5}, {"unknown", 6}, {NULL, 0},
};

static const struct named_value compute_mode_names[] = {
    {"default", 0}, {"exclusive_thread", 1}, {"prohibited", 2},
    {"exclusive_process", 3}, {NULL, 0},
};

static const struct named_value architecture_names[] = {
    {"kepler", 2}, {"maxwell", 3}, {"pascal", 4}, {"volta", 5}, {"turing", 6},
    {"ampere", 7}, {"ada", 8}, {"hopper", 9}, {"blackwell", 10}, {"rubin", 13},
    {"unknown", 0xffffffffLL}, {NULL, 0},
};

static const struct named_value event_type_names[] = {
    {"single_bit_ecc_error", 0x1}, {"double_bit_ecc_error", 0x2}, {"pstate", 0x4},
    {"xid_critical_error", 0x8}, {"xid", 0x8}, {"clock", 0x10}, {"power_source_change", 0x80},
    {"mig_config_change", 0x100}, {"single_bit_ecc_error_storm", 0x200},
    {"dram_retirement_event", 0x400}, {"dram_retirement_failure", 0x800},
    {"non_fatal_poison_error", 0x1000}, {"fatal_poison_error", 0x2000},
    {"gpu_unavailable_error", 0x4000}, {"gpu_recovery_action", 0x8000}, {NULL, 0},
};

/* Field ids a fixture may name in "field_values" (any id may be given as a number). */
static const struct named_value field_id_names[] = {
    {"NVML_FI_DEV_PCIE_REPLAY_COUNTER", 94},
    {"NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER", 95},
    {"NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230},
    {"recovery_action", 230},
    {NULL, 0},
};

static const struct named_value enable_state_names[] = {
    {"disabled", 0}, {"enabled", 1}, {NULL, 0},
};

/* ------------------------------------------------------------------ */
/* Diagnostics                                                         */
/* ------------------------------------------------------------------ */

static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...)
{
    va_list ap;
    fputs("fake_nvml: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ------------------------------------------------------------------ */
/* A small JSON parser (RFC 8259, UTF-8 in, UTF-8 out)                 */
/* ------------------------------------------------------------------ */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
    enum jtype type;
    int boolean;
    double num;
    int is_int;           /* number written without fraction/exponent */
    long long inum;       /* exact value when is_int */
    int neg;
    unsigned long long unum; /* exact magnitude when is_int */
    char *str;
    size_t n;             /* array/object length */
    struct jv **items;    /* array items or object values */
    char **keys;          /* object keys */
};

struct jparser {
    const char *p;
    const char *start;
    const char *end;
    char err[160];
};

static void jfree(struct jv *v)
{
    size_t i;
    if (!v)
        return;
    free(v->str);
    for (i = 0; i < v->n; i++) {
        jfree(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v);
}

static void jerror(struct jparser *ps, const char *msg)
{
    int line = 1, col = 1;
    const char *q;
    if (ps->err[0])
        return;
    for (q = ps->start; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    snprintf(ps->err, sizeof(ps->err), "%s at line %d column %d", msg, line, col);
}

static void jskip_ws(struct jparser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static struct jv *jnew(enum jtype t)
{
    struct jv *v = calloc(1, sizeof(*v));
    if (v)
        v->type = t;
    return v;
}

static int jappend(struct jv *v, char *key, struct jv *item)
{
    struct jv **items = realloc(v->items, (v->n + 1) * sizeof(*items));
    if (!items)
        return -1;
    v->items = items;
    if (v->type == J_OBJ) {
        char **keys = realloc(v->keys, (v->n + 1) * sizeof(*keys));
        if (!keys)
            return -1;
        v->keys = keys;
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int jparse_hex4(struct jparser *ps, unsigned int *out)
{
    int i;
    unsigned int v = 0;
    if (ps->end - ps->p < 4) {
        jerror(ps, "truncated \\u escape");
        return -1;
    }
    for (i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0) {
            jerror(ps, "bad \\u escape");
            return -1;
        }
        v = (v << 4) | (unsigned int)h;
    }
    ps->p += 4;
    *out = v;
    return 0;
}

static size_t utf8_encode(unsigned int cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string starting at the opening quote; returns a malloc'd copy. */
static char *jparse_string_raw(struct jparser *ps)
{
    size_t cap = 32, len = 0;
    char *buf;
    ps->p++; /* opening quote */
    buf = malloc(cap);
    if (!buf) {
        jerror(ps, "out of memory");
        return NULL;
    }
    for (;;) {
        char c;
        char tmp[4];
        size_t tlen = 0;
        if (ps->p >= ps->end) {
            jerror(ps, "unterminated string");
            free(buf);
            return NULL;
        }
        c = *ps->p++;
        if (c == '"')
            break;
        if ((unsigned char)c < 0x20) {
            ps->p--;
            jerror(ps, "control character in string");
            free(buf);
            return NULL;
        }
        if (c != '\\') {
            tmp[0] = c;
            tlen = 1;
        } else {
            if (ps->p >= ps->end) {
                jerror(ps, "unterminated escape");
                free(buf);
                return NULL;
            }
            c = *ps->p++;
            switch (c) {
            case '"': tmp[0] = '"'; tlen = 1; break;
            case '\\': tmp[0] = '\\'; tlen = 1; break;
            case '/': tmp[0] = '/'; tlen = 1; break;
            case 'b': tmp[0] = '\b'; tlen = 1; break;
            case 'f': tmp[0] = '\f'; tlen = 1; break;
            case 'n': tmp[0] = '\n'; tlen = 1; break;
            case 'r': tmp[0] = '\r'; tlen = 1; break;
            case 't': tmp[0] = '\t'; tlen = 1; break;
            case 'u': {
                unsigned int cp, lo;
                if (jparse_hex4(ps, &cp) < 0) {
                    free(buf);
                    return NULL;
                }
                if (cp >= 0xD800 && cp <= 0xDBFF && ps->end - ps->p >= 6 &&
                    ps->p[0] == '\\' && ps->p[1] == 'u') {
                    ps->p += 2;
                    if (jparse_hex4(ps, &lo) < 0) {
                        free(buf);
                        return NULL;
                    }
                    if (lo >= 0xDC00 && lo <= 0xDFFF)
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    else
                        cp = 0xFFFD;
                } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                    cp = 0xFFFD;
                }
                tlen = utf8_encode(cp, tmp);
                break;
            }
            default:
                ps->p--;
                jerror(ps, "bad escape in string");
                free(buf);
                return NULL;
            }
        }
        if (len + tlen + 1 > cap) {
            char *nb;
            cap = cap * 2 + tlen;
            nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                jerror(ps, "out of memory");
                return NULL;
            }
            buf = nb;
        }
        memcpy(buf + len, tmp, tlen);
        len += tlen;
    }
    buf[len] = '\0';
    return buf;
}

static struct jv *jparse_value(struct jparser *ps, int depth);

static struct jv *jparse_number(struct jparser *ps)
{
    const char *s = ps->p;
    const char *q = s;
    int is_int = 1;
    char tmp[64];
    size_t len;
    struct jv *v;

    if (q < ps->end && *q == '-')
        q++;
    if (q >= ps->end || !isdigit((unsigned char)*q)) {
        jerror(ps, "bad number");
        return NULL;
    }
    if (*q == '0' && q + 1 < ps->end && isdigit((unsigned char)q[1])) {
        jerror(ps, "leading zero in number");
        return NULL;
    }
    while (q < ps->end && isdigit((unsigned char)*q))
        q++;
    if (q < ps->end && *q == '.') {
        is_int = 0;
        q++;
        if (q >= ps->end || !isdigit((unsigned char)*q)) {
            jerror(ps, "bad fraction");
            return NULL;
        }
        while (q < ps->end && isdigit((unsigned char)*q))
            q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        is_int = 0;
        q++;
        if (q < ps->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= ps->end || !isdigit((unsigned char)*q)) {
            jerror(ps, "bad exponent");
            return NULL;
        }
        while (q < ps->end && isdigit((unsigned char)*q))
            q++;
    }
    len = (size_t)(q - s);
    if (len >= sizeof(tmp)) {
        jerror(ps, "number too long");
        return NULL;
    }
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    v = jnew(J_NUM);
    if (!v) {
        jerror(ps, "out of memory");
        return NULL;
    }
    v->num = strtod(tmp, NULL);
    if (is_int) {
        const char *digits = tmp[0] == '-' ? tmp + 1 : tmp;
        errno = 0;
        v->unum = strtoull(digits, NULL, 10);
        if (errno == ERANGE) {
            is_int = 0;
        } else {
            v->neg = tmp[0] == '-';
            v->inum = v->neg ? -(long long)v->unum : (long long)v->unum;
        }
    }
    v->is_int = is_int;
    ps->p = q;
    return v;
}

static int jmatch(struct jparser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, word, n) == 0) {
        ps->p += n;
        return 1;
    }
    return 0;
}

static struct jv *jparse_value(struct jparser *ps, int depth)
{
    struct jv *v;
    if (depth > 64) {
        jerror(ps, "nesting too deep");
        return NULL;
    }
    jskip_ws(ps);
    if (ps->p >= ps->end) {
        jerror(ps, "unexpected end of input");
        return NULL;
    }
    switch (*ps->p) {
    case '{':
        v = jnew(J_OBJ);
        if (!v) {
            jerror(ps, "out of memory");
            return NULL;
        }
        ps->p++;
        jskip_ws(ps);
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            return v;
        }
        for (;;) {
            char *key;
            struct jv *item;
            jskip_ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') {
                jerror(ps, "expected object key");
                jfree(v);
                return NULL;
            }
            key = jparse_string_raw(ps);
            if (!key) {
                jfree(v);
                return NULL;
            }
            jskip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                jerror(ps, "expected ':'");
                free(key);
                jfree(v);
                return NULL;
            }
            ps->p++;
            item = jparse_value(ps, depth + 1);
            if (!item || jappend(v, key, item) < 0) {
                jerror(ps, "out of memory");
                free(key);
                jfree(item);
                jfree(v);
                return NULL;
            }
            jskip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == '}') {
                ps->p++;
                return v;
            }
            jerror(ps, "expected ',' or '}'");
            jfree(v);
            return NULL;
        }
    case '[':
        v = jnew(J_ARR);
        if (!v) {
            jerror(ps, "out of memory");
            return NULL;
        }
        ps->p++;
        jskip_ws(ps);
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            return v;
        }
        for (;;) {
            struct jv *item = jparse_value(ps, depth + 1);
            if (!item || jappend(v, NULL, item) < 0) {
                jerror(ps, "out of memory");
                jfree(item);
                jfree(v);
                return NULL;
            }
            jskip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == ']') {
                ps->p++;
                return v;
            }
            jerror(ps, "expected ',' or ']'");
            jfree(v);
            return NULL;
        }
    case '"': {
        char *s = jparse_string_raw(ps);
        if (!s)
            return NULL;
        v = jnew(J_STR);
        if (!v) {
            free(s);
            jerror(ps, "out of memory");
            return NULL;
        }
        v->str = s;
        return v;
    }
    default:
        if (jmatch(ps, "true")) {
            v = jnew(J_BOOL);
            if (v)
                v->boolean = 1;
            return v;
        }
        if (jmatch(ps, "false"))
            return jnew(J_BOOL);
        if (jmatch(ps, "null"))
            return jnew(J_NULL);
        if (*ps->p == '-' || isdigit((unsigned char)*ps->p))
            return jparse_number(ps);
        jerror(ps, "unexpected character");
        return NULL;
    }
}

static struct jv *jparse_document(const char *text, size_t len, char *err, size_t errlen)
{
    struct jparser ps;
    struct jv *v;
    memset(&ps, 0, sizeof(ps));
    ps.p = ps.start = text;
    ps.end = text + len;
    /* tolerate a UTF-8 byte order mark */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        ps.p += 3;
    v = jparse_value(&ps, 0);
    if (v) {
        jskip_ws(&ps);
        if (ps.p != ps.end) {
            jerror(&ps, "trailing data after JSON value");
            jfree(v);
            v = NULL;
        }
    }
    if (!v)
        snprintf(err, errlen, "%s", ps.err[0] ? ps.err : "parse error");
    return v;
}

/* Object member lookup; JSON null counts as absent. */
static const struct jv *jget(const struct jv *obj, const char *key)
{
    size_t i;
    if (!obj || obj->type != J_OBJ)
        return NULL;
    for (i = obj->n; i > 0; i--) { /* last duplicate wins, like Python */
        if (strcmp(obj->keys[i - 1], key) == 0) {
            const struct jv *v = obj->items[i - 1];
            return v->type == J_NULL ? NULL : v;
        }
    }
    return NULL;
}

/* Dotted path lookup: "power.usage_mw". */
static const struct jv *jpath(const struct jv *obj, const char *path)
{
    char part[64];
    const char *dot;
    while (obj && (dot = strchr(path, '.')) != NULL) {
        size_t n = (size_t)(dot - path);
        if (n >= sizeof(part))
            return NULL;
        memcpy(part, path, n);
        part[n] = '\0';
        obj = jget(obj, part);
        path = dot + 1;
    }
    return jget(obj, path);
}

/* ------------------------------------------------------------------ */
/* Fixture state                                                       */
/* ------------------------------------------------------------------ */

static struct jv *g_root;                     /* read with root() */
static unsigned int g_refcount;
static unsigned int g_ndev;                   /* fixed at nvmlInit */
static struct fake_device g_dev[MAX_DEVICES]; /* handles; json read with dev_json() */
static char g_fixture_path[4096];

static int lookup_name(const struct named_value *table, const char *s, long long *out)
{
    for (; table->name; table++) {
        if (strcasecmp(table->name, s) == 0) {
            *out = table->value;
            return 1;
        }
    }
    return 0;
}

/*
 * Integer from a JSON number, a boolean, a numeric string ("0x2BB110DE"),
 * or (when table is given) a symbolic name. Returns 1 on success.
 */
static int jv_to_ll(const struct jv *v, const struct named_value *table, long long *out)
{
    if (!v)
        return 0;
    switch (v->type) {
    case J_NUM:
        if (v->is_int) {
            *out = v->inum;
            return 1;
        }
        if (v->num == (double)(long long)v->num) {
            *out = (long long)v->num;
            return 1;
        }
        return 0;
    case J_BOOL:
        *out = v->boolean;
        return 1;
    case J_STR: {
        char *endp;
        if (table && lookup_name(table, v->str, out))
            return 1;
        if (table == error_names) {
            /* allow the short form: "NOT_SUPPORTED" */
            char buf[96];
            snprintf(buf, sizeof(buf), "NVML_ERROR_%s", v->str);
            if (lookup_name(table, buf, out))
                return 1;
        }
        if (!v->str[0])
            return 0;
        errno = 0;
        *out = strtoll(v->str, &endp, 0);
        if (errno == ERANGE) {
            unsigned long long u;
            errno = 0;
            u = strtoull(v->str, &endp, 0);
            if (errno)
                return 0;
            *out = (long long)u;
        }
        return *endp == '\0';
    }
    default:
        return 0;
    }
}

static int jv_to_u64(const struct jv *v, unsigned long long *out)
{
    if (v && v->type == J_NUM && v->is_int && !v->neg) {
        *out = v->unum;
        return 1;
    }
    if (v && v->type == J_STR && v->str[0] && v->str[0] != '-') {
        char *endp;
        errno = 0;
        *out = strtoull(v->str, &endp, 0);
        return errno == 0 && *endp == '\0';
    }
    {
        long long ll;
        if (jv_to_ll(v, NULL, &ll) && ll >= 0) {
            *out = (unsigned long long)ll;
            return 1;
        }
    }
    return 0;
}

/*
 * Trees are swapped while other threads answer from the one they hold
 * (nvmlEventSetWait runs beside queries in the GPU exporter): a new tree is
 * published with an atomic store and a replaced one is only retired, then
 * freed by the last nvmlShutdown, when no call can be using it.
 */
struct retired {
    struct retired *next;
    struct jv *tree;
    struct fake_state *state;
};

/* What identifies a version of a file that is replaced by rename. */
struct file_sig {
    int exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    long long mtime_ns;
};

/* What the setters changed on one GPU (the state file's entry for it). */
struct dev_state {
    int has_power_limit;
    unsigned int power_limit_mw;
    int has_locked_clocks;
    unsigned int clocks_min_mhz, clocks_max_mhz;
};

struct fake_state {
    struct dev_state dev[MAX_DEVICES];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* init, shutdown, reloads */
static struct retired *g_retired;
static int g_live;                     /* "live": true in the fixture now in use */
static struct file_sig g_fixture_sig;  /* the fixture version in use */
static struct fake_state *g_state;     /* read with set_state(); NULL: nothing set */
static char g_state_path[4096];
static struct file_sig g_state_sig;    /* the state file version in use */

static const struct jv *root(void)
{
    return __atomic_load_n(&g_root, __ATOMIC_ACQUIRE);
}

static const struct jv *dev_json(const struct fake_device *d)
{
    return __atomic_load_n(&d->json, __ATOMIC_ACQUIRE);
}

static const struct dev_state *set_state(const struct fake_device *d)
{
    const struct fake_state *st = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
    return st ? &st->dev[d->index] : NULL;
}

static void retire(struct jv *tree, struct fake_state *state)
{
    struct retired *node;
    if (!tree && !state)
        return;
    node = calloc(1, sizeof(*node));
    if (!node)
        return; /* leaked: still safe for a caller holding it */
    node->tree = tree;
    node->state = state;
    node->next = g_retired;
    g_retired = node;
}

/* Called with g_lock held. */
static void free_fixture(void)
{
    while (g_retired) {
        struct retired *next = g_retired->next;
        jfree(g_retired->tree);
        free(g_retired->state);
        free(g_retired);
        g_retired = next;
    }
    jfree(g_root);
    g_root = NULL;
    free(g_state);
    g_state = NULL;
    g_ndev = 0;
    g_live = 0;
    memset(g_dev, 0, sizeof(g_dev));
    memset(&g_fixture_sig, 0, sizeof(g_fixture_sig));
    memset(&g_state_sig, 0, sizeof(g_state_sig));
    g_state_path[0] = '\0';
}

static void sig_from_stat(const struct stat *st, struct file_sig *sig)
{
    memset(sig, 0, sizeof(*sig));
    sig->exists = 1;
    sig->dev = st->st_dev;
    sig->ino = st->st_ino;
    sig->size = st->st_size;
    sig->mtime_ns = (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

/* 0 and sig->exists = 0 when the file is missing; -1 on other errors. */
static int file_sig_get(const char *path, struct file_sig *sig)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        memset(sig, 0, sizeof(*sig));
        return errno == ENOENT ? 0 : -1;
    }
    sig_from_stat(&st, sig);
    return 0;
}

static int file_sig_same(const struct file_sig *a, const struct file_sig *b)
{
    if (a->exists != b->exists)
        return 0;
    return !a->exists || (a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns);
}

/* The whole file; sig (optional) is that of the version read, not of the path later. */
static char *read_file(const char *path, size_t *len, struct file_sig *sig)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    struct stat st;
    if (!f)
        return NULL;
    if (sig) {
        if (fstat(fileno(f), &st) != 0) {
            fclose(f);
            return NULL;
        }
        sig_from_stat(&st, sig);
    }
    for (;;) {
        size_t got;
        if (n + 4096 + 1 > cap) {
            char *nb;
            cap = cap ? cap * 2 : 16384;
            nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/*
 * Reads and checks a fixture (init_error is the caller's business).
 * note ends each diagnostic: what happens next.
 */
static nvmlReturn_t parse_fixture(const char *path, const char *note, int loud, struct jv **out,
                                  unsigned int *ndev, struct file_sig *sig)
{
    char *text;
    size_t len = 0, i;
    char err[200];
    struct jv *tree;
    const struct jv *devs;

    text = read_file(path, &len, sig);
    if (!text) {
        if (loud || getenv("FAKE_NVML_DEBUG"))
            diag("cannot read fixture %s: %s%s", path, strerror(errno), note);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    tree = jparse_document(text, len, err, sizeof(err));
    free(text);
    if (!tree) {
        diag("invalid JSON in fixture %s: %s%s", path, err, note);
        return NVML_ERROR_UNKNOWN;
    }
    if (tree->type != J_OBJ) {
        diag("fixture %s: top level must be a JSON object%s", path, note);
        jfree(tree);
        return NVML_ERROR_UNKNOWN;
    }
    devs = jget(tree, "devices");
    if (devs && devs->type != J_ARR) {
        diag("fixture %s: devices must be a list%s", path, note);
        jfree(tree);
        return NVML_ERROR_UNKNOWN;
    }
    if (devs && devs->n > MAX_DEVICES) {
        diag("fixture %s: more than %d devices%s", path, MAX_DEVICES, note);
        jfree(tree);
        return NVML_ERROR_UNKNOWN;
    }
    for (i = 0; devs && i < devs->n; i++) {
        if (devs->items[i]->type != J_OBJ) {
            diag("fixture %s: devices[%zu] must be an object%s", path, i, note);
            jfree(tree);
            return NVML_ERROR_UNKNOWN;
        }
    }
    *ndev = devs ? (unsigned int)devs->n : 0;
    *out = tree;
    return NVML_SUCCESS;
}

static int fixture_is_live(const struct jv *tree)
{
    long long on = 0;
    return jv_to_ll(jget(tree, "live"), NULL, &on) && on != 0;
}

static const char *state_path(const struct jv *tree)
{
    const struct jv *v = jget(tree, "state_file");
    return v && v->type == J_STR && v->str[0] ? v->str : DEFAULT_STATE_FILE;
}

/* Called with g_lock held. */
static nvmlReturn_t load_fixture(void)
{
    const char *path = getenv("FAKE_NVML_FIXTURE");
    const struct jv *devs, *init_error;
    struct jv *tree = NULL;
    struct file_sig sig;
    unsigned int ndev = 0, i;
    long long code;
    nvmlReturn_t r;

    if (!path || !*path)
        path = DEFAULT_FIXTURE;
    snprintf(g_fixture_path, sizeof(g_fixture_path), "%s", path);
    r = parse_fixture(path, "", 0, &tree, &ndev, &sig);
    if (r != NVML_SUCCESS)
        return r;
    init_error = jget(tree, "init_error");
    if (init_error) {
        if (!jv_to_ll(init_error, error_names, &code)) {
            diag("fixture %s: init_error is not an NVML error name or number", path);
            jfree(tree);
            return NVML_ERROR_UNKNOWN;
        }
        if (code != NVML_SUCCESS) {
            jfree(tree);
            return (nvmlReturn_t)code;
        }
    }
    devs = jget(tree, "devices");
    for (i = 0; i < ndev; i++) {
        g_dev[i].json = devs->items[i];
        g_dev[i].index = i;
    }
    g_ndev = ndev;
    g_fixture_sig = sig;
    g_live = fixture_is_live(tree);
    __atomic_store_n(&g_root, tree, __ATOMIC_RELEASE);
    return NVML_SUCCESS;
}

/*
 * Called with g_lock held: a live fixture that changed on disk is read
 * again. Handles stay valid: the device list keeps its length and order, each
 * handle answers from its entry in the new tree.
 */
static void reload_fixture(void)
{
    static const char keep[] = "; keeping the previous fixture";
    struct file_sig now, sig;
    struct jv *tree = NULL;
    const struct jv *devs;
    unsigned int ndev = 0, i;

    if (!g_live || file_sig_get(g_fixture_path, &now) != 0 || !now.exists || file_sig_same(&now, &g_fixture_sig))
        return; /* a rename-over never leaves the path missing; wait for the next version */
    sig = now;
    if (parse_fixture(g_fixture_path, keep, 1, &tree, &ndev, &sig) != NVML_SUCCESS) {
        g_fixture_sig = sig; /* one diagnostic per bad version */
        return;
    }
    g_fixture_sig = sig;
    if (ndev != g_ndev) {
        diag("fixture %s: %u devices instead of %u (the device list is fixed at nvmlInit)%s",
             g_fixture_path, ndev, g_ndev, keep);
        jfree(tree);
        return;
    }
    devs = jget(tree, "devices");
    for (i = 0; i < ndev; i++)
        __atomic_store_n(&g_dev[i].json, devs->items[i], __ATOMIC_RELEASE);
    retire(g_root, NULL);
    __atomic_store_n(&g_root, tree, __ATOMIC_RELEASE);
    g_live = fixture_is_live(tree);
}

/* ------------------------------------------------------------------ */
/* State file: what the setters changed, shared by every process       */
/* ------------------------------------------------------------------ */

static int state_uint(const struct jv *v, unsigned int *out)
{
    unsigned long long u;
    if (!jv_to_u64(v, &u) || u > 0xffffffffULL)
        return 0;
    *out = (unsigned int)u;
    return 1;
}

/* {"0": {"power_limit_mw": 450000, "locked_clocks_mhz": [210, 1500]}, ...}; -1 when unusable. */
static int parse_state(const char *text, size_t len, const char *path, struct fake_state *st)
{
    char err[200];
    struct jv *doc = jparse_document(text, len, err, sizeof(err));
    size_t i;

    memset(st, 0, sizeof(*st));
    if (!doc) {
        diag("invalid JSON in state file %s: %s", path, err);
        return -1;
    }
    if (doc->type != J_OBJ) {
        diag("state file %s: top level must be a JSON object", path);
        jfree(doc);
        return -1;
    }
    for (i = 0; i < doc->n; i++) {
        const struct jv *entry = doc->items[i], *v;
        const char *key = doc->keys[i];
        struct dev_state *d;
        char *endp;
        unsigned long index;
        errno = 0;
        index = strtoul(key, &endp, 10);
        if (errno || !isdigit((unsigned char)key[0]) || *endp || index >= MAX_DEVICES || entry->type != J_OBJ) {
            diag("state file %s: '%s' is not a GPU index with an object", path, key);
            continue;
        }
        d = &st->dev[index];
        v = jget(entry, "power_limit_mw");
        if (v && !(d->has_power_limit = state_uint(v, &d->power_limit_mw)))
            diag("state file %s: %s.power_limit_mw is not a number of milliwatts", path, key);
        v = jget(entry, "locked_clocks_mhz");
        if (v && !(d->has_locked_clocks = v->type == J_ARR && v->n == 2 &&
                                          state_uint(v->items[0], &d->clocks_min_mhz) &&
                                          state_uint(v->items[1], &d->clocks_max_mhz)))
            diag("state file %s: %s.locked_clocks_mhz is not [min, max] in MHz", path, key);
    }
    jfree(doc);
    return 0;
}

static int write_state(FILE *f, const struct fake_state *st)
{
    const char *sep = "";
    unsigned int i;
    fputc('{', f);
    for (i = 0; i < MAX_DEVICES; i++) {
        const struct dev_state *d = &st->dev[i];
        if (!d->has_power_limit && !d->has_locked_clocks)
            continue;
        fprintf(f, "%s\"%u\": {", sep, i);
        if (d->has_power_limit)
            fprintf(f, "\"power_limit_mw\": %u", d->power_limit_mw);
        if (d->has_locked_clocks)
            fprintf(f, "%s\"locked_clocks_mhz\": [%u, %u]", d->has_power_limit ? ", " : "",
                    d->clocks_min_mhz, d->clocks_max_mhz);
        fputc('}', f);
        sep = ", ";
    }
    fputs("}\n", f);
    return ferror(f) ? -1 : 0;
}

/* Called with g_lock held. */
static void install_state(struct fake_state *st, const struct file_sig *sig)
{
    retire(NULL, g_state);
    __atomic_store_n(&g_state, st, __ATOMIC_RELEASE);
    g_state_sig = *sig;
}

/*
 * Called with g_lock held: the state file is read again when it changed
 * (another process, or this one, called a setter). A missing file is the
 * state after boot: nothing set.
 */
static void reload_state(void)
{
    const char *path = state_path(root());
    struct file_sig now, sig;
    struct fake_state *st;
    char *text;
    size_t len = 0;

    if (strcmp(path, g_state_path) != 0) { /* first call, or a live fixture named another file */
        snprintf(g_state_path, sizeof(g_state_path), "%s", path);
        memset(&g_state_sig, 0, sizeof(g_state_sig));
        g_state_sig.exists = -1; /* matches no file, missing or not */
    }
    if (file_sig_get(path, &now) != 0 || file_sig_same(&now, &g_state_sig))
        return;
    sig = now;
    if (!now.exists || !(text = read_file(path, &len, &sig))) {
        if (now.exists && errno != ENOENT)
            diag("cannot read state file %s: %s", path, strerror(errno));
        memset(&sig, 0, sizeof(sig)); /* gone in between: nothing set */
        install_state(NULL, &sig);
        return;
    }
    st = malloc(sizeof(*st));
    if (st && parse_state(text, len, path, st) == 0)
        install_state(st, &sig);
    else {
        free(st);
        g_state_sig = sig; /* keep what was read before; one diagnostic per bad version */
    }
    free(text);
}

/* Each exported call starts here: picks up a rewritten live fixture or state file. */
static void refresh(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_refcount > 0) {
        reload_fixture();
        reload_state();
    }
    pthread_mutex_unlock(&g_lock);
}

/* mkdir -p, new directories 0755 whatever the umask. */
static int make_dirs(const char *dir)
{
    char buf[4096];
    char *p;
    snprintf(buf, sizeof(buf), "%s", dir);
    for (p = buf + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) == 0)
            chmod(buf, 0755);
        else if (errno != EEXIST)
            return -1;
        *p = c;
        if (c == '\0')
            return 0;
    }
}

enum state_op { SET_POWER_LIMIT, LOCK_CLOCKS, RESET_CLOCKS };

/*
 * Read-modify-write of the state file for one GPU. Processes (and threads)
 * take turns through a lock on the file's directory (no extra file); the
 * new version replaces the old by rename, so readers never see half a file.
 */
static nvmlReturn_t update_state(unsigned int index, enum state_op op, unsigned int a, unsigned int b)
{
    char path[4096], dir[4096], tmp[4200];
    struct fake_state *st = NULL;
    struct file_sig sig;
    char *text, *slash;
    size_t len = 0;
    int dfd, fd;
    FILE *f;
    nvmlReturn_t r = NVML_ERROR_UNKNOWN;

    pthread_mutex_lock(&g_lock);
    snprintf(path, sizeof(path), "%s", state_path(root()));
    pthread_mutex_unlock(&g_lock);
    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else
        slash[slash == dir ? 1 : 0] = '\0';
    if (make_dirs(dir) != 0) {
        diag("cannot create %s for the state file: %s", dir, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        diag("cannot open %s: %s", dir, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    while (flock(dfd, LOCK_EX) != 0 && errno == EINTR)
        ;
    st = calloc(1, sizeof(*st));
    if (!st)
        goto out;
    text = read_file(path, &len, NULL);
    if (text) {
        if (parse_state(text, len, path, st) != 0)
            memset(st, 0, sizeof(*st)); /* an unusable file is replaced */
        free(text);
    }
    switch (op) {
    case SET_POWER_LIMIT:
        st->dev[index].has_power_limit = 1;
        st->dev[index].power_limit_mw = a;
        break;
    case LOCK_CLOCKS:
        st->dev[index].has_locked_clocks = 1;
        st->dev[index].clocks_min_mhz = a;
        st->dev[index].clocks_max_mhz = b;
        break;
    case RESET_CLOCKS:
        st->dev[index].has_locked_clocks = 0;
        break;
    }
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        diag("cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    fchmod(fd, 0644); /* whatever the umask: every process reads it */
    f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        goto out;
    }
    if (write_state(f, st) != 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        diag("cannot write state file %s: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    /* this process sees its change at once, not at its next call */
    pthread_mutex_lock(&g_lock);
    if (g_refcount > 0 && strcmp(path, g_state_path) == 0 && file_sig_get(path, &sig) == 0 && sig.exists) {
        install_state(st, &sig);
        st = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    r = NVML_SUCCESS;
out:
    free(st);
    flock(dfd, LOCK_UN);
    close(dfd);
    return r;
}

/* A forced error from an "errors" map, looking up each name in turn. */
static nvmlReturn_t forced_error(const struct jv *errors, const char *sym, const char *base)
{
    const struct jv *e;
    long long code;
    if (!errors)
        return NVML_SUCCESS;
    e = jget(errors, sym);
    if (!e && base)
        e = jget(errors, base);
    if (!e)
        return NVML_SUCCESS;
    if (!jv_to_ll(e, error_names, &code)) {
        diag("fixture %s: errors.%s is not an NVML error name or number", g_fixture_path, sym);
        return NVML_ERROR_UNKNOWN;
    }
    return (nvmlReturn_t)code;
}

static int valid_device(nvmlDevice_t d)
{
    uintptr_t p = (uintptr_t)d, b = (uintptr_t)&g_dev[0];
    if (!d || p < b || p >= (uintptr_t)&g_dev[g_ndev])
        return 0;
    return (p - b) % sizeof(g_dev[0]) == 0;
}

static void sleep_ms(long long ms)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static const struct jv *hang_entry(const struct jv *scope, const char *sym, const char *base)
{
    const struct jv *map = jget(scope, "hang_ms");
    const struct jv *v;
    if (!map)
        return NULL;
    v = jget(map, sym);
    if (!v && base)
        v = jget(map, base);
    if (!v)
        v = jget(map, "*");
    return v;
}

/*
 * A "hang_ms" map: the named call (or "*", every call) sleeps that long
 * before it answers, as NVML does for a GPU that has fallen off the bus or
 * whose driver is stuck. The device's map wins over the top-level one
 * (dev_json NULL: a system call, top level only).
 */
static void maybe_hang(const struct jv *dev_json, const char *sym, const char *base)
{
    const struct jv *v = dev_json ? hang_entry(dev_json, sym, base) : NULL;
    long long ms;
    if (!v)
        v = hang_entry(root(), sym, base);
    if (!v)
        return;
    if (!jv_to_ll(v, NULL, &ms)) {
        diag("fixture %s: hang_ms.%s is not a number of milliseconds", g_fixture_path, sym);
        return;
    }
    if (ms > 0)
        sleep_ms(ms);
}

static nvmlReturn_t system_check(const char *sym, const char *base)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    refresh();
    maybe_hang(NULL, sym, base);
    return forced_error(jget(root(), "errors"), sym, base);
}

static nvmlReturn_t device_check(nvmlDevice_t d, const char *sym, const char *base)
{
    nvmlReturn_t r;
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!valid_device(d))
        return NVML_ERROR_INVALID_ARGUMENT;
    refresh();
    maybe_hang(dev_json(d), sym, base);
    r = forced_error(jget(dev_json(d), "errors"), sym, base);
    if (r != NVML_SUCCESS)
        return r;
    return forced_error(jget(root(), "errors"), sym, base);
}

#define SYSTEM_CHECK(sym, base)                     \
    do {                                            \
        nvmlReturn_t check_r_ = system_check(sym, base); \
        if (check_r_ != NVML_SUCCESS)               \
            return check_r_;                        \
    } while (0)

#define DEVICE_CHECK(dev, sym, base)                \
    do {                                            \
        nvmlReturn_t check_r_ = device_check(dev, sym, base); \
        if (check_r_ != NVML_SUCCESS)               \
            return check_r_;                        \
    } while (0)

static nvmlReturn_t bad_type(const struct jv *scope, const char *path)
{
    (void)scope;
    diag("fixture %s: '%s' has the wrong type", g_fixture_path, path);
    return NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t get_u64(const struct jv *scope, const char *path, unsigned long long *out)
{
    const struct jv *v = jpath(scope, path);
    if (!v)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!jv_to_u64(v, out))
        return bad_type(scope, path);
    return NVML_SUCCESS;
}

static nvmlReturn_t get_named(const struct jv *scope, const char *path,
                              const struct named_value *table, long long *out)
{
    const struct jv *v = jpath(scope, path);
    if (!v)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!jv_to_ll(v, table, out))
        return bad_type(scope, path);
    return NVML_SUCCESS;
}

static nvmlReturn_t get_uint(const struct jv *scope, const char *path, unsigned int *out)
{
    unsigned long long v = 0;
    nvmlReturn_t r;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = get_u64(scope, path, &v);
    if (r == NVML_SUCCESS) {
        if (v > 0xffffffffULL)
            return bad_type(scope, path);
        *out = (unsigned int)v;
    }
    return r;
}

static nvmlReturn_t get_enum(const struct jv *scope, const char *path,
                             const struct named_value *table, unsigned int *out)
{
    long long v = 0;
    nvmlReturn_t r;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = get_named(scope, path, table, &v);
    if (r == NVML_SUCCESS)
        *out = (unsigned int)v;
    return r;
}

static nvmlReturn_t copy_string(const struct jv *scope, const char *path, char *buf, unsigned int length)
{
    const struct jv *v = jpath(scope, path);
    size_t n;
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!v)
        return NVML_ERROR_NOT_SUPPORTED;
    if (v->type != J_STR)
        return bad_type(scope, path);
    n = strlen(v->str);
    if ((size_t)length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, v->str, n + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Initialisation                                                      */
/* ------------------------------------------------------------------ */

static nvmlReturn_t do_init(void)
{
    nvmlReturn_t r = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount > 0) {
        g_refcount++;
    } else {
        r = load_fixture();
        if (r == NVML_SUCCESS) {
            g_refcount = 1;
            reload_state();
        } else {
            free_fixture();
        }
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

EXPORT nvmlReturn_t nvmlInit(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init();
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t r = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0)
        r = NVML_ERROR_UNINITIALIZED;
    else if (--g_refcount == 0)
        free_fixture();
    pthread_mutex_unlock(&g_lock);
    return r;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt request issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 22: return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case 23: return "Insufficient resources";
    case 24: return "Frequency not supported";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    case 30: return "Reset type not supported";
    default: return "Unknown Error";
    }
}

/* ------------------------------------------------------------------ */
/* System queries                                                      */
/* ------------------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    SYSTEM_CHECK("nvmlSystemGetDriverVersion", NULL);
    return copy_string(root(), "driver_version", version, length);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    SYSTEM_CHECK("nvmlSystemGetNVMLVersion", NULL);
    return copy_string(root(), "nvml_version", version, length);
}

static nvmlReturn_t cuda_driver_version(int *v)
{
    const struct jv *j = jget(root(), "cuda_driver_version");
    long long ll;
    unsigned int major, minor;
    if (!v)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!j)
        return NVML_ERROR_NOT_SUPPORTED;
    /* "13.0" is accepted as well as 13000 */
    if (j->type == J_STR && sscanf(j->str, "%u.%u", &major, &minor) == 2 && strchr(j->str, '.')) {
        *v = (int)(major * 1000 + minor * 10);
        return NVML_SUCCESS;
    }
    if (!jv_to_ll(j, NULL, &ll))
        return bad_type(root(), "cuda_driver_version");
    *v = (int)ll;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    SYSTEM_CHECK("nvmlSystemGetCudaDriverVersion", NULL);
    return cuda_driver_version(cudaDriverVersion);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    SYSTEM_CHECK("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion");
    return cuda_driver_version(cudaDriverVersion);
}

/* ------------------------------------------------------------------ */
/* Enumeration                                                         */
/* ------------------------------------------------------------------ */

static nvmlReturn_t device_count(const char *sym, unsigned int *count)
{
    SYSTEM_CHECK(sym, "nvmlDeviceGetCount");
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = g_ndev;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return device_count("nvmlDeviceGetCount", deviceCount);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    return device_count("nvmlDeviceGetCount_v2", deviceCount);
}

static nvmlReturn_t handle_by_index(const char *sym, unsigned int index, nvmlDevice_t *device)
{
    static const char base[] = "nvmlDeviceGetHandleByIndex";
    nvmlReturn_t r;
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    refresh();
    /* one sleep: the device's hang_ms entry, else the top level's */
    maybe_hang(index < g_ndev ? dev_json(&g_dev[index]) : NULL, sym, base);
    r = forced_error(jget(root(), "errors"), sym, base);
    if (r != NVML_SUCCESS)
        return r;
    if (!device || index >= g_ndev)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = forced_error(jget(dev_json(&g_dev[index]), "errors"), sym, base);
    if (r != NVML_SUCCESS)
        return r;
    *device = &g_dev[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return handle_by_index("nvmlDeviceGetHandleByIndex", index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return handle_by_index("nvmlDeviceGetHandleByIndex_v2", index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    DEVICE_CHECK(device, "nvmlDeviceGetIndex", NULL);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Identity                                                            */
/* ------------------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    DEVICE_CHECK(device, "nvmlDeviceGetName", NULL);
    return copy_string(dev_json(device), "name", name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    DEVICE_CHECK(device, "nvmlDeviceGetUUID", NULL);
    return copy_string(dev_json(device), "uuid", uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    DEVICE_CHECK(device, "nvmlDeviceGetSerial", NULL);
    return copy_string(dev_json(device), "serial", serial, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    DEVICE_CHECK(device, "nvmlDeviceGetArchitecture", NULL);
    return get_enum(dev_json(device), "architecture", architecture_names, arch);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    const struct jv *cc;
    long long ma, mi;
    DEVICE_CHECK(device, "nvmlDeviceGetCudaComputeCapability", NULL);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    cc = jget(dev_json(device), "cuda_compute_capability");
    if (!cc)
        return NVML_ERROR_NOT_SUPPORTED;
    if (cc->type == J_ARR && cc->n == 2 && jv_to_ll(cc->items[0], NULL, &ma) && jv_to_ll(cc->items[1], NULL, &mi)) {
        *major = (int)ma;
        *minor = (int)mi;
        return NVML_SUCCESS;
    }
    if (cc->type == J_STR && sscanf(cc->str, "%lld.%lld", &ma, &mi) == 2) {
        *major = (int)ma;
        *minor = (int)mi;
        return NVML_SUCCESS;
    }
    return bad_type(dev_json(device), "cuda_compute_capability");
}

/* ------------------------------------------------------------------ */
/* PCI                                                                 */
/* ------------------------------------------------------------------ */

struct pci_values {
    unsigned int domain, bus, device, function, device_id, subsystem_id, base_class, sub_class;
};

static nvmlReturn_t pci_values(nvmlDevice_t device, struct pci_values *pv)
{
    const struct jv *pci = jget(dev_json(device), "pci");
    const struct jv *bus_id;
    nvmlReturn_t r;
    unsigned int tmp;
    memset(pv, 0, sizeof(*pv));
    if (!pci)
        return NVML_ERROR_NOT_SUPPORTED;
    bus_id = jget(pci, "bus_id");
    if (bus_id) {
        if (bus_id->type != J_STR ||
            sscanf(bus_id->str, "%x:%x:%x.%x", &pv->domain, &pv->bus, &pv->device, &pv->function) != 4)
            return bad_type(dev_json(device), "pci.bus_id");
    } else if (!jget(pci, "bus")) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    /* explicit numbers override what bus_id said */
#define PCI_FIELD(key, member)                                      \
    r = get_uint(pci, key, &tmp);                                   \
    if (r == NVML_SUCCESS)                                          \
        pv->member = tmp;                                           \
    else if (r != NVML_ERROR_NOT_SUPPORTED)                         \
        return r;
    PCI_FIELD("domain", domain)
    PCI_FIELD("bus", bus)
    PCI_FIELD("device", device)
    PCI_FIELD("pci_device_id", device_id)
    PCI_FIELD("pci_subsystem_id", subsystem_id)
    pv->base_class = 3; /* display controller */
    PCI_FIELD("base_class", base_class)
    PCI_FIELD("sub_class", sub_class)
#undef PCI_FIELD
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct pci_values pv;
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo");
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = pci_values(device, &pv);
    if (r != NVML_SUCCESS)
        return r;
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X",
             pv.domain & 0xffffU, pv.bus & 0xffU, pv.device & 0xffU, pv.function & 0xfU);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X",
             pv.domain, pv.bus & 0xffU, pv.device & 0xffU, pv.function & 0xfU);
    pci->domain = pv.domain;
    pci->bus = pv.bus;
    pci->device = pv.device;
    pci->pciDeviceId = pv.device_id;
    pci->pciSubSystemId = pv.subsystem_id;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
    struct pci_values pv;
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceGetPciInfoExt", "nvmlDeviceGetPciInfo");
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (pci->version != nvmlPciInfoExt_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    r = pci_values(device, &pv);
    if (r != NVML_SUCCESS)
        return r;
    pci->domain = pv.domain;
    pci->bus = pv.bus;
    pci->device = pv.device;
    pci->pciDeviceId = pv.device_id;
    pci->pciSubSystemId = pv.subsystem_id;
    pci->baseClass = pv.base_class;
    pci->subClass = pv.sub_class;
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X",
             pv.domain, pv.bus & 0xffU, pv.device & 0xffU, pv.function & 0xfU);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    DEVICE_CHECK(device, "nvmlDeviceGetCurrPcieLinkGeneration", NULL);
    return get_uint(dev_json(device), "pcie.gen_current", gen);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    DEVICE_CHECK(device, "nvmlDeviceGetMaxPcieLinkGeneration", NULL);
    return get_uint(dev_json(device), "pcie.gen_max", gen);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    DEVICE_CHECK(device, "nvmlDeviceGetGpuMaxPcieLinkGeneration", NULL);
    return get_uint(dev_json(device), "pcie.gen_gpu_max", gen);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width)
{
    DEVICE_CHECK(device, "nvmlDeviceGetCurrPcieLinkWidth", NULL);
    return get_uint(dev_json(device), "pcie.width_current", width);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width)
{
    DEVICE_CHECK(device, "nvmlDeviceGetMaxPcieLinkWidth", NULL);
    return get_uint(dev_json(device), "pcie.width_max", width);
}

/* ------------------------------------------------------------------ */
/* Memory                                                              */
/* ------------------------------------------------------------------ */

struct mem_values {
    unsigned long long total, used, free, reserved;
};

static nvmlReturn_t mem_values(nvmlDevice_t device, struct mem_values *mv)
{
    const struct jv *mem = jget(dev_json(device), "memory");
    nvmlReturn_t r;
    memset(mv, 0, sizeof(*mv));
    if (!mem)
        return NVML_ERROR_NOT_SUPPORTED;
    r = get_u64(mem, "total", &mv->total);
    if (r != NVML_SUCCESS)
        return r;
    r = get_u64(mem, "reserved", &mv->reserved);
    if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_SUPPORTED)
        return r;
    r = get_u64(mem, "used", &mv->used);
    if (r == NVML_ERROR_NOT_SUPPORTED) {
        r = get_u64(mem, "free", &mv->free);
        if (r != NVML_SUCCESS)
            return r;
        mv->used = mv->total - mv->reserved - mv->free;
        return NVML_SUCCESS;
    }
    if (r != NVML_SUCCESS)
        return r;
    r = get_u64(mem, "free", &mv->free);
    if (r == NVML_ERROR_NOT_SUPPORTED) {
        mv->free = mv->total - mv->reserved - mv->used;
        return NVML_SUCCESS;
    }
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct mem_values mv;
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceGetMemoryInfo", NULL);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = mem_values(device, &mv);
    if (r != NVML_SUCCESS)
        return r;
    /* v1 semantics: "used" includes memory reserved by the driver */
    memory->total = mv.total;
    memory->free = mv.free;
    memory->used = mv.used + mv.reserved;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct mem_values mv;
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo");
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    r = mem_values(device, &mv);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = mv.total;
    memory->reserved = mv.reserved;
    memory->free = mv.free;
    memory->used = mv.used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1)
{
    const struct jv *b;
    unsigned long long total = 0, used = 0, freev = 0;
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceGetBAR1MemoryInfo", NULL);
    if (!bar1)
        return NVML_ERROR_INVALID_ARGUMENT;
    b = jget(dev_json(device), "bar1");
    if (!b)
        return NVML_ERROR_NOT_SUPPORTED;
    r = get_u64(b, "total", &total);
    if (r != NVML_SUCCESS)
        return r;
    r = get_u64(b, "used", &used);
    if (r == NVML_ERROR_NOT_SUPPORTED)
        used = 0;
    else if (r != NVML_SUCCESS)
        return r;
    r = get_u64(b, "free", &freev);
    if (r == NVML_ERROR_NOT_SUPPORTED)
        freev = total - used;
    else if (r != NVML_SUCCESS)
        return r;
    bar1->bar1Total = total;
    bar1->bar1Used = used;
    bar1->bar1Free = freev;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Thermals and power                                                  */
/* ------------------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType, unsigned int *temp)
{
    DEVICE_CHECK(device, "nvmlDeviceGetTemperature", NULL);
    if (sensorType != 0 || !temp)
        return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint(dev_json(device), "temperature.gpu", temp);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    unsigned int t = 0;
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature");
    if (!temperature)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = get_uint(dev_json(device), "temperature.gpu", &t);
    if (r == NVML_SUCCESS)
        temperature->temperature = (int)t;
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, unsigned int thresholdType,
                                                      unsigned int *temp)
{
    static const char *const keys[] = {
        "temperature.shutdown", "temperature.slowdown", "temperature.mem_max",
        "temperature.gpu_max", "temperature.acoustic_min", "temperature.acoustic_curr",
        "temperature.acoustic_max", "temperature.gps_curr",
    };
    DEVICE_CHECK(device, "nvmlDeviceGetTemperatureThreshold", NULL);
    if (thresholdType >= sizeof(keys) / sizeof(keys[0]) || !temp)
        return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint(dev_json(device), keys[thresholdType], temp);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    DEVICE_CHECK(device, "nvmlDeviceGetPowerUsage", NULL);
    return get_uint(dev_json(device), "power.usage_mw", power);
}

/* A limit set with nvmlDeviceSetPowerManagementLimit wins over the fixture's. */
static nvmlReturn_t power_limit(nvmlDevice_t device, const char *key, unsigned int *limit)
{
    const struct dev_state *s = set_state(device);
    if (!limit)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (s && s->has_power_limit) {
        *limit = s->power_limit_mw;
        return NVML_SUCCESS;
    }
    return get_uint(dev_json(device), key, limit);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    DEVICE_CHECK(device, "nvmlDeviceGetPowerManagementLimit", NULL);
    return power_limit(device, "power.limit_mw", limit);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *limit)
{
    DEVICE_CHECK(device, "nvmlDeviceGetPowerManagementDefaultLimit", NULL);
    return get_uint(dev_json(device), "power.default_limit_mw", limit);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                                 unsigned int *maxLimit)
{
    unsigned int lo = 0, hi = 0;
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceGetPowerManagementLimitConstraints", NULL);
    if (!minLimit || !maxLimit)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = get_uint(dev_json(device), "power.min_limit_mw", &lo);
    if (r != NVML_SUCCESS)
        return r;
    r = get_uint(dev_json(device), "power.max_limit_mw", &hi);
    if (r != NVML_SUCCESS)
        return r;
    *minLimit = lo;
    *maxLimit = hi;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    DEVICE_CHECK(device, "nvmlDeviceGetEnforcedPowerLimit", NULL);
    return power_limit(device, "power.enforced_limit_mw", limit);
}

/* NVML's checks in NVML's order: the device can do it, the arguments, then the kernel's permission check. */
static nvmlReturn_t set_power_limit(nvmlDevice_t device, unsigned int limit)
{
    unsigned int lo = 0, hi = 0;
    nvmlReturn_t r = get_uint(dev_json(device), "power.min_limit_mw", &lo);
    if (r != NVML_SUCCESS)
        return r;
    r = get_uint(dev_json(device), "power.max_limit_mw", &hi);
    if (r != NVML_SUCCESS)
        return r;
    if (limit < lo || limit > hi)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (geteuid() != 0)
        return NVML_ERROR_NO_PERMISSION;
    return update_state(device->index, SET_POWER_LIMIT, limit, 0);
}

EXPORT nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit)
{
    DEVICE_CHECK(device, "nvmlDeviceSetPowerManagementLimit", NULL);
    return set_power_limit(device, limit);
}

EXPORT nvmlReturn_t nvmlDeviceSetPowerManagementLimit_v2(nvmlDevice_t device, nvmlPowerValue_v2_t *powerValue)
{
    DEVICE_CHECK(device, "nvmlDeviceSetPowerManagementLimit_v2", "nvmlDeviceSetPowerManagementLimit");
    if (!powerValue)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (powerValue->version != nvmlPowerValue_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (powerValue->powerScope >= 4) /* NVML_POWER_SCOPE_COUNT */
        return NVML_ERROR_INVALID_ARGUMENT;
    if (powerValue->powerScope != 0) /* only the GPU's own limit is modelled */
        return NVML_ERROR_NOT_SUPPORTED;
    return set_power_limit(device, powerValue->powerValueMw);
}

/* ------------------------------------------------------------------ */
/* Modes                                                               */
/* ------------------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode)
{
    DEVICE_CHECK(device, "nvmlDeviceGetPersistenceMode", NULL);
    return get_enum(dev_json(device), "persistence_mode", enable_state_names, mode);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, unsigned int *mode)
{
    DEVICE_CHECK(device, "nvmlDeviceGetComputeMode", NULL);
    return get_enum(dev_json(device), "compute_mode", compute_mode_names, mode);
}

static nvmlReturn_t current_pending(nvmlDevice_t device, const char *key, unsigned int *current,
                                    unsigned int *pending)
{
    char path[64];
    unsigned int c = 0, p = 0;
    nvmlReturn_t r;
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!jget(dev_json(device), key))
        return NVML_ERROR_NOT_SUPPORTED;
    snprintf(path, sizeof(path), "%s.current", key);
    r = get_enum(dev_json(device), path, enable_state_names, &c);
    if (r != NVML_SUCCESS)
        return r;
    snprintf(path, sizeof(path), "%s.pending", key);
    r = get_enum(dev_json(device), path, enable_state_names, &p);
    if (r == NVML_ERROR_NOT_SUPPORTED)
        p = c; /* nothing pending: same as current */
    else if (r != NVML_SUCCESS)
        return r;
    *current = c;
    *pending = p;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    DEVICE_CHECK(device, "nvmlDeviceGetEccMode", NULL);
    return current_pending(device, "ecc", current, pending);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    DEVICE_CHECK(device, "nvmlDeviceGetMigMode", NULL);
    return current_pending(device, "mig", currentMode, pendingMode);
}

/* ------------------------------------------------------------------ */
/* Clocks                                                              */
/* ------------------------------------------------------------------ */

static const char *const clock_keys[] = {"clocks.graphics", "clocks.sm", "clocks.mem", "clocks.video"};
static const char *const max_clock_keys[] = {"clocks.max_graphics", "clocks.max_sm", "clocks.max_mem",
                                             "clocks.max_video"};

/* Locked clocks cap graphics (0) and SM (1), as nvmlDeviceSetGpuLockedClocks does. */
static nvmlReturn_t current_clock(nvmlDevice_t device, unsigned int type, unsigned int *clock)
{
    const struct dev_state *s = set_state(device);
    nvmlReturn_t r = get_uint(dev_json(device), clock_keys[type], clock);
    if (r == NVML_SUCCESS && type <= 1 && s && s->has_locked_clocks && *clock > s->clocks_max_mhz)
        *clock = s->clocks_max_mhz;
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock)
{
    DEVICE_CHECK(device, "nvmlDeviceGetClockInfo", NULL);
    if (type >= 4 || !clock)
        return NVML_ERROR_INVALID_ARGUMENT;
    return current_clock(device, type, clock);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock)
{
    DEVICE_CHECK(device, "nvmlDeviceGetMaxClockInfo", NULL);
    if (type >= 4 || !clock)
        return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint(dev_json(device), max_clock_keys[type], clock);
}

/* clockId: 0 current, 1 applications target, 2 applications default, 3 customer boost maximum */
EXPORT nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, unsigned int clockType, unsigned int clockId,
                                       unsigned int *clockMHz)
{
    DEVICE_CHECK(device, "nvmlDeviceGetClock", NULL);
    if (clockType >= 4 || clockId >= 4 || !clockMHz)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (clockId == 0)
        return current_clock(device, clockType, clockMHz);
    if (clockId == 3)
        return get_uint(dev_json(device), max_clock_keys[clockType], clockMHz);
    return NVML_ERROR_NOT_SUPPORTED; /* applications clocks are not modelled */
}

#define CLOCKS_EVENT_REASON_APPLICATIONS_CLOCKS_SETTING 0x2ULL
#define CLOCKS_EVENT_REASON_SW_POWER_CAP 0x4ULL

/* The fixture's mask, plus what the setters cause: locked clocks, a limit below the default. */
static nvmlReturn_t clocks_event_reasons(nvmlDevice_t device, unsigned long long *reasons)
{
    const struct dev_state *s = set_state(device);
    unsigned int def = 0;
    nvmlReturn_t r;
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = get_u64(dev_json(device), "clocks_event_reasons", reasons);
    if (r != NVML_SUCCESS || !s)
        return r;
    if (s->has_locked_clocks)
        *reasons |= CLOCKS_EVENT_REASON_APPLICATIONS_CLOCKS_SETTING;
    if (s->has_power_limit &&
        (get_uint(dev_json(device), "power.default_limit_mw", &def) == NVML_SUCCESS ||
         get_uint(dev_json(device), "power.limit_mw", &def) == NVML_SUCCESS) &&
        s->power_limit_mw < def)
        *reasons |= CLOCKS_EVENT_REASON_SW_POWER_CAP;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    DEVICE_CHECK(device, "nvmlDeviceGetCurrentClocksEventReasons", NULL);
    return clocks_event_reasons(device, reasons);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    DEVICE_CHECK(device, "nvmlDeviceGetCurrentClocksThrottleReasons", NULL);
    return clocks_event_reasons(device, reasons);
}

/* Same order of checks as the power limit: a device without clock control, arguments, permission. */
static nvmlReturn_t clock_control(nvmlDevice_t device)
{
    unsigned int top = 0;
    return get_uint(dev_json(device), "clocks.max_graphics", &top);
}

EXPORT nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int minGpuClockMHz,
                                                 unsigned int maxGpuClockMHz)
{
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceSetGpuLockedClocks", NULL);
    r = clock_control(device);
    if (r != NVML_SUCCESS)
        return r;
    if (minGpuClockMHz > maxGpuClockMHz)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (geteuid() != 0)
        return NVML_ERROR_NO_PERMISSION;
    return update_state(device->index, LOCK_CLOCKS, minGpuClockMHz, maxGpuClockMHz);
}

EXPORT nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device)
{
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceResetGpuLockedClocks", NULL);
    r = clock_control(device);
    if (r != NVML_SUCCESS)
        return r;
    if (geteuid() != 0)
        return NVML_ERROR_NO_PERMISSION;
    return update_state(device->index, RESET_CLOCKS, 0, 0);
}

/* ------------------------------------------------------------------ */
/* Topology                                                            */
/* ------------------------------------------------------------------ */

static const struct jv *find_link(unsigned int a, unsigned int b)
{
    const struct jv *topo = jget(root(), "topology");
    size_t i;
    if (!topo || topo->type != J_ARR)
        return NULL;
    for (i = 0; i < topo->n; i++) {
        const struct jv *gpus = jget(topo->items[i], "gpus");
        long long x, y;
        if (!gpus || gpus->type != J_ARR || gpus->n != 2)
            continue;
        if (!jv_to_ll(gpus->items[0], NULL, &x) || !jv_to_ll(gpus->items[1], NULL, &y))
            continue;
        if ((x == a && y == b) || (x == b && y == a))
            return topo->items[i];
    }
    return NULL;
}

static nvmlReturn_t pair_check(nvmlDevice_t d1, nvmlDevice_t d2, const char *sym)
{
    nvmlReturn_t r = device_check(d1, sym, NULL);
    if (r != NVML_SUCCESS)
        return r;
    return device_check(d2, sym, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                        unsigned int *pathInfo)
{
    const struct jv *link;
    nvmlReturn_t r = pair_check(device1, device2, "nvmlDeviceGetTopologyCommonAncestor");
    if (r != NVML_SUCCESS)
        return r;
    if (!pathInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device1 == device2) {
        *pathInfo = 0; /* NVML_TOPOLOGY_INTERNAL */
        return NVML_SUCCESS;
    }
    link = find_link(device1->index, device2->index);
    if (!link)
        return NVML_ERROR_NOT_SUPPORTED;
    r = forced_error(jget(link, "errors"), "nvmlDeviceGetTopologyCommonAncestor", NULL);
    if (r != NVML_SUCCESS)
        return r;
    return get_enum(link, "common_ancestor", topology_names, pathInfo);
}

EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, unsigned int p2pIndex,
                                           unsigned int *p2pStatus)
{
    static const char *const keys[] = {"p2p.read", "p2p.write", "p2p.nvlink", "p2p.atomics", "p2p.prop"};
    const struct jv *link;
    nvmlReturn_t r = pair_check(device1, device2, "nvmlDeviceGetP2PStatus");
    if (r != NVML_SUCCESS)
        return r;
    if (!p2pStatus || p2pIndex >= sizeof(keys) / sizeof(keys[0]))
        return NVML_ERROR_INVALID_ARGUMENT;
    link = find_link(device1->index, device2->index);
    if (!link)
        return NVML_ERROR_NOT_SUPPORTED;
    r = forced_error(jget(link, "errors"), "nvmlDeviceGetP2PStatus", NULL);
    if (r != NVML_SUCCESS)
        return r;
    if (p2pIndex == 4 && !jpath(link, keys[4]) && jpath(link, "p2p.pci"))
        return get_enum(link, "p2p.pci", p2p_status_names, p2pStatus);
    return get_enum(link, keys[p2pIndex], p2p_status_names, p2pStatus);
}

/* ------------------------------------------------------------------ */
/* Utilisation and health counters: ECC, row remapping, PCIe replays   */
/* ------------------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    unsigned int gpu = 0, mem = 0;
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceGetUtilizationRates", NULL);
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = get_uint(dev_json(device), "utilization.gpu", &gpu);
    if (r != NVML_SUCCESS)
        return r;
    r = get_uint(dev_json(device), "utilization.memory", &mem);
    if (r != NVML_SUCCESS)
        return r;
    utilization->gpu = gpu;
    utilization->memory = mem;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType, unsigned int counterType,
                                                unsigned long long *eccCounts)
{
    static const char *const kinds[] = {"corrected", "uncorrected"};
    static const char *const counters[] = {"volatile", "aggregate"};
    char path[64];
    DEVICE_CHECK(device, "nvmlDeviceGetTotalEccErrors", NULL);
    if (errorType > 1 || counterType > 1 || !eccCounts)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(path, sizeof(path), "ecc_errors.%s.%s", kinds[errorType], counters[counterType]);
    return get_u64(dev_json(device), path, eccCounts);
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                              unsigned int *isPending, unsigned int *failureOccurred)
{
    const struct jv *rows;
    unsigned int values[4] = {0, 0, 0, 0};
    static const char *const keys[] = {"correctable", "uncorrectable", "pending", "failure"};
    int i;
    DEVICE_CHECK(device, "nvmlDeviceGetRemappedRows", NULL);
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    rows = jget(dev_json(device), "remapped_rows");
    if (!rows)
        return NVML_ERROR_NOT_SUPPORTED;
    for (i = 0; i < 4; i++) {
        /* counts default to 0 and the flags to false when left out */
        nvmlReturn_t r = i < 2 ? get_uint(rows, keys[i], &values[i])
                               : get_enum(rows, keys[i], enable_state_names, &values[i]);
        if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_SUPPORTED)
            return r;
    }
    *corrRows = values[0];
    *uncRows = values[1];
    *isPending = values[2] ? 1 : 0;
    *failureOccurred = values[3] ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    DEVICE_CHECK(device, "nvmlDeviceGetPcieReplayCounter", NULL);
    return get_uint(dev_json(device), "pcie.replay_counter", value);
}

/* ------------------------------------------------------------------ */
/* Field values (the driver's recovery action, ...)                    */
/* ------------------------------------------------------------------ */

static long long clock_ms(clockid_t id, const struct timespec *since)
{
    struct timespec now;
    clock_gettime(id, &now);
    if (!since)
        return (long long)now.tv_sec * 1000LL + now.tv_nsec / 1000000L;
    return (long long)(now.tv_sec - since->tv_sec) * 1000LL + (now.tv_nsec - since->tv_nsec) / 1000000L;
}

/* The fixture's entry for a field id: keys are ids ("230") or names from field_id_names. */
static const struct jv *field_value_entry(const struct jv *map, unsigned int field_id)
{
    size_t i;
    if (!map || map->type != J_OBJ)
        return NULL;
    for (i = map->n; i > 0; i--) { /* last duplicate wins */
        const char *key = map->keys[i - 1];
        long long id;
        char *endp;
        if (!lookup_name(field_id_names, key, &id)) {
            errno = 0;
            id = strtoll(key, &endp, 0);
            if (errno || !*key || *endp)
                continue;
        }
        if (id == (long long)field_id)
            return map->items[i - 1]->type == J_NULL ? NULL : map->items[i - 1];
    }
    return NULL;
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    const struct jv *map;
    int i;
    DEVICE_CHECK(device, "nvmlDeviceGetFieldValues", NULL);
    if (valuesCount < 0 || (valuesCount > 0 && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    map = jget(dev_json(device), "field_values");
    for (i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *fv = &values[i];
        const struct jv *v = field_value_entry(map, fv->fieldId);
        unsigned long long u = 0;
        long long code;
        fv->timestamp = clock_ms(CLOCK_REALTIME, NULL) * 1000LL;
        fv->latencyUsec = 0;
        memset(&fv->value, 0, sizeof(fv->value));
        fv->valueType = fv->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION ? NVML_VALUE_TYPE_UNSIGNED_INT
                                                                           : NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        if (!v) {
            fv->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        if (v->type == J_STR) { /* a string is the error this one field answers */
            if (!jv_to_ll(v, error_names, &code)) {
                diag("fixture %s: field_values.%u is not an NVML error name", g_fixture_path, fv->fieldId);
                code = NVML_ERROR_UNKNOWN;
            }
            fv->nvmlReturn = (nvmlReturn_t)code;
            continue;
        }
        if (!jv_to_u64(v, &u)) {
            fv->nvmlReturn = bad_type(dev_json(device), "field_values");
            continue;
        }
        fv->nvmlReturn = NVML_SUCCESS;
        if (fv->valueType == NVML_VALUE_TYPE_UNSIGNED_INT)
            fv->value.uiVal = (unsigned int)u;
        else
            fv->value.ullVal = u;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Events: XIDs from the fixture ("xid_events") or appended to a file  */
/* ("xid_events_file") while the caller waits                          */
/* ------------------------------------------------------------------ */

#define EVENT_SET_MAGIC 0x45564e54U

struct fake_event_set {
    unsigned int magic;
    pthread_mutex_t lock;
    unsigned long long mask[MAX_DEVICES];
    struct timespec since[MAX_DEVICES];  /* when the device registered for XIDs */
    size_t delivered[MAX_DEVICES];       /* xid_events entries delivered */
    long long file_offset[MAX_DEVICES];  /* bytes of xid_events_file consumed */
    char *file_path[MAX_DEVICES];        /* the xid_events_file that offset is in */
};
typedef struct fake_event_set *nvmlEventSet_t;

static nvmlReturn_t supported_events(nvmlDevice_t device, unsigned long long *mask)
{
    const struct jv *v = jget(dev_json(device), "supported_events");
    long long bit;
    size_t i;
    if (!v)
        return NVML_ERROR_NOT_SUPPORTED;
    if (v->type != J_ARR) {
        if (!jv_to_ll(v, event_type_names, &bit))
            return bad_type(dev_json(device), "supported_events");
        *mask = (unsigned long long)bit;
        return NVML_SUCCESS;
    }
    *mask = 0;
    for (i = 0; i < v->n; i++) {
        if (!jv_to_ll(v->items[i], event_type_names, &bit))
            return bad_type(dev_json(device), "supported_events");
        *mask |= (unsigned long long)bit;
    }
    return NVML_SUCCESS;
}

static const char *xid_events_file(const struct jv *dev_json)
{
    const struct jv *v = jget(dev_json, "xid_events_file");
    return v && v->type == J_STR && v->str[0] ? v->str : NULL;
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    DEVICE_CHECK(device, "nvmlDeviceGetSupportedEventTypes", NULL);
    if (!eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    return supported_events(device, eventTypes);
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    struct fake_event_set *s;
    SYSTEM_CHECK("nvmlEventSetCreate", NULL);
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    s = calloc(1, sizeof(*s));
    if (!s)
        return NVML_ERROR_UNKNOWN;
    s->magic = EVENT_SET_MAGIC;
    pthread_mutex_init(&s->lock, NULL);
    *set = s;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    unsigned long long supported = 0;
    unsigned int i;
    nvmlReturn_t r;
    DEVICE_CHECK(device, "nvmlDeviceRegisterEvents", NULL);
    if (!set || set->magic != EVENT_SET_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = supported_events(device, &supported);
    if (r != NVML_SUCCESS)
        return r;
    if (eventTypes & ~supported)
        return NVML_ERROR_NOT_SUPPORTED;
    i = device->index;
    pthread_mutex_lock(&set->lock);
    if ((eventTypes & NVML_EVENT_TYPE_XID_CRITICAL_ERROR) && !(set->mask[i] & NVML_EVENT_TYPE_XID_CRITICAL_ERROR)) {
        const char *path = xid_events_file(dev_json(device));
        /* like NVML, a new registration sees only what happens from now on */
        clock_gettime(CLOCK_MONOTONIC, &set->since[i]);
        set->delivered[i] = 0;
        set->file_offset[i] = path ? file_size(path) : 0;
        free(set->file_path[i]);
        set->file_path[i] = path ? strdup(path) : NULL;
    }
    set->mask[i] |= eventTypes;
    pthread_mutex_unlock(&set->lock);
    return NVML_SUCCESS;
}

/*
 * The next XID due for device i: the fixture's list first, then new lines
 * of the file. What was delivered survives a live reload; a reload that
 * names another file has that file read from its start.
 */
static int next_xid(struct fake_event_set *s, unsigned int i, unsigned long long *xid)
{
    const struct jv *json = dev_json(&g_dev[i]);
    const struct jv *list = jget(json, "xid_events");
    const char *path = xid_events_file(json);
    if (path ? !s->file_path[i] || strcmp(path, s->file_path[i]) != 0 : s->file_path[i] != NULL) {
        free(s->file_path[i]);
        s->file_path[i] = path ? strdup(path) : NULL;
        s->file_offset[i] = 0;
    }
    if (list && list->type == J_ARR && s->delivered[i] < list->n) {
        const struct jv *item = list->items[s->delivered[i]];
        long long x = -1, after = 0;
        if (item->type == J_OBJ) {
            if (!jv_to_ll(jget(item, "xid"), NULL, &x))
                x = -1;
            if (jget(item, "after_ms") && !jv_to_ll(jget(item, "after_ms"), NULL, &after))
                after = 0;
        } else if (!jv_to_ll(item, NULL, &x)) {
            x = -1;
        }
        if (x < 0) {
            diag("fixture %s: devices[%u].xid_events[%zu] is not an XID", g_fixture_path, i, s->delivered[i]);
            s->delivered[i]++;
        } else if (clock_ms(CLOCK_MONOTONIC, &s->since[i]) >= after) {
            s->delivered[i]++;
            *xid = (unsigned long long)x;
            return 1;
        }
    }
    if (path) {
        char line[128];
        FILE *f;
        if (file_size(path) < s->file_offset[i])
            s->file_offset[i] = 0; /* the file was truncated or replaced */
        f = fopen(path, "r");
        if (!f)
            return 0;
        if (fseek(f, (long)s->file_offset[i], SEEK_SET) != 0) {
            fclose(f);
            return 0;
        }
        while (fgets(line, sizeof(line), f)) {
            size_t n = strlen(line);
            char *endp;
            unsigned long long x;
            if (n == 0 || line[n - 1] != '\n')
                break; /* a line still being written */
            s->file_offset[i] += (long long)n;
            x = strtoull(line, &endp, 0);
            if (endp == line)
                continue; /* blank line or comment */
            fclose(f);
            *xid = x;
            return 1;
        }
        fclose(f);
    }
    return 0;
}

static nvmlReturn_t event_wait(const char *sym, nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        unsigned int i;
        long long left;
        nvmlReturn_t r = system_check(sym, "nvmlEventSetWait");
        if (r != NVML_SUCCESS)
            return r;
        if (!set || set->magic != EVENT_SET_MAGIC || !data)
            return NVML_ERROR_INVALID_ARGUMENT;
        pthread_mutex_lock(&set->lock);
        for (i = 0; i < g_ndev; i++) {
            unsigned long long xid;
            if (!(set->mask[i] & NVML_EVENT_TYPE_XID_CRITICAL_ERROR) || !next_xid(set, i, &xid))
                continue;
            pthread_mutex_unlock(&set->lock);
            memset(data, 0, sizeof(*data));
            data->device = &g_dev[i];
            data->eventType = NVML_EVENT_TYPE_XID_CRITICAL_ERROR;
            data->eventData = xid;
            data->gpuInstanceId = 0xFFFFFFFFU; /* not a MIG instance */
            data->computeInstanceId = 0xFFFFFFFFU;
            return NVML_SUCCESS;
        }
        pthread_mutex_unlock(&set->lock);
        left = (long long)timeoutms - clock_ms(CLOCK_MONOTONIC, &start);
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        sleep_ms(left < 5 ? left : 5);
    }
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return event_wait("nvmlEventSetWait_v2", set, data, timeoutms);
}

EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return event_wait("nvmlEventSetWait", set, data, timeoutms);
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    unsigned int i;
    if (!set || set->magic != EVENT_SET_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    pthread_mutex_destroy(&set->lock);
    for (i = 0; i < MAX_DEVICES; i++)
        free(set->file_path[i]);
    free(set);
    return NVML_SUCCESS;
}
