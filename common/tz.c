/* tz.c - see tz.h. TZif per RFC 8536 (version 2 and later: the 64-bit data
 * block and the footer); a version-1 file is read from its 32-bit block. */
#include "common/tz.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TZ_NAME_MAX 128
#define TZ_FILE_MAX (1 << 20)

/* A POSIX TZ rule ("EST5EDT,M3.2.0,M11.1.0"): the footer of a TZif file. */
struct tz_rule_date {
    char form;                        /* 'M': Mm.w.d; 'J': Jn (1..365, no Feb 29); 'n': n (0..365) */
    int month, week, wday;            /* Mm.w.d */
    int day;                          /* Jn or n */
    int32_t time;                     /* seconds after local midnight (may be < 0 or > 24 h) */
};

struct tz_rule {
    bool valid, has_dst;
    int32_t std_off, dst_off;         /* seconds east of UTC */
    struct tz_rule_date start, end;
};

struct tz {
    char name[TZ_NAME_MAX];
    int64_t *at;                      /* transition instants, ascending */
    uint8_t *idx;                     /* the type in force from at[i] */
    int n;
    int32_t *off;                     /* each type's offset */
    int ntypes;
    int32_t before;                   /* in force before the first transition */
    struct tz_rule rule;
};

static bool tz_name_ok(const char *s)
{
    if (!*s || *s == '/' || strstr(s, "..") || strlen(s) >= TZ_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("/_+-", *s))
            return false;
    return true;
}

static int64_t tz_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    if (n == 4)
        return (int32_t)(uint32_t)v;
    return (int64_t)v;
}

/* ---- the POSIX rule ---- */

static const char *tz_rule_name(const char *p)
{
    if (*p == '<') {
        const char *e = strchr(p, '>');
        return e ? e + 1 : NULL;
    }
    const char *q = p;
    while (isalpha((unsigned char)*q))
        q++;
    return q - p >= 3 ? q : NULL;
}

/* [+-]hh[:mm[:ss]] into seconds; NULL when malformed. */
static const char *tz_rule_hms(const char *p, int32_t *out)
{
    int sign = 1;
    if (*p == '+' || *p == '-')
        sign = *p++ == '-' ? -1 : 1;
    if (!isdigit((unsigned char)*p))
        return NULL;
    int32_t v[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        if (k && *p != ':')
            break;
        if (k)
            p++;
        if (!isdigit((unsigned char)*p))
            return NULL;
        while (isdigit((unsigned char)*p))
            v[k] = v[k] * 10 + (*p++ - '0');
    }
    *out = sign * (v[0] * 3600 + v[1] * 60 + v[2]);
    return p;
}

/* A date of the rule: Mm.w.d (what zic writes), Jn or n (a TZ a person
 * wrote: glibc reads all three). */
static const char *tz_rule_date(const char *p, struct tz_rule_date *d)
{
    memset(d, 0, sizeof *d);
    if (*p == 'M') {
        d->form = 'M';
        if (sscanf(p + 1, "%d.%d.%d", &d->month, &d->week, &d->wday) != 3)
            return NULL;
    } else if (*p == 'J' || isdigit((unsigned char)*p)) {
        d->form = *p == 'J' ? 'J' : 'n';
        const char *q = p + (*p == 'J');
        if (!isdigit((unsigned char)*q))
            return NULL;
        while (isdigit((unsigned char)*q) && d->day <= 366)
            d->day = d->day * 10 + (*q++ - '0');
        if (d->form == 'J' ? d->day < 1 || d->day > 365 : d->day > 365)
            return NULL;
    } else {
        return NULL;
    }
    while (*p && *p != ',' && *p != '/')
        p++;
    d->time = 2 * 3600;
    if (*p == '/')
        p = tz_rule_hms(p + 1, &d->time);
    if (!p || (d->form == 'M' && (d->month < 1 || d->month > 12 || d->week < 1 ||
                                  d->week > 5 || d->wday < 0 || d->wday > 6)))
        return NULL;
    return p;
}

