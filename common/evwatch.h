/* evwatch.h - adding a libevent event when memory may run out.
 *
 * event_add and evtimer_add fail for want of memory (libevent grows its fd
 * map and its timer heap). Code that ignores it leaves a connection nobody
 * watches or a call with no timeout: a hang. evwatch_add adds the event
 * and, when libevent cannot, activates `alarm` instead (event_active
 * allocates nothing), so the owner's callback runs from the loop and can
 * end what it was watching. The activation is marked EV_READ: libevent
 * cancels an activation marked EV_TIMEOUT when a timer is re-added, and
 * the alarm is often the owner's own timer. Callers keep a flag of their
 * own to tell the alarm from the event's real firing. */
#ifndef BG_EVWATCH_H
#define BG_EVWATCH_H

#include <event2/event.h>

/* Returns 0, or -1 after activating alarm. */
static inline int evwatch_add(struct event *ev, const struct timeval *tv, struct event *alarm)
{
    if (event_add(ev, tv) == 0)
        return 0;
    event_active(alarm, EV_READ, 0);
    return -1;
}

#endif
