/* promtext.c - see promtext.h. */
#include "gateway/promtext.h"

#include "common/buf.h"

void promtext_head(struct buf *b, const char *prefix, const char *name, const char *type,
                   const char *help)
{
    buf_appendf(b, "# HELP %s%s %s\n# TYPE %s%s %s\n", prefix, name, help, prefix, name, type);
}

void promtext_label(struct buf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            buf_appendf(b, "\\%c", *v);
        else if (*v == '\n')
            buf_append(b, "\\n", 2);
        else
            buf_append(b, v, 1);
    }
}