static void tz_rule_parse(const char *s, struct tz_rule *r)
{
    memset(r, 0, sizeof *r);
    const char *p = tz_rule_name(s);
    int32_t off;
    if (!p || !(p = tz_rule_hms(p, &off)))
        return;
    r->std_off = -off;   /* POSIX counts west as positive */
    r->valid = true;
    if (!*p)
        return;
    if (!(p = tz_rule_name(p))) {
        r->valid = false;
        return;
    }
    r->has_dst = true;
    r->dst_off = r->std_off + 3600;
    if (*p && *p != ',') {
        if (!(p = tz_rule_hms(p, &off))) {
            r->valid = false;
            return;
        }
        r->dst_off = -off;
    }
    if (*p != ',' || !(p = tz_rule_date(p + 1, &r->start)) || *p != ',' ||
        !(p = tz_rule_date(p + 1, &r->end)))
        r->valid = false;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static int64_t tz_days(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int tz_month_days(int64_t y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return days[m - 1] + (m == 2 && leap);
}

/* The UTC instant of a rule date in year y, its local time read in `off`. */
static int64_t tz_rule_when(const struct tz_rule_date *d, int64_t y, int32_t off)
{
    if (d->form != 'M') {
        /* Jn counts 1..365 and never Feb 29 (J60 is March 1st); n counts
         * from 0 with it. */
        bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        int64_t yday = d->form == 'J' ? d->day - 1 + (leap && d->day >= 60) : d->day;
        return (tz_days(y, 1, 1) + yday) * 86400 + d->time - off;
    }
    int64_t first = tz_days(y, d->month, 1);
    int wday1 = (int)(((first % 7) + 7 + 4) % 7);   /* 1970-01-01 was a Thursday */
    int day = 1 + (d->wday - wday1 + 7) % 7 + (d->week - 1) * 7;
    while (day > tz_month_days(y, d->month))
        day -= 7;
    return (tz_days(y, d->month, day) + 0) * 86400 + d->time - off;
}

static int64_t tz_year_of(int64_t t)
{
    int64_t days = t >= 0 ? t / 86400 : (t - 86399) / 86400;
    int64_t y = 1970 + days / 366;   /* below the year; walk up */
    while (tz_days(y + 1, 1, 1) <= days)
        y++;
    while (tz_days(y, 1, 1) > days)
        y--;
    return y;
}

static int32_t tz_rule_offset(const struct tz_rule *r, int64_t t)
{
    if (!r->has_dst)
        return r->std_off;
    int64_t y = tz_year_of(t + r->std_off);
    int64_t start = tz_rule_when(&r->start, y, r->std_off);
    int64_t end = tz_rule_when(&r->end, y, r->dst_off);
    if (start < end)   /* northern: DST inside the year */
        return t >= start && t < end ? r->dst_off : r->std_off;
    return t >= end && t < start ? r->std_off : r->dst_off;   /* southern: across new year */
}

/* ---- the file ---- */

static int tz_parse(struct tz *z, const uint8_t *b, size_t len, struct error *err)
{
    const char *bad = "not a TZif file";
    if (len < 44 || memcmp(b, "TZif", 4) != 0)
        goto fail;
    int version = b[4] ? b[4] - '0' : 1;
    const uint8_t *h = b;
    int tsize = 4;
    for (int pass = 0; pass < 2; pass++) {
        if ((size_t)(h - b) + 44 > len || memcmp(h, "TZif", 4) != 0)
            goto fail;
        int64_t isut = tz_be(h + 20, 4), isstd = tz_be(h + 24, 4), leap = tz_be(h + 28, 4),
                tcnt = tz_be(h + 32, 4), typ = tz_be(h + 36, 4), chr = tz_be(h + 40, 4);
        if (isut < 0 || isstd < 0 || leap < 0 || tcnt < 0 || typ < 1 || typ > 256 || chr < 0)
            goto fail;
        size_t body = (size_t)(tcnt * tsize + tcnt + typ * 6 + chr + leap * (tsize + 4) + isstd +
                               isut);
        const uint8_t *d = h + 44;
        if ((size_t)(d - b) + body > len)
            goto fail;
        if (version >= 2 && pass == 0) {   /* skip to the 64-bit block */
            h = d + body;
            tsize = 8;
            continue;
        }
        /* A zone counting leap seconds (right/...): its transitions are on
         * that scale and local time would need its table; read as a
         * plain zone, windows ran 27 s ahead of the zone's own clock. */
        if (leap > 0) {
            bad = "it counts leap seconds (a right/ zone), which windows do not: name the zone "
                  "without right/";
            goto fail;
        }
        z->n = (int)tcnt;
        z->ntypes = (int)typ;
        z->at = calloc((size_t)(tcnt ? tcnt : 1), sizeof *z->at);
        z->idx = calloc((size_t)(tcnt ? tcnt : 1), 1);
        z->off = calloc((size_t)typ, sizeof *z->off);
        if (!z->at || !z->idx || !z->off)
            return error_set(err, BG_ENOMEM, "out of memory for time zone %s", z->name);
        for (int i = 0; i < tcnt; i++)
            z->at[i] = tz_be(d + (size_t)i * tsize, tsize);
        d += tcnt * tsize;
        for (int i = 0; i < tcnt; i++) {
            z->idx[i] = d[i];
            if (d[i] >= typ)
                goto fail;
        }
        d += tcnt;
        for (int i = 0; i < typ; i++)
            z->off[i] = (int32_t)tz_be(d + i * 6, 4);
        /* Before the first transition: the first standard-time type. */
        z->before = z->off[0];
        for (int i = 0; i < typ; i++)
            if (!d[i * 6 + 4]) {
                z->before = z->off[i];
                break;
            }
        const uint8_t *foot = h + 44 + body;
        if (version >= 2 && (size_t)(foot - b) < len && *foot == '\n') {
            const uint8_t *e = memchr(foot + 1, '\n', len - (size_t)(foot + 1 - b));
            if (e && e - foot - 1 < 64) {
                char rule[64];
                memcpy(rule, foot + 1, (size_t)(e - foot - 1));
                rule[e - foot - 1] = '\0';
                tz_rule_parse(rule, &z->rule);
            }
        }
        return 0;
    }
fail:
    return error_set(err, BG_ECONFIG, "time zone %s: %s", z->name, bad);
}

/* Reads the zone file at path, called name. */
static int tz_load_file(const char *name, const char *path, struct tz **out, struct error *err)
{
    struct tz *z = calloc(1, sizeof *z);
    if (!z)
        return error_set(err, BG_ENOMEM, "out of memory for time zone %s", name);
    snprintf(z->name, sizeof z->name, "%s", name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        tz_free(z);
        return error_set(err, BG_ECONFIG, "time zone %.80s: cannot read %s: %s (is the tzdata "
                         "package installed?)", name, path, strerror(e));
    }
    uint8_t *buf = malloc(TZ_FILE_MAX);
    size_t len = buf ? fread(buf, 1, TZ_FILE_MAX, f) : 0;
    fclose(f);
    int rc = buf ? tz_parse(z, buf, len, err)
                 : error_set(err, BG_ENOMEM, "out of memory for time zone %s", name);
    free(buf);
    if (rc) {
        tz_free(z);
        return rc;
    }
    *out = z;
    return 0;
}

/* A zone of its POSIX rule alone (TZ="<+0545>-5:45", "EST5EDT,M3.2.0,M11.1.0"),
 * called name. */
static int tz_load_rule(const char *name, const char *rule, struct tz **out, struct error *err)
{
    struct tz *z = calloc(1, sizeof *z);
    if (!z)
        return error_set(err, BG_ENOMEM, "out of memory for time zone %s", name);
    snprintf(z->name, sizeof z->name, "%s", name);
    tz_rule_parse(rule, &z->rule);
    *out = z;
    return 0;
}

int tz_load_localtime(struct tz **out, struct error *err)
{
    *out = NULL;
    /* Named by its link into a zoneinfo folder, as timedatectl names it
     * (/etc/localtime -> /usr/share/zoneinfo/Europe/Paris): GET
     * /v2/governance said "localtime" for the host's zone. A copy of the
     * file, or a link elsewhere, stays "localtime". */
    char target[4096], name[TZ_NAME_MAX] = "localtime";
    ssize_t n = readlink("/etc/localtime", target, sizeof target - 1);
    if (n > 0) {
        target[n] = '\0';
        const char *z = strstr(target, "zoneinfo/");
        if (z && z[9] && strlen(z + 9) < sizeof name)
            snprintf(name, sizeof name, "%s", z + 9);
    }
    return tz_load_file(name, "/etc/localtime", out, err);
}

int tz_load(const char *name, struct tz **out, struct error *err)
{
    *out = NULL;
    char path[4200];
    const char *dir = getenv("TZDIR");
    const char *zoneinfo = dir && *dir ? dir : "/usr/share/zoneinfo";
    if (!name || !*name) {
        /* The host's zone is TZ's when it is set, as for every program
         * there (a container sets TZ, not /etc/localtime), read as glibc
         * reads it: ":Asia/Kolkata", "Asia/Kolkata" or a zone file's path;
         * a POSIX rule ("<+0545>-5:45", "EST5EDT,M3.2.0,M11.1.0", dates
         * also as Jn or n); set but empty (or ":"), UTC. One that is none
         * of these is refused, naming it: it fell back to /etc/localtime
         * without a word, and every window ran hours off while the host's
         * programs kept TZ's time. */
        const char *env = getenv("TZ");
        if (!env)
            return tz_load_localtime(out, err);
        if (!*env || strcmp(env, ":") == 0)
            return tz_load_rule("UTC", "UTC0", out, err);
        const char *zone = env + (*env == ':');
        struct stat sb;
        if (*zone == '/')
            snprintf(path, sizeof path, "%s", zone);
        else
            snprintf(path, sizeof path, "%s/%s", zoneinfo, tz_name_ok(zone) ? zone : "");
        struct error why = {0};
        if ((*zone == '/' || tz_name_ok(zone)) && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
            tz_load_file(zone, path, out, &why) == 0)
            return 0;
        struct tz_rule r;
        tz_rule_parse(env, &r);
        if (*env != ':' && r.valid)
            return tz_load_rule(env, env, out, err);
        return error_set(err, BG_ECONFIG, "TZ=\"%.80s\" names no time zone batchgate can read: "
                         "%s (an IANA name such as \"Europe/Paris\" under %s, a zone file's "
                         "path, or a POSIX rule with its dates such as "
                         "\"EST5EDT,M3.2.0,M11.1.0\")", env,
                         why.msg[0] ? why.msg : "no such zone file, and not a POSIX rule",
                         zoneinfo);
    }
    if (!tz_name_ok(name))
        return error_set(err, BG_ECONFIG, "time zone \"%.80s\": not an IANA zone name (like "
                         "\"Europe/Paris\")", name);
    snprintf(path, sizeof path, "%s/%s", zoneinfo, name);
    return tz_load_file(name, path, out, err);
}

void tz_free(struct tz *z)
{
    if (!z)
        return;
    free(z->at);
    free(z->idx);
    free(z->off);
    free(z);
}

const char *tz_name(const struct tz *z) { return z->name; }

int32_t tz_offset(const struct tz *z, int64_t t)
{
    if (z->n == 0 || t < z->at[0])
        return z->n == 0 && z->rule.valid ? tz_rule_offset(&z->rule, t) : z->before;
    if (t >= z->at[z->n - 1] && z->rule.valid)
        return tz_rule_offset(&z->rule, t);
    int lo = 0, hi = z->n - 1;   /* the last transition at or before t */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (z->at[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return z->off[z->idx[lo]];
}
