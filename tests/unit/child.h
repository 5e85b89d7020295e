/* child.h: the unit tests' way to check bad input: run the code in a forked child
 * (it exits 1 on bad input), capture its stderr, and check the exit code and the
 * words of the message. Included by the unit tests that need it. */
#ifndef TEST_CHILD_H
#define TEST_CHILD_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*child_fn)(const void *arg);

/* Runs fn(arg) in a child with stderr captured; returns its exit code (-signal when
 * killed). */
static int run_child(child_fn fn, const void *arg, char *err, size_t cap)
{
    int pfd[2];
    if (pipe(pfd) != 0) {
        perror("pipe");
        exit(2);
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        close(pfd[0]);
        if (dup2(pfd[1], 2) < 0)
            _exit(99);
        fn(arg);
        exit(0);
    }
    close(pfd[1]);
    size_t n = 0;
    ssize_t r;
    char sink[512];
    /* Keep draining past cap so a chatty child never blocks on a full pipe. */
    while ((r = read(pfd[0], n < cap - 1 ? err + n : sink,
                     n < cap - 1 ? cap - 1 - n : sizeof sink)) > 0 ||
           (r < 0 && errno == EINTR))
        if (r > 0 && n < cap - 1)
            n += (size_t)r;
    err[n] = 0;
    close(pfd[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            perror("waitpid");
            exit(2);
        }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

/* Does err start with an error line, "PLACE: error: MESSAGE" (PLACE a file, or trainc)? */
static int error_line(const char *err)
{
    const char *e = strstr(err, ": error: "), *nl = strchr(err, '\n');
    return e && e > err && (!nl || e < nl);
}

/* The child must exit 1 with an error line and every word (NULL-terminated). */
static int expect_input_error(child_fn fn, const void *arg, ...)
{
    char err[4096];
    int code = run_child(fn, arg, err, sizeof err);
    int ok = code == 1 && error_line(err);
    va_list ap;
    va_start(ap, arg);
    for (const char *w; (w = va_arg(ap, const char *));)
        if (!strstr(err, w)) {
            fprintf(stderr, "  stderr lacks \"%s\"\n", w);
            ok = 0;
        }
    va_end(ap);
    if (!ok)
        fprintf(stderr, "  exit code %d, stderr: %s", code, err);
    return ok;
}

#endif
