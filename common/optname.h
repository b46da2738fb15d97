/* optname.h - the name of the option getopt_long just refused, for the
 * message that says which: inside a cluster of short options ("-Zq")
 * getopt has not moved optind yet, and argv[optind - 1] named the
 * argument before (batchgate report -Zq said "unknown option report"). */
#ifndef BG_OPTNAME_H
#define BG_OPTNAME_H

#include <ctype.h>
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

/* The option that took the next option as its value, or NULL: with the
 * value left out, "--io-threads --config x" gave --io-threads the value
 * "--config" and x was a stray argument, which is what the message named.
 * Call after each option; a value written --opt=--x is taken as given. */
static inline const char *optname_took_option(char *const *argv)
{
    if (!optarg || optind < 2 || argv[optind - 1] != optarg)
        return NULL;
    if (strncmp(optarg, "--", 2) != 0 || !isalpha((unsigned char)optarg[2]))
        return NULL;
    return argv[optind - 2];
}

#endif
