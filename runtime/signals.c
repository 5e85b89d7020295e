/* signals.c: how a run answers SIGINT, SIGTERM and SIGHUP. Training stops at the next
 * step boundary with a checkpoint (exit 130) and a second signal leaves at once;
 * --eval, which writes nothing, ends at once. The handlers only set flags and write
 * fixed messages (async-signal-safe); the loop reads the flags. */
#include <unistd.h>
#include "run.h"

volatile sig_atomic_t rt_signal_seen;
volatile sig_atomic_t rt_have_ckpt;
volatile sig_atomic_t rt_sampling;

/* The first SIGINT/SIGTERM/SIGHUP asks the loop to stop at the next step boundary (it writes
 * a checkpoint and exits 130); a second one leaves at once. Checkpoints are written
 * to a temporary folder and renamed, so leaving mid-write cannot damage the last one. */
static void on_signal(int sig)
{
    if (rt_signal_seen) {
        static const char kept[] = "\ntrainc: second signal: exiting now (the last complete "
                                   "checkpoint is intact)\n";
        static const char none[] = "\ntrainc: second signal: exiting now (no checkpoint was "
                                   "complete yet: this run cannot be resumed)\n";
        static const char done[] = "\ntrainc: second signal: exiting now (the run's outputs "
                                   "are written)\n";
        ssize_t w = rt_sampling    ? write(2, done, sizeof done - 1)
                    : rt_have_ckpt ? write(2, kept, sizeof kept - 1)
                                   : write(2, none, sizeof none - 1);
        (void)w;
        _exit(RT_EXIT_INTERRUPTED);
    }
    rt_signal_seen = sig;
    static const char msg[] = "\ntrainc: stopping at the end of this step (a second "
                              "signal exits at once)\n";
    static const char smsg[] = "\ntrainc: stopping the sampling (a second signal exits at "
                               "once)\n";
    ssize_t w = rt_sampling ? write(2, smsg, sizeof smsg - 1) : write(2, msg, sizeof msg - 1);
    (void)w;
}

/* --eval writes nothing, --predict one file: a signal ends it at once, with exit 130,
 * the file's .tmp removed (util.c's rt_tmp_live) */
static void on_signal_eval(int sig)
{
    (void)sig;
    const char *tmp = rt_tmp_live;
    if (tmp)
        unlink(tmp);
    static const char msg[] = "\ntrainc: interrupted (nothing was written)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(RT_EXIT_INTERRUPTED);
}

/* SIGHUP (the terminal or the SSH session gone) stops the run as SIGINT does. SIGPIPE
 * is ignored: with `trainer 2>&1 | tee log`, Ctrl-C ends tee too, and the next message
 * would otherwise kill the trainer before its checkpoint; a write to a closed pipe
 * fails instead (messages are lost, the run's files are not). */
void rt_catch_signals(void)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGPIPE, SIG_IGN);
}

void rt_catch_signals_eval(void)
{
    signal(SIGINT, on_signal_eval);
    signal(SIGTERM, on_signal_eval);
    signal(SIGHUP, on_signal_eval);
}
