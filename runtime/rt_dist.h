/* rt_dist.h: the distributed layer (dist.c): ranks from MPI, CPU collectives over
 * MPI, the overlapped bucketed all-reduce of DDP, and ZeRO's bucketed reduce-scatter,
 * gathers and shard arithmetic.
 *
 * Plain C with no vendor header (mpi.h stays inside dist.c), so libtcc can read it.
 * A process not started by an MPI launcher is a world of one: MPI is never touched,
 * every collective is a no-op (or a copy), and no launcher is needed.
 *
 * Every collective must be called by all ranks in the same order with matching
 * counts (MPI's rule). A failing MPI call exits 2 with a message naming it; a
 * collective that does not complete within TRAINC_DIST_TIMEOUT seconds (default 60;
 * 0 = wait forever) prints which one and aborts the whole job with exit code 2, so
 * a dead or stuck peer never hangs the others. */
#ifndef RT_DIST_H
#define RT_DIST_H

#include <stdint.h>

/* Joins the job when launched by mpirun/srun (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * PMI_RANK or PMIX_RANK set); otherwise a world of one. argc/argv may be NULL.
 * Idempotent. Before it, and without a launcher, rank 0 of world 1. */
void rt_dist_init(int *argc, char ***argv);
int rt_dist_rank(void);
int rt_dist_world(void);
int rt_dist_local_rank(void);      /* among the ranks on this node (shared memory) */
int rt_dist_local_world(void);     /* ranks on this node */
/* Waits for pending buckets, stops the watchdog, finalizes MPI. Every rank must call
 * it before a successful exit (mpirun treats a rank leaving without it as a crash);
 * failure paths just exit, which makes mpirun stop the job. */
void rt_dist_finalize(void);
/* TRAINC_DIST_TIMEOUT in seconds with several ranks, else 0 (no limit): how long a
 * wait on the other ranks may last (a GPU's wait for NCCL polls against it). */
double rt_dist_timeout(void);
/* Says that `op` has waited `waited` seconds on the other ranks and ends the job with
 * exit 2, as the watchdog does. */
_Noreturn void rt_dist_hung(const char *op, double waited);
/* Ends every rank of the job with `code` (MPI_Abort), or just this process. */
_Noreturn void rt_dist_abort(int code);

/* Blocking collectives, in place where the name says so. */
void rt_allreduce_sum_f32(float *x, int64_t n);
void rt_allreduce_sum_f64(double *x, int64_t n);   /* metrics: loss sums, counts */
void rt_rank_mean_f64(double *x, int64_t n);       /* x's mean over the ranks, in place */
void rt_broadcast(void *buf, int64_t bytes, int root);
void rt_barrier(void);
/* Every rank waits here while rank 0 works alone (writes a checkpoint, the best or the
 * final weights, samples): not under the watchdog, whose timeout is for collectives that
 * end together; a large checkpoint on a slow disk takes minutes. */
void rt_barrier_solo(void);
/* counts[world]: rank r's part of the vectors; part r starts at the sum of the
 * counts before it (rt_dist_shard_counts gives the usual split).
 * reduce-scatter: in holds the whole vector (sum of counts), out receives this
 * rank's part of the element-wise sum over ranks. in == out is allowed (the part
 * then lands at the start of the buffer).
 * allgather: in holds this rank's part, out receives every rank's part in order.
 * in == out + (start of this rank's part) is allowed (the usual ZeRO layout). */
void rt_reduce_scatter_sum_f32(const float *in, float *out, const int64_t *counts);
void rt_allgather_f32(const float *in, float *out, const int64_t *counts);
/* gather: in holds this rank's part (counts[rank] floats); on `root`, out receives
 * every rank's part in order (elsewhere out is not touched). in must not overlap out.
 * For checkpoints: the root writes between gathers, so, as in rt_barrier_solo, only the
 * root's wait is under the watchdog. */
void rt_gather_f32(const float *in, float *out, const int64_t *counts, int root);

/* Overlapped all-reduce (DDP): starts summing grads[0, n) over ranks in place and
 * returns at once; the buffer must not be touched until rt_bucket_wait_all. MPI
 * moves a nonblocking collective forward only inside MPI calls, so each start also
 * pushes the earlier buckets on, and rt_bucket_poll does only that (call it between
 * kernels when buckets are few). Returns the bucket's number since the last wait.
 * The sum is not divided by the world size: scale the loss gradient by 1 / world. */
int rt_bucket_start(float *grads, int64_t n);
/* The same for a reduce-scatter (ZeRO): starts summing in[0, sum of counts) over ranks;
 * this rank's part of the sum (counts[rank] floats, part r starting at the sum of the
 * counts before it) goes to out, or, with in == out, to the start of the buffer. Neither
 * buffer may be touched until the bucket is done. counts is copied. */
int rt_bucket_reduce_scatter_start(const float *in, float *out, const int64_t *counts);
void rt_bucket_poll(void);
/* Whether bucket h (a number the starts returned since the last wait) has completed:
 * its buffers may then be used again. */
int rt_bucket_done(int h);
/* Waits for bucket h only (the others stay in flight). */
void rt_bucket_wait(int h);
void rt_bucket_wait_all(void);

/* Contiguous near-equal shards of [0, n): rank r gets [lo, hi), the first n % world
 * ranks one element more. counts[world] receives every rank's hi - lo. */
void rt_dist_shard(int64_t n, int rank, int world, int64_t *lo, int64_t *hi);
void rt_dist_shard_counts(int64_t n, int world, int64_t *counts);

#endif
