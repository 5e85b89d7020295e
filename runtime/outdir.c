#define _GNU_SOURCE
/* outdir.c: the output folder. Which one (--out, the resumed run's, out_dir, runs/NAME);
 * one run a folder at a time (a lock held for the run), its identity checked before
 * each write (a folder moved away took its files with it); an earlier run in it moved
 * aside; and rank 0's setting up before the first step. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "run.h"

void rt_join_path(char *dst, size_t n, const char *dir, const char *file)
{
    if (snprintf(dst, n, "%s/%s", dir, file) >= (int)n)
        rt_fail("path too long: %s/%s", dir, file);
}

int rt_same_folder(const char *a, const char *b)
{
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int64_t rt_file_size(const char *dir, const char *name)
{
    char p[RT_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* One run a folder at a time: rank 0 holds an exclusive lock on its output folder
 * (flock on the folder itself: no file of ours in it, and the kernel drops the lock
 * when the process ends, however it ends). Returns the folder's descriptor, locked,
 * or -1 when another process holds it; a file system without flock locks nothing. */
static int lock_folder(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -2;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        close(fd);
        return -1;
    }
    return fd;
}

static _Noreturn void folder_in_use(const char *out)
{
    rt_input_error("%s is in use: another run is writing there now\n  hint: --out names "
                   "another folder; wait for that run to end to --resume it", out);
}

/* The output folder, locked for the run (lock_folder), and its identity, which each
 * checkpoint and the end check against: a folder moved or removed during the run took
 * its files with it, and writing on into a new one of that name would split the run. */
static int out_fd = -1;
static struct stat out_id;

static void hold_out(const char *out)
{
    if (out_fd >= 0) {        /* held since hold_resumed: the same folder, or exit 2 */
        rt_out_check(out);
        return;
    }
    out_fd = lock_folder(out);
    if (out_fd == -1)
        folder_in_use(out);
    if (stat(out, &out_id) != 0)
        rt_fail("%s: %s", out, strerror(errno));
}

void rt_out_check(const char *out)
{
    struct stat now;
    if (stat(out, &now) != 0 || now.st_dev != out_id.st_dev || now.st_ino != out_id.st_ino)
        rt_fail("the output folder %s was moved or removed during the run (what was written "
                "went with it); nothing more is written", out);
}

/* --resume DIR: the folder is locked before its checkpoints are read, not only once
 * the run starts writing. A run still working there would otherwise be read as it
 * writes and prunes them (its newest taken for damaged, or none found), and a new run
 * started into DIR at the same time could move the folder aside under the resume:
 * continuing in DIR, the resume then went on from the moved run's checkpoint into a
 * new, empty DIR; --out elsewhere, it read a checkpoint, records and best weights
 * that were being moved or pruned. Continuing in DIR, the lock is the run's
 * (out_fd); --out elsewhere, it is held until rt_out_release_resumed, once the
 * resume has read what it takes from DIR. A folder that is not there is left to the
 * resume's own error. */
static int read_fd = -1;

void rt_out_hold_resumed(const char *dir, int in_place)
{
    rt_out_release_resumed();
    int fd = lock_folder(dir);
    if (fd == -1)
        folder_in_use(dir);
    if (fd >= 0 && !in_place)
        read_fd = fd;
    else if (fd >= 0 && fstat(fd, &out_id) == 0)
        out_fd = fd;
    else if (fd >= 0)
        close(fd);
}

void rt_out_release_resumed(void)
{
    if (read_fd >= 0)
        close(read_fd);
    read_fd = -1;
}

/* The temporary names of the files a run writes whole into OUT (written under NAME.tmp,
 * then renamed): a run killed outright during such a write (SIGKILL, the OOM killer)
 * leaves NAME.tmp, as large as NAME, for good (a checkpoint's temporary folder is
 * removed by the next checkpoint; with "checkpoint": null there is none). The next
 * run into the folder removes them, under the folder's lock (no run is writing them).
 * One that cannot be removed stays: each write unlinks its .tmp before it starts. */
static void remove_cut_writes(const char *out)
{
    static const char *const names[] = {"model.safetensors.tmp", "best.safetensors.tmp",
                                        "metrics.jsonl.tmp", "loss.svg.tmp", "profile.json.tmp",
                                        "lr_find.jsonl.tmp", "lr_find.svg.tmp",
                                        "samples.npy.tmp", "samples.png.tmp"};
    char p[RT_PATH_MAX + 32];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        rt_join_path(p, sizeof p, out, names[i]);
        unlink(p);
    }
}

