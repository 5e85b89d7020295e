/* best_k.c: checkpoint.keep_best, Lightning's ModelCheckpoint(monitor, save_top_k): the
 * weights at the K best monitored values as OUT/best/step_N.safetensors (rank 0
 * writes). Each file's __metadata__ holds its step, the monitor and the value, and the
 * folder is ranked anew from them at each validation. A checkpoint holds second names
 * of the folder's files (its best/), which a resume puts back in their place: the
 * files as they were at its step, those a later validation displaced included. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "run.h"

typedef struct {
    int64_t step;
    double v;
} Kept;

static void file_of(char *out, size_t n, const char *dir, int64_t step)
{
    snprintf(out, n, "%s/step_%08lld.safetensors", dir, (long long)step);
}

/* step_N.safetensors: N, or -1 for another name */
static int64_t step_of(const char *name)
{
    long long step;
    int end = 0;
    if (sscanf(name, "step_%8lld.safetensors%n", &step, &end) != 1 || name[end] ||
        strlen(name) != strlen("step_00000000.safetensors") || step < 0)
        return -1;
    return step;
}

/* The files of DIR with their values (a file whose metadata cannot be read is left out
 * of the ranking, and so never removed); their number, *out to free. */
static int list_kept(const char *dir, Kept **out)
{
    char f[RT_PATH_MAX + 64], v[64];
    int n = 0, cap = 0;
    *out = NULL;
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    for (struct dirent *e; (e = readdir(dp));) {
        int64_t step = step_of(e->d_name);
        file_of(f, sizeof f, dir, step);
        char *end;
        if (step < 0 || rt_safetensors_meta(f, "value", v, sizeof v) != 0)
            continue;
        double x = strtod(v, &end);
        if (*end || !isfinite(x))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            Kept *k = realloc(*out, (size_t)cap * sizeof *k);
            if (!k)
                rt_fail("out of memory");
            *out = k;
        }
        (*out)[n++] = (Kept){step, x};
    }
    closedir(dp);
    return n;
}

/* a ranks before b: the better value, or of equal ones the earlier step (a later equal
 * value does not displace a kept one, as Lightning's strict comparison) */
static int before(int mode, Kept a, Kept b)
{
    return rt_better(mode, a.v, b.v) || (a.v == b.v && a.step < b.step);
}

/* rank 0: the weights of this step join the folder where they rank among the K best;
 * the files that fall out of the K best then go */
static void keep_if_best(Run *r, int64_t step, int mode, double v, const char *monitor)
{
    const int64_t K = r->c.ckpt_keep_best;
    char dir[RT_PATH_MAX + 16], f[RT_PATH_MAX + 64], vs[40], ss[24];
    snprintf(dir, sizeof dir, "%s/best", r->out);
    Kept *k, now = {step, v};
    int n = list_kept(dir, &k), ahead = 0;
    for (int i = 0; i < n; i++)
        ahead += k[i].step != step && before(mode, k[i], now);
    if (ahead < K) {
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            rt_fail("cannot make %s: %s", dir, strerror(errno));
        snprintf(vs, sizeof vs, "%.17g", v);
        snprintf(ss, sizeof ss, "%lld", (long long)step);
        const char *meta[] = {"step", ss, "monitor", monitor, "value", vs, NULL};
        file_of(f, sizeof f, dir, step);
        rt_write_weights_meta(r, f, meta);
        for (int i = 0; i < n; i++) {   /* the files with K or more ahead of them */
            if (k[i].step == step)
                continue;
            int over = before(mode, now, k[i]);   /* the files ranked ahead of k[i] */
            for (int j = 0; j < n; j++)
                over += j != i && k[j].step != step && before(mode, k[j], k[i]);
            file_of(f, sizeof f, dir, k[i].step);
            if (over >= K && unlink(f) != 0 && errno != ENOENT)
                rt_fail("cannot remove %s: %s", f, strerror(errno));
        }
    }
    free(k);
}

void rt_keep_best(Run *r, int64_t step, int mode, double v, const char *monitor)
{
    if (!r->c.has_checkpoint || r->c.ckpt_keep_best <= 0 || !isfinite(v))
        return;
    if (r->rank == 0)
        keep_if_best(r, step, mode, v, monitor);
    rt_barrier_solo();
}

/* Every step_N.safetensors of FROM as a second name in TO (made where there is one): 0,
 * or -1 with errno set. TO's own files of those names are replaced. */
int rt_keep_best_link(const char *from, const char *to)
{
    DIR *dp = opendir(from);
    if (!dp)
        return errno == ENOENT ? 0 : -1;
    int rc = 0, made = 0;
    char src[RT_PATH_MAX + 64], dst[RT_PATH_MAX + 64];
    for (struct dirent *e; rc == 0 && (e = readdir(dp));) {
        int64_t step = step_of(e->d_name);
        if (step < 0)
            continue;
        if (!made && mkdir(to, 0777) != 0 && errno != EEXIST)
            rc = -1;
        made = 1;
        file_of(src, sizeof src, from, step);
        file_of(dst, sizeof dst, to, step);
        if (rc == 0)
            rc = rt_link_or_copy(src, dst);
    }
    int e = errno;
    closedir(dp);
    errno = e;
    return rc;
}

/* --resume A [--out B]: OUT/best/ as it was at the checkpoint (the checkpoint's second
 * names put back; the files of later validations removed: the run redoes them) */
void rt_keep_best_resume(const Run *r, const char *ck)
{
    if (r->rank != 0)
        return;
    char from[RT_PATH_MAX + 80], to[RT_PATH_MAX + 16], f[RT_PATH_MAX + 64];
    snprintf(from, sizeof from, "%s/best", ck);
    snprintf(to, sizeof to, "%s/best", r->out);
    DIR *dp = opendir(to);
    for (struct dirent *e; dp && (e = readdir(dp));) {
        size_t n = strlen(e->d_name);
        int cut = !strncmp(e->d_name, "step_", 5) && n > 4 && !strcmp(e->d_name + n - 4, ".tmp");
        if (step_of(e->d_name) < 0 && !cut)   /* (a write a crash cut short too) */
            continue;
        snprintf(f, sizeof f, "%s/%s", to, e->d_name);
        if (unlink(f) != 0 && errno != ENOENT)
            rt_fail("cannot remove %s: %s", f, strerror(errno));
    }
    if (dp)
        closedir(dp);
    if (rt_keep_best_link(from, to) != 0)
        rt_fail("cannot put %s back into %s: %s%s", from, to, strerror(errno),
                rt_full_hint(errno));
}
