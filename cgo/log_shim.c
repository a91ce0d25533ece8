/* C side of the log shims declared in include/ucxgo/shim.h.
 *
 * UCX calls its log handlers on whatever thread logs: an application
 * thread inside a UCX call, UCX's async thread, sometimes with UCX's locks
 * held. So the handler here runs no Go code: it formats the line into a
 * ring in C memory under a small lock and wakes the Go reader through a
 * non-blocking pipe. A line that finds the ring full (or the lock held for
 * too long) is dropped and counted, never waited for. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2 */
#endif
#include "ucxgo/shim.h"

#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* The ring: records of ucxgo_log_line_t cut after their text, 8-byte
 * aligned, never split across the end (a padding record fills the rest).
 * head and tail count bytes since the start and only grow. */
#define UCXGO_LOG_RING_SIZE (256u * 1024u)
#define UCXGO_LOG_ALIGN     8u
#define UCXGO_LOG_PAD       (-1)

/* How long a logging thread tries for the lock before dropping its line
 * (spins, then yields): the holder only copies one record. */
#define UCXGO_LOG_SPINS     64u
#define UCXGO_LOG_TRIES     2048u

_Static_assert(offsetof(ucxgo_log_line_t, text) % 4 == 0, "text offset");
_Static_assert(sizeof(ucxgo_log_line_t) % UCXGO_LOG_ALIGN == 0,
               "a full record rounds up within the struct");
_Static_assert(UCXGO_LOG_RING_SIZE % UCXGO_LOG_ALIGN == 0, "ring size");

static unsigned char ucxgo_log_ring[UCXGO_LOG_RING_SIZE]
        __attribute__((aligned(UCXGO_LOG_ALIGN)));
static uint64_t ucxgo_log_head; /* under the lock */
static uint64_t ucxgo_log_tail; /* under the lock */
static char     ucxgo_log_lock_flag;

static int      ucxgo_log_routing;         /* atomic: 1 while Go takes lines */
static int      ucxgo_log_fatal_level = UCS_LOG_LEVEL_FATAL; /* atomic */
static unsigned ucxgo_log_inflight_count;  /* atomic */
static uint64_t ucxgo_log_dropped_total;   /* atomic */
static uint64_t ucxgo_log_dropped_pending; /* atomic: not yet told in a line */
static int      ucxgo_log_wake_pending;    /* atomic */
static int      ucxgo_log_rfd = -1, ucxgo_log_wfd = -1;

/* Names of ucs_log_level_t's values, FATAL to POLL (the enum is the same
 * in every release from 1.16 on), for UCX_LOG_LEVEL_TRIGGER and stderr. */
static const char *const ucxgo_log_level_names[] = {
    "FATAL", "ERROR", "WARN", "DIAG", "INFO", "DEBUG",
    "TRACE", "REQ", "DATA", "ASYNC", "FUNC", "POLL"
};

static void ucxgo_log_relax(unsigned i)
{
    if (i < UCXGO_LOG_SPINS) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield" ::: "memory");
#else
        __asm__ __volatile__("" ::: "memory");
#endif
    } else {
        sched_yield();
    }
}

/* Takes the lock, giving up after tries attempts (0: never gives up). */
static int ucxgo_log_lock(unsigned tries)
{
    unsigned i;

    for (i = 0;; ++i) {
        if (!__atomic_test_and_set(&ucxgo_log_lock_flag, __ATOMIC_ACQUIRE)) {
            return 1;
        }
        if ((tries != 0) && (i + 1 >= tries)) {
            return 0;
        }
        ucxgo_log_relax(i);
    }
}

static void ucxgo_log_unlock(void)
{
    __atomic_clear(&ucxgo_log_lock_flag, __ATOMIC_RELEASE);
}

static void ucxgo_log_count_drop(void)
{
    __atomic_add_fetch(&ucxgo_log_dropped_total, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&ucxgo_log_dropped_pending, 1, __ATOMIC_RELAXED);
}

/* Appends rec (its first size bytes, size aligned); under the lock. */
static int ucxgo_log_push_locked(const ucxgo_log_line_t *rec, uint32_t size)
{
    uint64_t used = ucxgo_log_tail - ucxgo_log_head;
    uint32_t pos  = (uint32_t)(ucxgo_log_tail % UCXGO_LOG_RING_SIZE);
    uint32_t pad  = 0;
    int32_t  pad_level = UCXGO_LOG_PAD;

    if (pos + size > UCXGO_LOG_RING_SIZE) {
        pad = UCXGO_LOG_RING_SIZE - pos;
    }
    if (used + pad + size > UCXGO_LOG_RING_SIZE) {
        return 0;
    }
    if (pad != 0) {
        memcpy(ucxgo_log_ring + pos, &pad, sizeof(pad));
        memcpy(ucxgo_log_ring + pos + sizeof(pad), &pad_level,
               sizeof(pad_level));
        ucxgo_log_tail += pad;
        pos             = 0;
    }
    memcpy(ucxgo_log_ring + pos, rec, size);
    ucxgo_log_tail += size;
    return 1;
}