/* A new run into a folder that holds an earlier one (its metrics.jsonl, checkpoints or
 * weights) would write over its records and weights, and mix its checkpoints with this
 * run's (keep would prune the new ones, a later --resume take an old one): the earlier
 * run is moved aside whole, to OUT.1 (or .2, ...), first. */
static void keep_earlier_run(const char *out)
{
    char p[RT_PATH_MAX + 32], dir[RT_PATH_MAX + 32], to[RT_PATH_MAX + 48];
    static const char *const marks[] = {"metrics.jsonl", "checkpoints", "model.safetensors",
                                        "best.safetensors"};
    int held = 0;
    for (size_t i = 0; i < sizeof marks / sizeof *marks && !held; i++) {
        rt_join_path(p, sizeof p, out, marks[i]);
        held = access(p, F_OK) == 0;
    }
    if (!held)
        return;
    snprintf(dir, sizeof dir, "%s", out);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = 0;
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    if (!strcmp(base, ".") || !strcmp(base, ".."))
        rt_input_error("%s holds an earlier run, and the folder a run works in cannot be "
                       "moved aside\n  hint: --resume %s continues it; --out names another "
                       "folder", out, out);
    for (int k = 1;; k++) {
        snprintf(to, sizeof to, "%s.%d", dir, k);
        if (access(to, F_OK) != 0 && errno == ENOENT)
            break;
    }
    int fd = lock_folder(dir);
    if (fd == -1)
        folder_in_use(out);
    remove_cut_writes(dir);   /* the earlier run's, not worth keeping aside */
    int moved = rename(dir, to);
    if (fd >= 0)
        close(fd);
    if (moved != 0)
        rt_input_error("%s holds an earlier run, which cannot be moved aside to %s: %s\n  "
                       "hint: --resume %s continues it; --out names another folder", out, to,
                       strerror(errno), out);
    fprintf(stderr, "trainc: %s held an earlier run: moved it to %s\n", out, to);
}

/* the output folder; --resume continues in the run's own folder */
static char fast_dir[RT_PATH_MAX];
static void remove_fast_dir(void)
{
    if (fast_dir[0])
        rt_rm_rf(fast_dir);
}

void rt_out_name(Run *r)
{
    if (r->o.fast_dev_run) {
        const char *tmp = getenv("TMPDIR");
        snprintf(fast_dir, sizeof fast_dir, "%s/trainc-fast-dev-run-XXXXXX",
                 tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(fast_dir))
            rt_input_error("--fast-dev-run: cannot make a folder in %s: %s", tmp && *tmp ? tmp
                           : "/tmp", strerror(errno));
        atexit(remove_fast_dir);
        snprintf(r->out, sizeof r->out, "%s", fast_dir);
    } else if (r->o.out)
        snprintf(r->out, sizeof r->out, "%s", r->o.out);
    else if (r->o.resume)
        snprintf(r->out, sizeof r->out, "%s", r->o.resume);
    else if (r->c.out_dir[0])
        snprintf(r->out, sizeof r->out, "%s", r->c.out_dir);
    else
        snprintf(r->out, sizeof r->out, "runs/%s", r->m->name);
}

void rt_out_setup(Run *r, rt_loop_state *s)
{
    if (r->rank != 0) {
        r->mt = NULL;         /* only rank 0 writes metrics, plots and files */
        r->o.quiet = 1;
        return;
    }
    int here = r->o.resume && rt_same_folder(r->out, r->o.resume);   /* resumed in place */
    if (!r->lf && !here)
        keep_earlier_run(r->out);
    if (rt_mkdir_p(r->out) != 0)
        rt_input_error("cannot create the output folder %s: %s\n  hint: --out names a "
                       "folder trainc can create and write", r->out, strerror(errno));
    hold_out(r->out);
    /* a run on a read-only disk (a snapshot, a mount made read-only by errors) went
     * as far as cutting metrics.jsonl and exited 2 naming the cut alone: where the
     * rest of the run can go is the user's to say, before anything changes */
    if (here && access(r->out, W_OK) != 0 && errno == EROFS)
        rt_input_error("--resume %s: the folder is on a read-only file system, and a resume "
                       "goes on in the run's folder\n  hint: --resume %s --out DIR writes "
                       "the rest of the run into DIR (its metrics.jsonl starts with this "
                       "run's records)", r->o.resume, r->o.resume);
    remove_cut_writes(r->out);
    if (r->o.resume)
        rt_resume_into_out(r, s);
    rt_out_release_resumed();   /* --out elsewhere: the resumed folder is read */
    r->mt = r->lf ? NULL : rt_metrics_open(r->out, r->o.resume != NULL);
}
