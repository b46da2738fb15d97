/* busywin.h - busy time, in total and per second of the last few seconds:
 * the one meaning of "utilization over the last 10 s" (a model instance's
 * batches, a server's calls in flight).
 *
 * An interval [start, end) counts in every second it covers, each second
 * getting its own share: a 3-second batch is busy time in 3 seconds, not a
 * burst in the second it ended. The fraction over N seconds is the busy
 * time in the N whole seconds before the current one, divided by N s.
 * Intervals that overlap add up: one instance never overlaps itself, so its
 * fraction stays within 1; a window fed by several instances (or by calls
 * that overlap) can reach their number. Callers that want "at least one
 * busy" (httpc's targets) merge overlapping calls before recording.
 *
 * Threads: one writer at a time (the instance's worker; a target's calls
 * under its mutex), any number of readers at once without a lock (relaxed
 * atomics; a reader racing a write sees the interval or not, in part at
 * worst). Zeroed memory is an empty window. Times are the caller's, so
 * tests drive it with their own clock. */
#ifndef BG_BUSYWIN_H
#define BG_BUSYWIN_H

#include <stdatomic.h>
#include <stdint.h>

/* Seconds kept: the longest window asked for plus room for a reader whose
 * "now" lags the writer's by a few seconds. */
#define BUSYWIN_SLOTS 16
/* The longest window a reader may ask for. */
#define BUSYWIN_MAX_S 12
/* The window every utilization figure uses. */
#define BUSYWIN_UTIL_S 10

struct busywin {
    _Atomic uint64_t total_ns;              /* all busy time recorded */
    _Atomic int64_t sec[BUSYWIN_SLOTS];     /* which second slot k holds (k = sec % SLOTS) */
    _Atomic uint64_t ns[BUSYWIN_SLOTS];     /* busy ns in that second */
};

/* Records busy time [start_ns, end_ns) (now_ns clock). Parts older than
 * BUSYWIN_SLOTS seconds before end_ns count in the total only. */
void busywin_add(struct busywin *w, int64_t start_ns, int64_t end_ns);
/* The same slots counting events instead of time: n more in the second
 * at_ns is in (rows arriving, per second, for a 10 s moving rate). The
 * readers below then return counts where they say ns. */
void busywin_count(struct busywin *w, int64_t at_ns, uint64_t n);
uint64_t busywin_total_ns(const struct busywin *w);
/* Busy ns in the `seconds` (1..BUSYWIN_MAX_S) whole seconds before the one
 * now_ns is in. */
uint64_t busywin_recent_ns(const struct busywin *w, int64_t now_ns, int seconds);
/* A count per second over the sliding window (now_ns - seconds, now_ns]:
 * the current second so far, the whole seconds before it, and the part of
 * the oldest second still inside the window (its count pro rata). Follows
 * a change a second sooner than the whole-seconds window above. */
double busywin_rate(const struct busywin *w, int64_t now_ns, int seconds);
/* The same as a fraction of the window: busy_ns / (seconds * 1 s). */
double busywin_fraction(const struct busywin *w, int64_t now_ns, int seconds);

#endif
