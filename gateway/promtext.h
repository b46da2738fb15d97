/* promtext.h - pieces of Prometheus' text format (0.0.4) that both writers
 * of /metrics use (api_metrics.c, batchgate's names; metrics_triton.c,
 * Triton's): a family's HELP and TYPE lines, and a label value escaped. */
#ifndef BG_PROMTEXT_H
#define BG_PROMTEXT_H

struct buf;

/* "# HELP <prefix><name> help\n# TYPE <prefix><name> type\n" */
void promtext_head(struct buf *b, const char *prefix, const char *name, const char *type,
                   const char *help);
/* v with \, " and newline escaped, as a label value must be (no quotes). */
void promtext_label(struct buf *b, const char *v);

#endif
