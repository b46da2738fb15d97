/* tenant.c - see tenant.h. */
#include "serving/tenant.h"

#include <fnmatch.h>
#include <string.h>

bool tenant_allows(const struct tenant_config *t, const char *model)
{
    if (t->nmodels == 0)
        return true;
    for (int i = 0; i < t->nmodels; i++)
        if (fnmatch(t->models[i], model, 0) == 0)
            return true;
    return false;
}

int tenants_find(const struct tenants_config *tc, const char *name)
{
    for (int i = 0; tc && i < tc->n; i++)
        if (strcmp(tc->t[i].name, name) == 0)
            return i;
    return -1;
}
