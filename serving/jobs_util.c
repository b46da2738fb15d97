/* jobs_util.c - what the jobs runner's two halves (jobs.c, jobs_batch.c)
 * both use: ids, new files made durable, the clock, a job's tenant. */
#include "serving/jobs_impl.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

bool jobs_look_due(int64_t *last, int64_t now, int64_t every)
{
    if (*last && now >= *last && now < *last + every)
        return false;
    *last = now;
    return true;
}

int64_t jobs_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t jobs_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define JOBS_DB_PAUSE_MIN_NS 1000000000LL
#define JOBS_DB_PAUSE_MAX_NS 30000000000LL

double jobs_db_trouble(struct jobs *j)
{
    j->db_pause_ns = j->db_pause_ns ? j->db_pause_ns * 2 : JOBS_DB_PAUSE_MIN_NS;
    if (j->db_pause_ns > JOBS_DB_PAUSE_MAX_NS)
        j->db_pause_ns = JOBS_DB_PAUSE_MAX_NS;
    j->db_pause_until_ns = jobs_mono_ns() + j->db_pause_ns;
    return (double)j->db_pause_ns / 1e9;
}

void jobs_db_ok(struct jobs *j) { j->db_pause_ns = 0; }

bool jobs_db_paused(const struct jobs *j) { return jobs_mono_ns() < j->db_pause_until_ns; }

bool jobs_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

/* A new file's name survives a power loss only once its folder is synced
 * too (a killed process needs only the file's own sync). */
void jobs_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* The index of the job's tenant. A job from before tenants ("") is the
 * default's; so is one whose tenant left the configuration since, rather
 * than failing work that was accepted. */
int jobs_tenant_index(const struct jobs *j, const char *name)
{
    int t = name[0] ? tenants_find(j->tenants, name) : -1;
    if (t >= 0)
        return t;
    if (name[0] && strcmp(name, "default") != 0)
        log_warn("a job of tenant \"%s\", which is not configured any more, runs as \"default\"",
                 name);
    return 0;
}

void jobs_new_id(const char *prefix, char *id, size_t cap)
{
    unsigned char r[8] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        uint64_t t = (uint64_t)jobs_mono_ns();
        memcpy(r, &t, sizeof r);
    }
    snprintf(id, cap, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, r[0], r[1], r[2], r[3], r[4],
             r[5], r[6], r[7]);
}

bool jobs_own_name(const char *name, const char *prefix, const char *suffix, char *id,
                   size_t cap)
{
    size_t np = strlen(prefix), ns = strlen(suffix), n = strlen(name);
    if (n != np + 16 + ns || strncmp(name, prefix, np) || strcmp(name + np + 16, suffix))
        return false;
    for (size_t i = np; i < np + 16; i++)
        if (!strchr("0123456789abcdef", name[i]) || !name[i])
            return false;
    snprintf(id, cap, "%.*s", (int)(np + 16), name);
    return true;
}

void jobs_sweep_dir(struct jobs *j, const char *dir,
                    bool (*orphan)(struct jobs *j, const char *name))
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        char path[4500];
        if (!orphan(j, e->d_name))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0)
            n++;
    }
    closedir(d);
    if (n)
        log_info("%s: %d file%s no row needs any more deleted (left by a crash)", dir, n,
                 n == 1 ? "" : "s");
}

/* A full disk or quota passes: the caller may try again (503). */
static int jobs_io_code(int e) { return e == ENOSPC || e == EDQUOT ? BG_ESTORAGE : BG_EIO; }

int jobs_write_file(const char *path, const char *data, size_t len, struct error *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return error_set(err, jobs_io_code(errno), "cannot create %s: %s", path,
                         strerror(errno));
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            unlink(path);
            return error_set(err, jobs_io_code(e), "cannot write %s: %s", path, strerror(e));
        }
        off += (size_t)w;
    }
    int e = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    if (!e)
        return 0;
    unlink(path);
    return error_set(err, jobs_io_code(e), "cannot sync %s: %s", path, strerror(e));
}
