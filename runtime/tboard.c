/* tboard.c: TensorBoard's view of a run (docs/runs.md). Each train and validation record
 * of metrics.jsonl gives every number in it but its step as a scalar of the field's name
 * at that step ("loss", "val_loss", "lr", ...), in OUT/events.out.tfevents.SECONDS.HOST.
 * PID.trainc: TFRecords (a record's length, a masked CRC-32C of it, the serialized Event
 * proto, a masked CRC-32C of that), flushed a record at a time, so `tensorboard --logdir`
 * follows a run as it goes.
 *
 * A run's session writes a file of its own, which begins with the file version and a
 * SessionLog START at the first step it may record: TensorBoard drops the points an
 * earlier file of the folder holds from that step on, so a resumed run, which repeats
 * the steps after its checkpoint, reads as one run (the records metrics.jsonl dropped at
 * the resume are dropped here too). --resume A --out B links A's files into B first
 * (resume.c). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "rt.h"

struct rt_tb {
    char path[RT_PATH_MAX + 128];   /* DIR (under RT_PATH_MAX) and the name: at most 113 */
    FILE *f;
};

/* ---- CRC-32C (Castagnoli, reflected 0x82F63B78), masked as TFRecord masks it ---- */

static uint32_t crc32c(const unsigned char *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t masked_crc(const unsigned char *p, size_t n)
{
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- protobuf's wire format, as much as an Event of scalars takes ---------------- */

typedef struct {
    unsigned char *b;
    size_t n, cap;
} Pb;

static void pb_bytes(Pb *pb, const void *p, size_t n)
{
    if (pb->n + n > pb->cap) {
        size_t cap = 2 * (pb->n + n) + 64;
        unsigned char *b = realloc(pb->b, cap);
        if (!b)
            rt_fail("out of memory writing a TensorBoard event");
        pb->b = b, pb->cap = cap;
    }
    memcpy(pb->b + pb->n, p, n);
    pb->n += n;
}

static void pb_varint(Pb *pb, uint64_t v)
{
    unsigned char b[10];
    size_t n = 0;
    do {
        b[n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(pb, b, n);
}

enum { WIRE_VARINT = 0, WIRE_64 = 1, WIRE_LEN = 2, WIRE_32 = 5 };

static void pb_key(Pb *pb, int field, int wire) { pb_varint(pb, (uint64_t)(field << 3 | wire)); }

static void pb_len(Pb *pb, int field, const void *p, size_t n)
{
    pb_key(pb, field, WIRE_LEN);
    pb_varint(pb, n);
    pb_bytes(pb, p, n);
}

/* (little-endian hosts: x86-64 and aarch64, what trainc runs on) */
static void pb_double(Pb *pb, int field, double v)
{
    pb_key(pb, field, WIRE_64);
    pb_bytes(pb, &v, 8);
}

static void pb_float(Pb *pb, int field, float v)
{
    pb_key(pb, field, WIRE_32);
    pb_bytes(pb, &v, 4);
}

/* Event's fields (tensorboard/compat/proto/event.proto), Summary's and its Value's,
 * SessionLog's */
enum { EV_WALL_TIME = 1, EV_STEP = 2, EV_FILE_VERSION = 3, EV_SUMMARY = 5, EV_SESSION_LOG = 7 };
enum { SUM_VALUE = 1, VAL_TAG = 1, VAL_SIMPLE = 2, LOG_STATUS = 1, LOG_START = 1 };

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the files ------------------------------------------------------------------ */

/* The latest second an events file of DIR is named by (10 digits after the prefix, as
 * trainc, TensorFlow and PyTorch name them), or -1 */
static long long latest_second(const char *dir)
{
    long long latest = -1;
    DIR *dp = opendir(dir);
    if (!dp)
        return latest;
    for (struct dirent *e; (e = readdir(dp));) {
        if (strncmp(e->d_name, RT_TB_PREFIX, strlen(RT_TB_PREFIX)) != 0)
            continue;
        const char *t = e->d_name + strlen(RT_TB_PREFIX);
        if (strlen(t) < 11 || t[10] != '.')
            continue;
        long long v = 0;
        int k = 0;
        while (k < 10 && t[k] >= '0' && t[k] <= '9')
            v = 10 * v + (t[k++] - '0');
        if (k == 10 && v > latest)
            latest = v;
    }
    closedir(dp);
    return latest;
}

/* One Event (ev: its fields but the time) as a record of the file, flushed. */
static void put_record(rt_tb *tb, const Pb *ev)
{
    Pb pb = {0};
    pb_double(&pb, EV_WALL_TIME, wall_time());
    pb_bytes(&pb, ev->b, ev->n);
    unsigned char head[12];
    uint64_t len = pb.n;
    memcpy(head, &len, 8);
    uint32_t c = masked_crc(head, 8), d = masked_crc(pb.b, pb.n);
    memcpy(head + 8, &c, 4);
    if (fwrite(head, 1, 12, tb->f) != 12 || fwrite(pb.b, 1, pb.n, tb->f) != pb.n ||
        fwrite(&d, 1, 4, tb->f) != 4 || fflush(tb->f) != 0)
        rt_fail("%s: write failed: %s%s", tb->path, strerror(errno), rt_full_hint(errno));
    free(pb.b);
}

rt_tb *rt_tb_open(const char *dir, int64_t first_step)
{
    rt_tb *tb = calloc(1, sizeof *tb);
    if (!tb)
        rt_fail("out of memory");
    char host[64] = "host";
    if (gethostname(host, sizeof host) != 0 || !host[0] || strchr(host, '/'))
        snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = 0;
    /* named by the second it starts, after any file of an earlier session in the
     * folder (TensorBoard reads a folder's files in the order of their names) */
    long long sec = (long long)time(NULL), latest = latest_second(dir);
    if (sec <= latest)
        sec = latest + 1;
    snprintf(tb->path, sizeof tb->path, "%s/" RT_TB_PREFIX "%010lld.%s.%ld.trainc", dir, sec, host,
             (long)getpid());
    tb->f = fopen(tb->path, "wb");
    if (!tb->f)
        rt_fail("%s: cannot open for writing: %s", tb->path, strerror(errno));
    Pb ev = {0};
    pb_len(&ev, EV_FILE_VERSION, "brain.Event:2", 13);
    put_record(tb, &ev);
    ev.n = 0;
    Pb log = {0};
    pb_key(&log, LOG_STATUS, WIRE_VARINT);
    pb_varint(&log, LOG_START);
    pb_key(&ev, EV_STEP, WIRE_VARINT);
    pb_varint(&ev, (uint64_t)first_step);
    pb_len(&ev, EV_SESSION_LOG, log.b, log.n);
    put_record(tb, &ev);
    free(log.b);
    free(ev.b);
    return tb;
}

/* A metrics.jsonl record (not an event's): its numbers but the step, one Event. */
void rt_tb_record(rt_tb *tb, const char *json)
{
    if (!tb)
        return;
    cJSON *o = cJSON_Parse(json);
    const cJSON *step = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    if (!o || cJSON_GetObjectItemCaseSensitive(o, "event") || !cJSON_IsNumber(step)) {
        cJSON_Delete(o);
        return;
    }
    Pb sum = {0}, val = {0}, ev = {0};
    const cJSON *x;
    cJSON_ArrayForEach(x, o) {
        if (x == step || !cJSON_IsNumber(x))   /* (a number JSON cannot hold: null) */
            continue;
        val.n = 0;
        pb_len(&val, VAL_TAG, x->string, strlen(x->string));
        pb_float(&val, VAL_SIMPLE, (float)x->valuedouble);
        pb_len(&sum, SUM_VALUE, val.b, val.n);
    }
    pb_key(&ev, EV_STEP, WIRE_VARINT);
    pb_varint(&ev, (uint64_t)(int64_t)step->valuedouble);
    pb_len(&ev, EV_SUMMARY, sum.b, sum.n);
    put_record(tb, &ev);
    free(sum.b), free(val.b), free(ev.b);
    cJSON_Delete(o);
}

void rt_tb_close(rt_tb *tb)
{
    if (!tb)
        return;
    if (fclose(tb->f) != 0)
        rt_fail("%s: write failed: %s", tb->path, strerror(errno));
    free(tb);
}
