/* optname.h - the name of the option getopt_long just refused, for the
 * message that says which: inside a cluster of short options ("-Zq")
 * getopt has not moved optind yet, and argv[optind - 1] named the
 * argument before (batchgate report -Zq said "unknown option report"). */
#ifndef BG_OPTNAME_H
#define BG_OPTNAME_H

#include <getopt.h>
#include <stdio.h>
#include <string.h>

/* Call in the '?' or ':' case; buf holds the short form ("-Z"). */
static inline const char *optname_refused(char *const *argv, char *buf, size_t cap)
{
    const char *prev = optind > 0 ? argv[optind - 1] : "";
    /* A long option (unknown, or one missing its value) is the argument
     * getopt just passed; a short one is optopt. */
    if (strncmp(prev, "--", 2) == 0 || optopt == 0)
        return prev;
    snprintf(buf, cap, "-%c", optopt);
    return buf;
}

#endif
