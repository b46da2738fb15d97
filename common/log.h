/* log.h - timestamped, levelled log lines, one write(2) each so threads never interleave.
 *
 * The logger is an explicit object owned by main; modules that log get it
 * passed in (or use the process logger set once by main via log_set_default,
 * which is the single piece of process-wide state, like stderr itself). */
#ifndef BG_LOG_H
#define BG_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

struct log;

/* path NULL logs to stderr. Returns NULL and fills msg on failure. */
struct log *log_open(const char *path, enum log_level level, char *msg, int msglen);
void log_close(struct log *l);
/* Reopens the file (after rotation; SIGHUP). No-op for stderr. Returns 0 or -errno. */
int log_reopen(struct log *l);
void log_set_level(struct log *l, enum log_level level);
enum log_level log_get_level(const struct log *l);
/* "debug" | "info" | "warn" | "error" -> 0 and *out, else -1. */
int log_level_parse(const char *s, enum log_level *out);
const char *log_level_name(enum log_level level);

void log_set_default(struct log *l);
struct log *log_default(void);

void log_write(struct log *l, enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A gate for a line a client can provoke at will (one a connection it
 * opens): at most one such line a second passes. Shared by threads
 * (atomics); zeroed memory is an open gate. log_gate_pass says whether a
 * line may be written now, and *held how many were held back since the
 * last that passed, for that line to say. */
struct log_gate {
    _Atomic int64_t next_ns;
    _Atomic unsigned long long held;
};
bool log_gate_pass(struct log_gate *g, int64_t now_ns, unsigned long long *held);

#define log_debug(...) log_write(log_default(), LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_write(log_default(), LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_write(log_default(), LOG_WARN, __VA_ARGS__)
#define log_error(...) log_write(log_default(), LOG_ERROR, __VA_ARGS__)

#endif