/* Takes the oldest record into out; under the lock. */
static int ucxgo_log_pop_locked(ucxgo_log_line_t *out)
{
    uint32_t pos, size;
    int32_t level;

    while (ucxgo_log_tail != ucxgo_log_head) {
        pos = (uint32_t)(ucxgo_log_head % UCXGO_LOG_RING_SIZE);
        memcpy(&size, ucxgo_log_ring + pos, sizeof(size));
        memcpy(&level, ucxgo_log_ring + pos + sizeof(size), sizeof(level));
        ucxgo_log_head += size;
        if (level != UCXGO_LOG_PAD) {
            memcpy(out, ucxgo_log_ring + pos, size);
            return 1;
        }
    }
    return 0;
}

static void ucxgo_log_wake_reader(void)
{
    ssize_t ret;

    if (!__atomic_exchange_n(&ucxgo_log_wake_pending, 1, __ATOMIC_SEQ_CST)) {
        /* EAGAIN means a byte is already waiting: the reader wakes anyway */
        ret = write(ucxgo_log_wfd, "", 1);
        (void)ret;
    }
}

static const char *ucxgo_log_level_name(int level)
{
    if (level == UCS_LOG_LEVEL_PRINT) {
        return "PRINT";
    }
    if ((level < 0) || (level >= (int)(sizeof(ucxgo_log_level_names) /
                                       sizeof(ucxgo_log_level_names[0])))) {
        return "?";
    }
    return ucxgo_log_level_names[level];
}

/* A line UCX treats as fatal is followed by an abort: the lines still in
 * the ring would never reach Go, so they go to stderr now, from C. */
static void ucxgo_log_flush_to_stderr(void)
{
    ucxgo_log_line_t rec;
    char buf[UCXGO_LOG_MSG_MAX + 256];
    const char *t;
    ssize_t ret;
    int n;

    if (!ucxgo_log_lock(UCXGO_LOG_TRIES)) {
        return;
    }
    while (ucxgo_log_pop_locked(&rec)) {
        t = rec.text;
        n = snprintf(buf, sizeof(buf), "ucx-go: UCX %s %.*s:%u %.*s\n",
                     ucxgo_log_level_name(rec.level), (int)rec.file_len, t,
                     rec.line, (int)rec.msg_len,
                     t + rec.file_len + rec.func_len + rec.comp_len);
        if (n > 0) {
            ret = write(2, buf, ((size_t)n < sizeof(buf)) ? (size_t)n :
                                                            sizeof(buf) - 1);
            (void)ret;
        }
    }
    ucxgo_log_unlock();
}

static uint16_t ucxgo_log_copy(char *dst, size_t max, const char *src)
{
    size_t n;

    if (src == NULL) {
        return 0;
    }
    n = strnlen(src, max);
    memcpy(dst, src, n);
    return (uint16_t)n;
}

