/* api_file.c - an answer that is a file's first N bytes, read and written
 * piece by piece as the client takes them: a job's results (GET
 * /v2/jobs/{id}/results) and a Batch API file (GET /v1/files/{id}/content).
 *
 * Both read the whole file into memory on the IO thread and copied it into
 * the answer: a job of a million lines held its ~500 MB results twice, and
 * every other connection of that IO thread waited for the read. Here the
 * IO thread reads 64 KiB at a time, only while the answer has less than
 * API_FILE_AHEAD bytes waiting for the socket, and goes on when the client
 * has taken them (http_request_on_drain). */
#include "gateway/api.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/http.h"

#define API_FILE_PIECE 65536
#define API_FILE_AHEAD (4 * API_FILE_PIECE)

struct api_file {
    struct http_request *req;
    int fd;
    int64_t at, end;
};

static void api_file_end(struct api_file *f, int broken)
{
    struct http_request *req = f->req;
    http_request_on_drain(req, NULL, NULL);
    http_request_on_abort(req, NULL, NULL);
    close(f->fd);
    free(f);
    http_respond_finish(req, broken);
}

/* Writes pieces while the answer's buffer has room; ends the answer at
 * the last byte. A read that fails, or finds the file shorter than it was
 * (cut since the answer began), ends it broken: the client sees a short
 * answer, not a wrong one. */
static void api_file_pump(struct http_request *req, void *arg)
{
    struct api_file *f = arg;
    char piece[API_FILE_PIECE];
    while (f->at < f->end && http_respond_buffered(req) < API_FILE_AHEAD) {
        size_t want = f->end - f->at < (int64_t)sizeof piece ? (size_t)(f->end - f->at)
                                                             : sizeof piece;
        ssize_t n = pread(f->fd, piece, want, f->at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || http_respond_write(req, piece, (size_t)n) < 0) {
            api_file_end(f, 1);
            return;
        }
        f->at += n;
    }
    if (f->at == f->end)
        api_file_end(f, 0);
}

static void api_file_abort(struct http_request *req, void *arg)
{
    (void)req;
    api_file_end(arg, 1);   /* the answer is discarded */
}

int api_respond_file(struct http_request *req, const char *path, int64_t bytes,
                     const char *content_type, char *why, size_t cap)
{
    if (bytes <= 0) {   /* nothing of it is wanted: the file need not even exist yet */
        http_respond(req, 200, content_type, "", 0, NULL);
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(why, cap, "cannot read %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (sb.st_size < bytes) {
        snprintf(why, cap, "%s has %lld bytes, fewer than the %lld it should hold", path,
                 (long long)sb.st_size, (long long)bytes);
        close(fd);
        return -1;
    }
    struct api_file *f = malloc(sizeof *f);
    if (!f) {
        snprintf(why, cap, "out of memory");
        close(fd);
        return -1;
    }
    *f = (struct api_file){req, fd, 0, bytes};
    char head[160];
    int hl = snprintf(head, sizeof head, "Content-Type: %s\r\n", content_type);
    bool head_only = http_request_method(req) == HTTP_M_HEAD;
    if (http_respond_begin(req, 200, bytes, head_only, head, (size_t)hl) < 0 || head_only) {
        f->end = 0;   /* nothing to write: the client is gone, or asked HEAD */
        api_file_end(f, 0);
        return 0;
    }
    http_request_on_abort(req, api_file_abort, f);
    http_request_on_drain(req, api_file_pump, f);
    api_file_pump(req, f);
    return 0;
}
