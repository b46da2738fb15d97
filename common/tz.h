/* tz.h - time zones from the system's tz database (TZif files under
 * /usr/share/zoneinfo, or $TZDIR), read without touching the process's own
 * time zone (tzset and the TZ variable are process-wide, and threads run):
 * the UTC offset of a named zone at any instant, daylight saving included,
 * with the file's POSIX rule for instants past its last transition. */
#ifndef BG_TZ_H
#define BG_TZ_H

#include <stdint.h>

#include "common/error.h"

struct tz;

/* Loads an IANA zone ("America/Sao_Paulo"); NULL or "" is the host's: the
 * TZ environment variable's, read as glibc reads it (":Area/City",
 * "Area/City" or a zone file's path; a POSIX rule such as
 * "EST5EDT,M3.2.0,M11.1.0"; set but empty, UTC), else /etc/localtime. A TZ
 * that is none of these is BG_ECONFIG naming it. A name with "..", a
 * leading '/' or characters outside [A-Za-z0-9/_+-] is refused. */
int tz_load(const char *name, struct tz **out, struct error *err);
/* /etc/localtime alone, "localtime": whatever TZ says. */
int tz_load_localtime(struct tz **out, struct error *err);
void tz_free(struct tz *z);
const char *tz_name(const struct tz *z);
/* Seconds east of UTC in force at the UTC instant t (Unix seconds). */
int32_t tz_offset(const struct tz *z, int64_t t);

#endif
