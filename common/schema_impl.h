/* schema_impl.h - what schema.c and schema_doc.c share; not for users of
 * the schema. */
#ifndef BG_SCHEMA_IMPL_H
#define BG_SCHEMA_IMPL_H

#include <stddef.h>

#include "common/schema.h"

/* The name s in names (NULL-name ended), or NULL. */
const struct schema_name *schema_name_find(const struct schema_name *names, const char *s);
/* "a, b, c" into buf, each name between two `quote`s ("`a`, `b`"). */
const char *schema_names_join(const struct schema_name *names, const char *quote, char *buf,
                              size_t cap);
/* What an array holds: "objects", or "object" when it holds exactly one. */
const char *schema_noun(const struct schema_field *array);

#endif
