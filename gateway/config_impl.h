/* config_impl.h - what config.c and config_tenants.c share; not for users
 * of the configuration. */
#ifndef BG_CONFIG_IMPL_H
#define BG_CONFIG_IMPL_H

#include <jansson.h>

#include "common/schema.h"
#include "gateway/config.h"

/* The `auth` object's rows (over struct tenants_config) and the row of one
 * `tenants[]` element (over struct tenant_config). */
extern const struct schema_field config_auth_fields[];
extern const struct schema_field config_tenant_item;

/* t[0] as the tenant "default" with every field at its default; n = 1. */
void config_tenants_defaults(struct tenants_config *t);
/* After the file is read: the rules that span tenants (names and keys
 * unique, shares that fit in one device), a configured "default" moved to
 * t[0], and auth.required's default ("true once any tenant has keys").
 * The file's `tenants` array, when there is one, was read into t[1..]
 * with its length in n. */
int config_tenants_finish(struct tenants_config *t, json_t *root, const char *file,
                          struct error *err);

#endif