static ucs_log_func_rc_t
ucxgo_log_handler(const char *file, unsigned line, const char *function,
                  ucs_log_level_t level,
                  const ucs_log_component_config_t *comp_conf,
                  const char *format, va_list ap)
{
    int saved_errno       = errno;
    ucs_log_func_rc_t rc  = UCS_LOG_FUNC_RC_CONTINUE;
    const char *base;
    struct timespec ts;
    ucxgo_log_line_t rec;
    size_t off;
    uint32_t size;
    int n, pushed;

    __atomic_add_fetch(&ucxgo_log_inflight_count, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&ucxgo_log_routing, __ATOMIC_SEQ_CST)) {
        goto out;
    }
    if ((int)level <= __atomic_load_n(&ucxgo_log_fatal_level,
                                      __ATOMIC_RELAXED)) {
        ucxgo_log_flush_to_stderr();
        goto out; /* UCX prints it and aborts */
    }
    /* UCX's own handler decides what it would not print (a level above the
     * component's, a file outside UCX_LOG_FILE_FILTER) */
    if (comp_conf != NULL) {
        if ((level != UCS_LOG_LEVEL_PRINT) &&
            ((int)level > (int)comp_conf->log_level)) {
            goto out;
        }
        if ((comp_conf->file_filter != NULL) && (file != NULL) &&
            (strcmp(comp_conf->file_filter, "*") != 0) &&
            (fnmatch(comp_conf->file_filter, file, 0) == FNM_NOMATCH)) {
            goto out;
        }
    }

    clock_gettime(CLOCK_REALTIME, &ts);
    rec.level   = level;
    rec.time_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    rec.line    = line;
    base        = (file == NULL) ? NULL : strrchr(file, '/');
    base        = (base == NULL) ? file : base + 1;
    off          = 0;
    rec.file_len = ucxgo_log_copy(rec.text + off, UCXGO_LOG_FILE_MAX, base);
    off         += rec.file_len;
    rec.func_len = ucxgo_log_copy(rec.text + off, UCXGO_LOG_FUNC_MAX, function);
    off         += rec.func_len;
    rec.comp_len = (comp_conf == NULL) ? 0 :
                   ucxgo_log_copy(rec.text + off, UCXGO_LOG_COMP_MAX,
                                  comp_conf->name);
    off         += rec.comp_len;

    errno = saved_errno; /* for %m */
    n     = vsnprintf(rec.text + off, UCXGO_LOG_MSG_MAX, format, ap);
    if (n < 0) {
        n = 0;
    } else if (n > UCXGO_LOG_MSG_MAX - 1) {
        n = UCXGO_LOG_MSG_MAX - 1;
    }
    while ((n > 0) && (rec.text[off + n - 1] == '\n')) {
        --n;
    }
    rec.msg_len = (uint16_t)n;
    size        = (uint32_t)(offsetof(ucxgo_log_line_t, text) + off + n);
    size        = (size + UCXGO_LOG_ALIGN - 1) & ~(UCXGO_LOG_ALIGN - 1);
    rec.size    = size;

    rc = UCS_LOG_FUNC_RC_STOP;
    if (!ucxgo_log_lock(UCXGO_LOG_TRIES)) {
        ucxgo_log_count_drop();
        goto out;
    }
    rec.dropped = __atomic_exchange_n(&ucxgo_log_dropped_pending, 0,
                                      __ATOMIC_RELAXED);
    pushed      = ucxgo_log_push_locked(&rec, size);
    if (!pushed) {
        /* give the count back to the next line that fits */
        __atomic_add_fetch(&ucxgo_log_dropped_pending, rec.dropped,
                           __ATOMIC_RELAXED);
    }
    ucxgo_log_unlock();
    if (!pushed) {
        ucxgo_log_count_drop();
    }
    ucxgo_log_wake_reader();

out:
    __atomic_sub_fetch(&ucxgo_log_inflight_count, 1, __ATOMIC_SEQ_CST);
    errno = saved_errno;
    return rc;
}

int ucxgo_log_install(int *pushed)
{
    int fds[2];
    unsigned before;

    *pushed = 1;
    if (ucxgo_log_rfd >= 0) {
        return ucxgo_log_rfd;
    }
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
        return -1;
    }
    ucxgo_log_rfd = fds[0];
    ucxgo_log_wfd = fds[1];
    before        = ucs_log_num_handlers();
    ucs_log_push_handler(ucxgo_log_handler);
    if (ucs_log_num_handlers() != before + 1) {
        /* UCX's table of handlers is full (it says nothing) */
        close(fds[0]);
        close(fds[1]);
        ucxgo_log_rfd = ucxgo_log_wfd = -1;
        *pushed       = 0;
        errno         = ENOSPC;
        return -1;
    }
    return ucxgo_log_rfd;
}

/* The lowest level UCX treats as fatal: FATAL, or what UCX_LOG_LEVEL_TRIGGER
 * says (UCX's own handler aborts after printing such a line). */
static int ucxgo_log_trigger_level(void)
{
    char value[32] = "";
    unsigned i;

    if (ucs_global_opts_get_value("LOG_LEVEL_TRIGGER", value,
                                  sizeof(value)) != UCS_OK) {
        return UCS_LOG_LEVEL_FATAL;
    }
    for (i = 0; i < sizeof(ucxgo_log_level_names) /
                    sizeof(ucxgo_log_level_names[0]); ++i) {
        if (strcasecmp(value, ucxgo_log_level_names[i]) == 0) {
            return (int)i;
        }
    }
    return UCS_LOG_LEVEL_FATAL;
}

void ucxgo_log_route(int on)
{
    if (on) {
        __atomic_store_n(&ucxgo_log_fatal_level, ucxgo_log_trigger_level(),
                         __ATOMIC_RELAXED);
    }
    __atomic_store_n(&ucxgo_log_routing, on ? 1 : 0, __ATOMIC_SEQ_CST);
}

unsigned ucxgo_log_inflight(void)
{
    return __atomic_load_n(&ucxgo_log_inflight_count, __ATOMIC_SEQ_CST);
}

void ucxgo_log_wake(void)
{
    ucxgo_log_wake_reader();
}

void ucxgo_log_ack(void)
{
    __atomic_store_n(&ucxgo_log_wake_pending, 0, __ATOMIC_SEQ_CST);
}

int ucxgo_log_pop(ucxgo_log_line_t *out)
{
    int found;

    ucxgo_log_lock(0);
    found = ucxgo_log_pop_locked(out);
    ucxgo_log_unlock();
    return found;
}

uint64_t ucxgo_log_dropped(void)
{
    return __atomic_load_n(&ucxgo_log_dropped_total, __ATOMIC_RELAXED);
}
