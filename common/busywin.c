/* busywin.c - see busywin.h. */
#include "common/busywin.h"

#define NS_PER_S 1000000000LL

/* Adds d ns to second s. A slot still holding an older second is reset
 * first: its count is zeroed before the new second is published, so a
 * reader that sees the new second never sees the old count under it. */
static void busywin_slot_add(struct busywin *w, int64_t s, uint64_t d)
{
    int k = (int)(s % BUSYWIN_SLOTS);
    int64_t held = atomic_load_explicit(&w->sec[k], memory_order_relaxed);
    if (held > s)
        return;   /* the slot moved on to a newer second: s is past every window */
    if (held != s) {
        atomic_store_explicit(&w->ns[k], 0, memory_order_relaxed);
        atomic_store_explicit(&w->sec[k], s, memory_order_release);
    }
    atomic_fetch_add_explicit(&w->ns[k], d, memory_order_relaxed);
}

void busywin_add(struct busywin *w, int64_t start_ns, int64_t end_ns)
{
    if (end_ns <= start_ns || start_ns < 0)
        return;
    atomic_fetch_add_explicit(&w->total_ns, (uint64_t)(end_ns - start_ns), memory_order_relaxed);
    /* Only the seconds the slots can hold matter for a window. */
    int64_t floor_ns = (end_ns / NS_PER_S - (BUSYWIN_SLOTS - 1)) * NS_PER_S;
    int64_t from = start_ns > floor_ns ? start_ns : floor_ns;
    while (from < end_ns) {
        int64_t s = from / NS_PER_S;
        int64_t to = (s + 1) * NS_PER_S < end_ns ? (s + 1) * NS_PER_S : end_ns;
        busywin_slot_add(w, s, (uint64_t)(to - from));
        from = to;
    }
}

void busywin_count(struct busywin *w, int64_t at_ns, uint64_t n)
{
    if (at_ns < 0)
        return;
    atomic_fetch_add_explicit(&w->total_ns, n, memory_order_relaxed);
    busywin_slot_add(w, at_ns / NS_PER_S, n);
}

uint64_t busywin_total_ns(const struct busywin *w)
{
    return atomic_load_explicit(&w->total_ns, memory_order_relaxed);
}

uint64_t busywin_recent_ns(const struct busywin *w, int64_t now_ns, int seconds)
{
    if (seconds < 1)
        seconds = 1;
    if (seconds > BUSYWIN_MAX_S)
        seconds = BUSYWIN_MAX_S;
    int64_t cur = now_ns / NS_PER_S;
    uint64_t busy = 0;
    for (int k = 0; k < BUSYWIN_SLOTS; k++) {
        int64_t s = atomic_load_explicit(&w->sec[k], memory_order_acquire);
        if (s >= cur - seconds && s < cur)
            busy += atomic_load_explicit(&w->ns[k], memory_order_relaxed);
    }
    return busy;
}

double busywin_fraction(const struct busywin *w, int64_t now_ns, int seconds)
{
    if (seconds < 1)
        seconds = 1;
    if (seconds > BUSYWIN_MAX_S)
        seconds = BUSYWIN_MAX_S;
    return (double)busywin_recent_ns(w, now_ns, seconds) / ((double)seconds * 1e9);
}

double busywin_rate(const struct busywin *w, int64_t now_ns, int seconds)
{
    if (seconds < 1)
        seconds = 1;
    if (seconds > BUSYWIN_MAX_S)
        seconds = BUSYWIN_MAX_S;
    int64_t cur = now_ns / NS_PER_S;
    double into = (double)(now_ns % NS_PER_S) / 1e9, sum = 0;
    for (int k = 0; k < BUSYWIN_SLOTS; k++) {
        int64_t s = atomic_load_explicit(&w->sec[k], memory_order_acquire);
        double v = (double)atomic_load_explicit(&w->ns[k], memory_order_relaxed);
        if (s > cur - seconds && s <= cur)
            sum += v;
        else if (s == cur - seconds)
            sum += v * (1 - into);
    }
    return sum / seconds;
}
